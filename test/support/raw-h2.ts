import { once } from "node:events";
import net from "node:net";

/**
 * A raw HTTP/2 client: frames written by hand, so it can do what a polite
 * client (node:http2, nghttp2) never does: ignore the server's limits, never
 * acknowledge its SETTINGS, never close.
 */

/** Frame types used here (RFC 9113 §6). */
export const FrameType = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, CONTINUATION: 9 } as const;
export const END_STREAM = 0x1;
const END_HEADERS = 0x4;
const ACK = 0x1;

/** The client connection preface (RFC 9113 §3.4). */
export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** One frame as received. */
export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

/** Encodes one frame. */
export function encodeFrame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head.writeUInt8(type, 3);
  head.writeUInt8(flags, 4);
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** An HPACK integer with an n-bit prefix (RFC 7541 §5.1). */
function hpackInteger(value: number, prefixBits: number, firstByte = 0): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([firstByte | value]);
  const bytes = [firstByte | max];
  for (value -= max; value >= 128; value = Math.floor(value / 128)) bytes.push((value % 128) + 128);
  bytes.push(value);
  return Buffer.from(bytes);
}

/** A header block of literal fields without indexing, no Huffman coding: no HPACK state to keep. */
export function headerBlock(headers: [string, string][]): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of headers) {
    parts.push(
      Buffer.from([0]),
      hpackInteger(name.length, 7),
      Buffer.from(name),
      hpackInteger(Buffer.byteLength(value), 7),
      Buffer.from(value),
    );
  }
  return Buffer.concat(parts);
}

/** A HEADERS frame opening a gRPC POST to path on streamId, left open for DATA. */
export function grpcRequestHeaders(streamId: number, path: string, extra: [string, string][] = []): Buffer {
  const block = headerBlock([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...extra,
  ]);
  return encodeFrame(FrameType.HEADERS, END_HEADERS, streamId, block);
}

/** A connected raw client; `frames` collects every frame the server sends. */
export interface RawH2Client {
  socket: net.Socket;
  frames: Frame[];
  write(...frames: Buffer[]): void;
  /** Resolves with the first frame (seen or to come) matching `match`; rejects after ms. */
  waitFor(match: (f: Frame) => boolean, ms: number, what: string): Promise<Frame>;
  /** Acknowledges the server's SETTINGS, as a polite client would. */
  ackSettings(): Promise<void>;
  close(): void;
}

/** Opens a TCP connection that never half-closes by itself and sends the preface and an empty SETTINGS. */
export async function rawH2(port: number): Promise<RawH2Client> {
  const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true });
  socket.on("error", () => {});
  await once(socket, "connect");
  const frames: Frame[] = [];
  const waiters: { match: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];
  let buf = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
      const length = buf.readUIntBE(0, 3);
      const frame = { type: buf[3]!, flags: buf[4]!, streamId: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + length) };
      buf = buf.subarray(9 + length);
      frames.push(frame);
      for (const w of waiters.filter((w) => w.match(frame))) w.resolve(frame);
    }
  });
  socket.write(Buffer.concat([PREFACE, encodeFrame(FrameType.SETTINGS, 0, 0)]));
  const client: RawH2Client = {
    socket,
    frames,
    write: (...out) => void socket.write(Buffer.concat(out)),
    waitFor(match, ms, what) {
      const seen = frames.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${what}: no such frame within ${ms} ms`)), ms);
        waiters.push({ match, resolve: (f) => (clearTimeout(timer), resolve(f)) });
      });
    },
    async ackSettings() {
      await client.waitFor((f) => f.type === FrameType.SETTINGS && (f.flags & ACK) === 0, 5000, "server SETTINGS");
      client.write(encodeFrame(FrameType.SETTINGS, ACK, 0));
    },
    close: () => void socket.destroy(),
  };
  return client;
}

/** The 5-byte gRPC message prefix: not compressed, `length` bytes to follow. */
export function grpcPrefix(length: number): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(length, 1);
  return prefix;
}
