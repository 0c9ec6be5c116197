import type { IncomingMessage } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import { ApiError, invalidField } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, toConnectError } from "../errors.js";

/**
 * The one limit on a request message (config.maxMessageBytes) as the Connect
 * and gRPC-Web side enforces it: on the bytes as they stream in, on each
 * envelope's declared length before its payload is read, and on the output
 * of decompression while it inflates. connect-node's own readMaxBytes checks
 * stay behind these as a backstop, but they raise errors without an
 * ErrorInfo, and a violation found by them destroys the request, so the
 * client sees a reset instead of the answer; the checks here come first.
 */

/** ErrorInfo.reason of a request message over the limit (REST says BODY_TOO_LARGE). */
export const MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE";

/** RESOURCE_EXHAUSTED with one ErrorInfo, for a request message over `limit` bytes. */
export function messageTooLarge(limit: number, domain = DEFAULT_ERROR_DOMAIN): ConnectError {
  return toConnectError(new ApiError(Code.ResourceExhausted, MESSAGE_TOO_LARGE, `Request message exceeds ${limit} bytes`), domain);
}

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

/**
 * The request body for connect-node, refused with MESSAGE_TOO_LARGE as soon
 * as it is known to hold a message over `limit`: from Content-Length before
 * any byte is read, from an envelope's prefix, or from the bytes counted so
 * far. The caller drops Content-Length from the headers it hands connect-node,
 * whose own check of it would come first.
 */
export function limitedBody(
  req: IncomingMessage,
  limit: number,
  domain = DEFAULT_ERROR_DOMAIN,
  /** Turns the bytes on the wire into the body connect-node reads (gRPC-Web text mode's base64). */
  decode?: (wire: AsyncIterable<Uint8Array>) => AsyncIterable<Uint8Array>,
): AsyncIterable<Uint8Array> {
  const enveloped = isEnveloped(req.headers["content-type"]);
  const declared = Number(req.headers["content-length"] ?? 0);
  const inspect = enveloped ? envelopeInspector(limit, domain) : byteCounter(limit, domain);
  return checkedChunks(
    req,
    () => {
      if (!enveloped && declared > limit) throw messageTooLarge(limit, domain);
    },
    inspect,
    decode,
  );
}

async function* checkedChunks(
  req: IncomingMessage,
  precheck: () => void,
  inspect: (chunk: Uint8Array) => void,
  decode: (wire: AsyncIterable<Uint8Array>) => AsyncIterable<Uint8Array> = (wire) => wire,
): AsyncGenerator<Uint8Array> {
  try {
    precheck();
    // Not destroyed on an early stop: a destroyed request takes its socket, and the answer, with it.
    for await (const chunk of decode(req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>)) {
      inspect(chunk);
      yield chunk;
    }
  } finally {
    // Refused or abandoned: read and drop the rest, so the answer reaches the
    // client and the keep-alive connection stays in step (as fastify does on 413).
    if (!req.readableEnded) req.resume();
  }
}

function byteCounter(limit: number, domain: string): (chunk: Uint8Array) => void {
  let seen = 0;
  return (chunk) => {
    seen += chunk.byteLength;
    if (seen > limit) throw messageTooLarge(limit, domain);
  };
}

/** Refuses an envelope whose declared length is over limit, before its payload is read. */
function envelopeInspector(limit: number, domain: string): (chunk: Uint8Array) => void {
  const envelopes = new EnvelopeTracker((length) => {
    if (length > limit) throw messageTooLarge(limit, domain);
  });
  return (chunk) => envelopes.feed(chunk);
}

/**
 * Follows length-prefixed messages (gRPC, gRPC-Web, Connect streaming: one
 * flags byte, a big-endian uint32 length, the payload) across the chunks of
 * a body: reports each declared length, and counts the bytes that have
 * arrived of the message not yet complete.
 */
export class EnvelopeTracker {
  /** Bytes received of the current, unfinished message (its prefix included); 0 between messages. */
  unfinished = 0;
  private readonly prefix = Buffer.alloc(5);
  private prefixBytes = 0;
  private payloadLeft = 0;

  /** onLength sees each declared length as soon as its prefix is complete; it may throw to refuse it. */
  constructor(private readonly onLength: (length: number) => void = () => {}) {}

  feed(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.byteLength) {
      if (this.payloadLeft > 0) {
        const take = Math.min(this.payloadLeft, chunk.byteLength - at);
        this.payloadLeft -= take;
        at += take;
        this.unfinished = this.payloadLeft === 0 ? 0 : this.unfinished + take;
        continue;
      }
      this.prefix[this.prefixBytes++] = chunk[at++]!;
      this.unfinished++;
      if (this.prefixBytes < this.prefix.length) continue;
      this.prefixBytes = 0;
      this.payloadLeft = this.prefix.readUInt32BE(1);
      if (this.payloadLeft === 0) this.unfinished = 0;
      this.onLength(this.payloadLeft);
    }
  }
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
