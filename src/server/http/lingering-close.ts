import type net from "node:net";
import { stopReading } from "./socket-reading.js";

/**
 * What a closing connection reads and drops at most while it lingers: enough for the client to
 * have read the answer sent before it (its kernel discards an unread answer on a reset).
 */
export const MAX_LINGER_BYTES = 64 * 1024;
/** A closing connection may linger this long at most for its peer's close (see lingerOnClose). */
export const MAX_LINGER_MS = 5_000;

/**
 * Lingering close, as nginx and Apache do it. A response that closes the
 * connection while the client is still sending its body (a 413 from the
 * Content-Length alone) must not be followed at once by a close: the client's
 * kernel would get an RST for the bytes still arriving and drop our answer
 * unread (the client sees EPIPE or ECONNRESET, not the 413). Node closes such
 * a socket through destroySoon; here that ends our side, reads and drops
 * whatever still arrives, and destroys the socket when the client closes its
 * side or after ms; past MAX_LINGER_BYTES it stops reading and waits for the timer.
 */
export function lingerOnClose(socket: net.Socket, ms: number): void {
  socket.destroySoon = function lingeringClose(this: net.Socket): void {
    if (this.writable) this.end();
    if (this.readableEnded) {
      if (this.writableFinished) this.destroy();
      else this.once("finish", () => this.destroy());
      return;
    }
    const timer = setTimeout(() => this.destroy(), ms).unref();
    this.once("close", () => clearTimeout(timer));
    this.once("end", () => this.destroy());
    // Bytes, not only time: a client still pushing a refused body at loopback speed would
    // otherwise have the server read and drop gigabytes for it. Past the bound the socket
    // stops reading (the client's writes stall, its reads of the answer do not) until the timer.
    let dropped = 0;
    this.on("data", (chunk: Buffer) => {
      dropped += chunk.byteLength;
      if (dropped > MAX_LINGER_BYTES) stopReading(this);
    });
    this.resume();
  };
}
