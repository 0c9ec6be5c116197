import type { IncomingMessage, ServerResponse } from "node:http";
import http2 from "node:http2";
import { finished } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import { ENVELOPE_PREFIX_BYTES, EnvelopeTracker } from "../../codec/envelope.js";
import { invalidField } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, messageTooLarge, toConnectError } from "../errors.js";

/**
 * The one limit on a request message (config.maxMessageBytes) as the Connect
 * and gRPC-Web side enforces it: on the bytes as they stream in, on each
 * envelope's declared length before its payload is read, and on the output
 * of decompression while it inflates. connect-node's own readMaxBytes checks
 * stay behind these as a backstop, but they raise errors without an
 * ErrorInfo, and a violation found by them destroys the request, so the
 * client sees a reset instead of the answer; the checks here come first.
 */

/**
 * gzip and br for the Connect router, inflating at most `limit` bytes: zlib
 * stops as soon as its output passes maxOutputLength, so a bomb costs about
 * `limit` bytes, never its inflated size. Any other failure is the client's
 * bad data (INVALID_ARGUMENT; connect-node says INTERNAL for a truncated stream).
 */
export function boundedCompressions(limit: number, domain = DEFAULT_ERROR_DOMAIN): Compression[] {
  return [compressionGzip, compressionBrotli].map((inner) => ({
    name: inner.name,
    compress: (bytes) => inner.compress(bytes),
    decompress: (bytes) =>
      inner.decompress(bytes, limit).catch((err: unknown) => {
        if (err instanceof ConnectError && err.code === Code.ResourceExhausted) throw messageTooLarge(limit, domain);
        throw toConnectError(invalidField("request", `is not valid ${inner.name} data`), domain);
      }),
  }));
}

/** Enveloped bodies (gRPC-Web, Connect streaming) carry length-prefixed messages; other Connect bodies are one message. */
const ENVELOPED = /^application\/(grpc|connect\+)/i;

/** Whether a body of this Content-Type is length-prefixed messages rather than one message. */
export const isEnveloped = (contentType: string | undefined): boolean => ENVELOPED.test(contentType ?? "");

/** How limitedBody bounds one request's body. */
export interface BodyLimits {
  /** The largest message, in bytes. */
  limit: number;
  /** ErrorInfo.domain of a refusal. */
  domain?: string;
  /**
   * The call is unary: its body is one message, so a second envelope is
   * refused as soon as its prefix arrives, and the whole body is at most the
   * limit plus one envelope prefix (5 bytes) before it must end.
   */
  unary?: boolean;
  /**
   * A body still arriving this long after it started is dropped with its
   * connection: a client that leaves a body open must not keep what it sent
   * in memory until the listener's request timeout (minutes).
   */
  timeoutMs?: number;
  /** Turns the bytes on the wire into the body connect-node reads (gRPC-Web text mode's base64). */
  decode?: (wire: AsyncIterable<Uint8Array>) => AsyncIterable<Uint8Array>;
}

/** INVALID_ARGUMENT for a unary request body that carries a second message. */
function extraMessage(domain = DEFAULT_ERROR_DOMAIN): ConnectError {
  return toConnectError(invalidField("request", "holds more than one message: a unary call takes exactly one"), domain);
}

/**
 * The request body, refused with MESSAGE_TOO_LARGE as soon as it is known
 * to hold a message over the limit: from Content-Length before any byte is
 * read, from an envelope's prefix, or from the bytes counted so far; for a
 * unary call, refused as soon as a second envelope begins (see BodyLimits).
 * A refused body that is still arriving is drained only while the answer
 * is written: `res` gets Connection: close, so the connection ends with the
 * answer instead of reading whatever the client still sends. The caller
 * drops Content-Length from the headers it hands connect-node, whose own
 * check of it would come first.
 */
export function limitedBody(req: IncomingMessage, res: ServerResponse, opts: BodyLimits): AsyncIterable<Uint8Array> {
  const { limit, domain = DEFAULT_ERROR_DOMAIN } = opts;
  const enveloped = isEnveloped(req.headers["content-type"]);
  const declared = Number(req.headers["content-length"] ?? 0);
  const inspect = enveloped ? envelopeInspector(limit, domain, opts.unary === true) : byteCounter(limit, domain);
  return checkedChunks(
    req,
    res,
    () => {
      if (!enveloped && declared > limit) throw messageTooLarge(limit, domain);
      // (A text-mode body's length is its base64's: checked once decoded.)
      if (enveloped && opts.unary && !opts.decode && declared > limit + ENVELOPE_PREFIX_BYTES) throw messageTooLarge(limit, domain);
    },
    inspect,
    opts,
  );
}

/**
 * The whole body of a unary call that is one message (not enveloped), with
 * the limits and the clean-up of limitedBody, read with plain stream events:
 * the async iterator limitedBody builds on costs a unary call (the Connect
 * fast path) a generator, a promise per chunk and a share of its CPU. Fails
 * as reading limitedBody does: MESSAGE_TOO_LARGE, or the request's error (a
 * request destroyed at the timeout, or closed before its end, fails as Node's
 * stream.finished reports it).
 */
