import { Readable } from "node:stream";
import { promisify } from "node:util";
import zlib from "node:zlib";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidField } from "../../domain/errors.js";
import { PoolJobs } from "./pool-jobs.js";

/**
 * HTTP content codings for the REST side and the plain HTTP routes (docs,
 * OpenAPI, metrics). gRPC, Connect and gRPC-Web negotiate compression in
 * their own protocols; their bodies are never touched here.
 */

/** Request codings REST accepts, as the Accept-Encoding of a 415 lists them (RFC 7694). */
export const REQUEST_CODINGS = ["gzip", "br"] as const;
type RequestCoding = (typeof REQUEST_CODINGS)[number];

/** Smaller bodies go as they are: a coding would save less than it costs. */
export const MIN_COMPRESS_BYTES = 1024;
/** Text-like types; images and archives are compressed already. */
export const COMPRESSIBLE = /^(application\/(json|javascript|openmetrics-text)|text\/|image\/svg\+xml)/i;
/** Quality 4 is about as fast as gzip -6 and still smaller. */
const BROTLI_QUALITY = 4;
/** Bodies up to this size are compressed on the event loop: a trip to the thread pool costs more. */
const SYNC_COMPRESS_BYTES = 64 * 1024;
/**
 * Larger reply bodies go as they are: past this a compression job costs the
 * pool more than ~15 ms (brotli 4 runs at ~65 MB/s here). Stored assets
 * (stored-encodings.ts) are compressed once and are not bound by it.
 */
export const MAX_DYNAMIC_COMPRESS_BYTES = 1024 * 1024;
/**
 * Compression jobs in the thread pool at once, process-wide: two of the four
 * default threads, so token signing and verification always have the others.
 */
export const poolCompressions = new PoolJobs(2);
const gzip = promisify(zlib.gzip);
const brotli = promisify(zlib.brotliCompress);

/** Window and size hint fitted to the body, so a small reply does not allocate brotli's 4 MiB default window. */
function brotliOptions(bytes: number): zlib.BrotliOptions {
  const lgwin = Math.min(
    zlib.constants.BROTLI_MAX_WINDOW_BITS,
    Math.max(zlib.constants.BROTLI_MIN_WINDOW_BITS, Math.ceil(Math.log2(bytes + 1))),
  );
  const { BROTLI_PARAM_QUALITY, BROTLI_PARAM_LGWIN, BROTLI_PARAM_SIZE_HINT } = zlib.constants;
  return { params: { [BROTLI_PARAM_QUALITY]: BROTLI_QUALITY, [BROTLI_PARAM_LGWIN]: lgwin, [BROTLI_PARAM_SIZE_HINT]: bytes } };
}

/** One compression in the thread pool (no slot taken: callers go through poolCompressions). */
export function compressInPool(
  payload: string | Buffer,
  bytes: number,
  coding: "br" | "gzip",
  brotliQuality = BROTLI_QUALITY,
): Promise<Buffer> {
  if (coding === "gzip") return gzip(payload);
  const options = brotliOptions(bytes);
  options.params![zlib.constants.BROTLI_PARAM_QUALITY] = brotliQuality;
  return brotli(payload, options);
}

/**
 * The body in `coding`: on the event loop when small, else in the thread
 * pool once one of poolCompressions' slots is free (waiting for it on the
 * event loop), so no number of such calls holds more than its capacity of
 * pool threads.
 */
export function compress(payload: string | Buffer, bytes: number, coding: "br" | "gzip"): Buffer | Promise<Buffer> {
  return compressNow(payload, bytes, coding) ?? poolCompressions.run(() => compressInPool(payload, bytes, coding));
}

/** The body compressed on the event loop when it is small enough, else null. */
function compressNow(payload: string | Buffer, bytes: number, coding: "br" | "gzip"): Buffer | null {
  if (bytes > SYNC_COMPRESS_BYTES) return null;
  return coding === "br" ? zlib.brotliCompressSync(payload, brotliOptions(bytes)) : zlib.gzipSync(payload);
}

/**
 * The body in `coding` within the dynamic path's bounds, or null to send it
 * as it is: past MAX_DYNAMIC_COMPRESS_BYTES, or when every pool slot is busy
 * (an answer a bit larger costs the server less than a queue of jobs).
 */
export function compressBounded(payload: string | Buffer, bytes: number, coding: "br" | "gzip"): Buffer | Promise<Buffer> | null {
  if (bytes > MAX_DYNAMIC_COMPRESS_BYTES) return null;
  return compressNow(payload, bytes, coding) ?? poolCompressions.tryRun(() => compressInPool(payload, bytes, coding));
}

/**
 * The request coding a Content-Encoding header names: null for none (or
 * identity), "unsupported" for anything else, stacked codings included.
 */
export function requestCoding(header: string | undefined): RequestCoding | null | "unsupported" {
  const coding = header?.trim().toLowerCase();
  if (coding === undefined || coding === "" || coding === "identity") return null;
  if (coding === "gzip" || coding === "x-gzip") return "gzip";
  if (coding === "br") return "br";
  return "unsupported";
}

/**
 * The request body inflated, at most `limit` bytes of it: past that the
 * inflater is destroyed at once (a bomb costs about `limit` bytes and no more
 * CPU) and the stream fails with the status fastify's own body limit uses, so
 * the answer is the same 413 as for an oversized plain body. Corrupt data is
 * INVALID_ARGUMENT. Inflating starts only when the body is read.
 */
