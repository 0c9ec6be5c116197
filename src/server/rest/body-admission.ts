import { Transform, type Readable } from "node:stream";
import type { ContextValues } from "@connectrpc/connect";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { inflatedBody, requestCoding } from "../http/compression.js";
import { HeaderView } from "../http/header-view.js";
import { holdBody } from "../http/socket-reading.js";
import type { RestTranscoder } from "./transcoder.js";

/**
 * REST's side of admission (WrappedHandler.admit): a request is admitted
 * from its method, URL and headers before fastify reads its body, so a
 * caller without a valid token costs no body read, parse or decode on a
 * route that needs one; a route that needs no token reads at most
 * anonymousBodyLimit bytes (after decompression).
 */

/** The body limits of the REST routes. */
export interface RestBodyLimits {
  /** The largest body of a route that needs a token (config.maxMessageBytes). */
  bodyLimit: number;
  /** The largest body of a route that needs none (config.anonymousMessageBytes). */
  anonymousBodyLimit: number;
}

/** What admission found out about a request, for its handler. */
interface Admitted {
  values: ContextValues;
  bodyLimit: number;
}

const admitted = new WeakMap<FastifyRequest, Admitted>();

/** The context values admission filled for req (carrying its caller), if it was admitted. */
export function admittedValues(req: FastifyRequest): ContextValues | undefined {
  return admitted.get(req)?.values;
}

/** An error fastify's error handler answers 413, naming the limit that was passed. */
function bodyTooLarge(limit: number): Error & { statusCode: number; limit: number } {
  return Object.assign(new Error(`request body exceeds ${limit} bytes`), { statusCode: 413, limit });
}

/**
 * Adds the admission hook (onRequest) and the body limit (preParsing) to
 * the transcoder's scope. A refusal is thrown to the scope's error handler;
 * a refused request with a body closes its connection, so its body is not
 * read at all (node would otherwise read and drop all of it to keep the
 * connection).
 */
export function installRestAdmission(app: FastifyInstance, transcoder: RestTranscoder, limits: RestBodyLimits): void {
  app.addHook("onRequest", async (req, reply) => {
    const method = req.method === "HEAD" ? "GET" : req.method;
    // Not a byte more of the body while the caller is judged (a database read on PostgreSQL).
    const release = hasNoBody(req.raw) ? undefined : holdBody(req.raw);
    try {
      const { values, needsToken } = await transcoder.admit({
        method,
        url: req.url,
        headers: HeaderView.ofNode(req.headers),
        requestId: req.id,
        clientAddress: req.clientAddress,
      });
      admitted.set(req, { values, bodyLimit: needsToken ? limits.bodyLimit : limits.anonymousBodyLimit });
    } catch (err) {
      if (!req.raw.complete) reply.header("connection", "close");
      throw err;
    } finally {
      release?.();
    }
  });
  // The inflated body counts against the same limit as a plain one.
  app.addHook("preParsing", async (req, _reply, payload) => {
    const limit = admitted.get(req)?.bodyLimit ?? limits.anonymousBodyLimit;
    const coding = requestCoding(req.headers["content-encoding"]);
    if (coding !== null && coding !== "unsupported") return inflatedBody(payload, coding, limit);
    if (limit >= limits.bodyLimit) return payload;
    if (Number(req.headers["content-length"] ?? 0) > limit) throw bodyTooLarge(limit);
    return cappedBody(payload, limit);
  });
}

/**
 * An HTTP/2 request whose stream ended with its headers (most GETs): it has
 * no body to hold, and holding one would cost a pause, a resume and a change
 * of the request's shape on every such call.
 */
function hasNoBody(raw: FastifyRequest["raw"]): boolean {
  return (raw as { stream?: { endAfterHeaders?: boolean } }).stream?.endAfterHeaders === true;
}

/** The body, failing with a 413 as soon as more than limit bytes have arrived (a chunked body has no length to check first). */
function cappedBody(source: Readable, limit: number): Readable {
  let seen = 0;
  const out: Transform & { receivedEncodedLength?: number } = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      seen += chunk.byteLength;
      // fastify compares Content-Length with the bytes that arrived.
      out.receivedEncodedLength = seen;
      if (seen > limit) callback(bodyTooLarge(limit));
      else callback(null, chunk);
    },
  });
  out.receivedEncodedLength = 0;
  source.on("error", (err) => out.destroy(err));
  // An error nobody reads (a body fastify never parsed) must not take the process down.
  out.on("error", () => {});
  return source.pipe(out);
}