export function readUnaryMessage(req: IncomingMessage, res: ServerResponse, opts: BodyLimits): Promise<Buffer> {
  const { limit, domain = DEFAULT_ERROR_DOMAIN } = opts;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let seen = 0;
    let settled = false;
    const timer = opts.timeoutMs === undefined ? undefined : setTimeout(() => dropRequest(req), opts.timeoutMs);
    const settle = (err: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
      if (err === undefined) return resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, seen));
      stopReading(req, res);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.byteLength;
      if (seen > limit) settle(messageTooLarge(limit, domain));
      else chunks.push(chunk);
    };
    const onEnd = () => settle(undefined);
    const onError = (err: unknown) => settle(err);
    // Closed before its end without an error of its own: the premature close stream.finished reports.
    const onClose = () => finished(req, { writable: false }, (err) => settle(err ?? new Error("Premature close")));
    if (Number(req.headers["content-length"] ?? 0) > limit) return settle(messageTooLarge(limit, domain));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
    req.resume();
  });
}

/** A body left unread (refused or abandoned): as checkedChunks's clean-up. */
function stopReading(req: IncomingMessage, res: ServerResponse): void {
  if (req.readableEnded) return;
  if (!req.complete && !res.headersSent) res.setHeader("connection", "close");
  drainSome(req, res);
}

/** A length-prefixed message's prefix: one flags byte and a big-endian uint32 length. */

async function* checkedChunks(
  req: IncomingMessage,
  res: ServerResponse,
  precheck: () => void,
  inspect: (chunk: Uint8Array) => void,
  opts: BodyLimits,
): AsyncGenerator<Uint8Array> {
  const decode = opts.decode ?? ((wire) => wire);
  // Destroying the request closes the connection and makes the read below fail: what was read is dropped.
  const timer = opts.timeoutMs === undefined ? undefined : setTimeout(() => dropRequest(req), opts.timeoutMs);
  try {
    precheck();
    // Not destroyed on an early stop: a destroyed request takes its socket, and the answer, with it.
    for await (const chunk of decode(req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>)) {
      inspect(chunk);
      yield chunk;
    }
  } finally {
    clearTimeout(timer);
    // Refused or abandoned: the connection ends with the answer (Connection: close), and the rest of the
    // body is read and dropped only up to DRAIN_BYTES, then left unread: the answer is written meanwhile.
    stopReading(req, res);
  }
}

/**
 * How much of a refused body is read and dropped. A keep-alive connection
 * needs the whole rest read to stay in step, but a refused one is closed
 * instead; a little is still read so that a client writing its body sees
 * the answer before its writes block (the listener lingers on close for the
 * client's FIN, see one-port.ts).
 */
const DRAIN_BYTES = 64 * 1024;

function drainSome(req: IncomingMessage, res: ServerResponse): void {
  if (req.complete) return void req.resume();
  let drained = 0;
  const drop = (chunk: Buffer) => {
    drained += chunk.byteLength;
    if (drained < DRAIN_BYTES) return;
    req.off("data", drop);
    req.pause();
  };
  req.on("data", drop);
  req.resume();
  // Once the answer is out, whatever the lingering close still reads is dropped, not buffered.
  res.once("finish", () => req.resume());
}

function byteCounter(limit: number, domain: string): (chunk: Uint8Array) => void {
  let seen = 0;
  return (chunk) => {
    seen += chunk.byteLength;
    if (seen > limit) throw messageTooLarge(limit, domain);
  };
}

/** Refuses an envelope whose declared length is over limit, and for a unary call any second envelope, before its payload is read. */
function envelopeInspector(limit: number, domain: string, unary: boolean): (chunk: Uint8Array) => void {
  let envelopes = 0;
  const tracker = new EnvelopeTracker((length) => {
    if (unary && ++envelopes > 1) throw extraMessage(domain);
    if (length > limit) throw messageTooLarge(limit, domain);
  });
  return (chunk) => tracker.feed(chunk);
}

/**
 * A Connect GET carries its message in the query. Uncompressed, its size is
 * checked here (the request line is at most 16 KiB, so this matters only for
 * small limits); compressed, the bounded decompressor checks what it inflates.
 */
export function oversizedGetMessage(query: URLSearchParams, limit: number, domain = DEFAULT_ERROR_DOMAIN): ConnectError | undefined {
  const compression = query.get("compression");
  if (compression !== null && compression !== "identity") return undefined;
  const message = query.get("message") ?? "";
  const size = query.get("base64") === "1" ? Math.floor((message.replace(/=+$/, "").length * 3) / 4) : Buffer.byteLength(message);
  return size > limit ? messageTooLarge(limit, domain) : undefined;
}

/**
 * Drops a request whose body did not arrive in time, with what carries it:
 * an HTTP/1.1 connection, or an HTTP/2 stream (reset CANCEL; destroying
 * HTTP/2's compatibility request fails only the read, which would then be
 * answered as a server fault while the rest of the connection serves on).
 */
function dropRequest(req: IncomingMessage): void {
  const stream = (req as unknown as { stream?: { close(code: number): void; destroyed: boolean } }).stream;
  if (stream === undefined) req.destroy();
  else if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
}