export function inflatedBody(source: Readable, coding: RequestCoding, limit: number): Readable {
  const inflater = coding === "gzip" ? zlib.createGunzip() : zlib.createBrotliDecompress();
  let started = false;
  let inflated = 0;
  const out: Readable & { receivedEncodedLength?: number } = new Readable({
    read() {
      if (!started) {
        started = true;
        source.on("data", (chunk: Buffer) => (out.receivedEncodedLength! += chunk.length));
        source.pipe(inflater);
      }
      inflater.resume();
    },
    destroy(err, callback) {
      source.unpipe(inflater);
      inflater.destroy();
      // Read and drop the rest, so the answer reaches the client.
      if (started && !source.readableEnded) source.resume();
      callback(err);
    },
  });
  // fastify compares Content-Length with the bytes that arrived, not the inflated ones.
  out.receivedEncodedLength = 0;
  source.on("error", (err) => out.destroy(err));
  inflater.on("data", (chunk: Buffer) => {
    inflated += chunk.length;
    if (inflated > limit) out.destroy(Object.assign(new Error(`request body inflates past ${limit} bytes`), { statusCode: 413 }));
    else if (!out.push(chunk)) inflater.pause();
  });
  inflater.on("end", () => out.push(null));
  inflater.on("error", () => out.destroy(invalidField("body", `is not valid ${coding} data`)));
  // An error nobody reads (a body fastify never parsed) must not take the process down.
  out.on("error", () => {});
  return out;
}

/**
 * Compresses replies of `app` with gzip or br when the client accepts one,
 * the type is text-like and the body is at least MIN_COMPRESS_BYTES. Replies
 * of requests `skip` names (the RPC protocols) stay as they are.
 */
export function installResponseCompression(app: FastifyInstance, skip: (req: FastifyRequest) => boolean): void {
  // Callback style: most replies return at once, and an async hook costs a promise and a microtask on each of them.
  app.addHook("onSend", (req, reply, payload, done) => {
    if (skip(req) || negotiated.has(reply) || !(typeof payload === "string" || Buffer.isBuffer(payload))) return done(null, payload);
    const type = String(reply.getHeader("content-type") ?? "");
    if (!COMPRESSIBLE.test(type) || reply.hasHeader("content-encoding") || reply.statusCode === 204 || reply.statusCode === 304)
      return done(null, payload);
    addVary(reply);
    const bytes = Buffer.byteLength(payload);
    const coding = bytes >= MIN_COMPRESS_BYTES ? responseCoding(req.headers["accept-encoding"]) : null;
    if (coding === null) return done(null, payload);
    const body = compressBounded(payload, bytes, coding);
    const send = (compressed: Buffer) => {
      reply.header("content-encoding", coding).removeHeader("content-length");
      done(null, compressed);
    };
    if (body === null) done(null, payload);
    else if (Buffer.isBuffer(body)) send(body);
    else body.then(send, done);
  });
}

/** Replies whose coding their route chose (stored encodings): the hook leaves them alone. */
const negotiated = new WeakSet<FastifyReply>();

/** Marks a reply as negotiated already: installResponseCompression neither compresses it nor adds Vary. */
export function sendAsNegotiated(reply: FastifyReply): FastifyReply {
  negotiated.add(reply);
  return reply;
}

/** Adds Accept-Encoding to the reply's Vary unless it is there (or Vary is *). */
export function addVary(reply: FastifyReply): void {
  const vary = String(reply.getHeader("vary") ?? "");
  if (/(^|,)\s*(accept-encoding|\*)\s*(,|$)/i.test(vary)) return;
  reply.header("vary", vary === "" ? "Accept-Encoding" : `${vary}, Accept-Encoding`);
}

/** br or gzip, whichever the client weighs higher (br on a tie), or null when it accepts neither. */
export function responseCoding(acceptEncoding: string | undefined): "br" | "gzip" | null {
  if (acceptEncoding === undefined) return null;
  const weights = new Map<string, number>();
  for (const part of acceptEncoding.split(",")) {
    const [name = "", ...params] = part.split(";").map((s) => s.trim().toLowerCase());
    const q = params.find((p) => p.startsWith("q="));
    const weight = q === undefined ? 1 : Number(q.slice(2));
    if (name !== "") weights.set(name, Number.isFinite(weight) ? weight : 0);
  }
  const weightOf = (coding: string) =>
    weights.get(coding) ?? (coding === "gzip" ? weights.get("x-gzip") : undefined) ?? weights.get("*") ?? 0;
  const br = weightOf("br");
  const gz = weightOf("gzip");
  if (br > 0 && br >= gz) return "br";
  return gz > 0 ? "gzip" : null;
}

/** Content types of the RPC protocols (gRPC, gRPC-Web, Connect streaming and unary proto). */
const RPC_CONTENT_TYPE = /^application\/(grpc|connect\+|proto)/i;
/** /package.Service/Method: no REST path has a dotted first segment and a second one. */
const RPC_PATH = /^\/\w+\.[\w.]+\/\w+$/;

/**
 * Whether a request is a gRPC, gRPC-Web or Connect call: by path (unknown
 * methods included), content type, or the Connect-Protocol-Version header.
 */
export function isRpcRequest(req: FastifyRequest): boolean {
  return (
    RPC_PATH.test(pathOf(req.url)) ||
    RPC_CONTENT_TYPE.test(req.headers["content-type"] ?? "") ||
    req.headers["connect-protocol-version"] !== undefined
  );
}

/** A request target without its query (every request passes here: no array, no second string when there is no query). */
function pathOf(url: string): string {
  const query = url.indexOf("?");
  return query === -1 ? url : url.slice(0, query);
}
