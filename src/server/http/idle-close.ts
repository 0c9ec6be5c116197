import type http from "node:http";
import type net from "node:net";

/**
 * How long an HTTP/1.1 keep-alive connection must have been idle before a
 * shutdown closes it. Closing an idle connection always races a client that
 * sends its next request on it at that moment (HTTP/1.1 has no GOAWAY): the
 * request is lost to a reset. A connection a client is using goes idle for
 * microseconds between an answer and the next request, so it is left to
 * carry that request, which is answered (503 SHUTTING_DOWN, Connection:
 * close) and then closes; a connection quiet for this long is one the client
 * has stopped using, and closing it risks nothing a client expects.
 */
const QUIET_BEFORE_CLOSE_MS = 1_000;

/** Per connection: requests being answered, whether one was, and since when none is. */
interface ConnectionUse {
  busy: number;
  answered: boolean;
  idleSince: number;
}

/** The HTTP/1.1 connections of a server, and a shutdown's way to close them once each is quiet. */
export interface IdleConnections {
  /** Starts tracking a connection about to be handed to the server. */
  track(socket: net.Socket): void;
  /**
   * Closes every connection idle for QUIET_BEFORE_CLOSE_MS now, then keeps
   * closing the others as they reach it, until none is left open.
   */
  closeWhenQuiet(): void;
}

/** Tracks h1's connections through its 'request' events. */
export function trackIdleConnections(h1: http.Server): IdleConnections {
  const uses = new Map<net.Socket, ConnectionUse>();
  let timer: NodeJS.Timeout | undefined;
  h1.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const use = uses.get(req.socket as net.Socket);
    if (use === undefined) return;
    use.busy++;
    res.once("close", () => {
      use.busy--;
      use.answered = true;
      use.idleSince = Date.now();
    });
  });
  const sweep = () => {
    timer = undefined;
    const now = Date.now();
    for (const [socket, use] of uses) {
      // A connection handed over holds the start of its first request: the header and request timeouts bound it.
      if (use.answered && use.busy === 0 && now - use.idleSince >= QUIET_BEFORE_CLOSE_MS) socket.destroy();
    }
    if (uses.size > 0) timer = setTimeout(sweep, QUIET_BEFORE_CLOSE_MS / 4).unref();
  };
  return {
    track(socket) {
      uses.set(socket, { busy: 0, answered: false, idleSince: Date.now() });
      socket.once("close", () => uses.delete(socket));
    },
    closeWhenQuiet() {
      if (timer === undefined) sweep();
    },
  };
}
