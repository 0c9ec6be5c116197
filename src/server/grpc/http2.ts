import http2 from "node:http2";
import { Code } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { EnvelopeTracker } from "../../codec/envelope.js";
import { ApiError } from "../../domain/errors.js";
import {
  areaErrorDomain,
  DEFAULT_ERROR_DOMAIN,
  grpcMessageHeader,
  grpcStatusDetails,
  MESSAGE_TOO_LARGE,
  reasonOf,
  toConnectError,
} from "../errors.js";
import type { ByteBudget, ByteBudgetScope } from "../http/byte-budget.js";
import { createClientAddresses, type ClientAddresses } from "../http/client-address.js";
import { serveHttp2Request, type Http2RequestHandler } from "../http/http2-requests.js";
import type { GrpcUnaryCall } from "./unary.js";

/** Limits of the HTTP/2 sessions grpc-js serves, beyond its own options. */
export interface Http2Limits {
  /** SETTINGS_MAX_HEADER_LIST_SIZE: larger header blocks are refused (the stream is reset). */
  maxHeaderListBytes: number;
  /** Bytes of request messages not yet complete that one connection may hold, over all its streams. */
  unfinishedBytesPerConnection: number;
  /** The same bytes counted over every connection of the process and per client address. */
  pending: ByteBudget;
  /** Who a connection's client is (the per-address key of `pending`); default: the TCP peer. */
  clients?: ClientAddresses;
  /** The fast path serving a native gRPC stream of this :path, if any (grpcUnaryCalls); grpc-js serves the rest. */
  unaryCalls?: (path: string) => GrpcUnaryCall | undefined;
}

/** ErrorInfo.reason of a stream refused because its connection holds too many unfinished bytes. */
export const CONNECTION_BUDGET_EXCEEDED = "CONNECTION_BUDGET_EXCEEDED";
/** ErrorInfo.reason of a stream refused because the whole server holds too many unfinished bytes. */
export const SERVER_BUDGET_EXCEEDED = "SERVER_BUDGET_EXCEEDED";
/** ErrorInfo.reason of a stream refused because connections from its client address hold too many unfinished bytes. */
export const ADDRESS_BUDGET_EXCEEDED = "ADDRESS_BUDGET_EXCEEDED";

/** What one connection holds, and the client address its share of the process budget is counted under. */
interface ConnectionAccount {
  unfinished: number;
  addressKey: string;
}

/**
 * Code run on each stream grpc-js is about to serve (its header list within
 * the limit), before grpc-js and before the unfinished-bytes bound: a 'data'
 * listener it adds sees every chunk before grpc-js decodes it.
 */
export type StreamObserver = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

/** The hook limitGrpcHttp2 offers, so that no other module patches grpc-js's internals again. */
export interface GrpcHttp2Streams {
  /** Runs `observer` on every gRPC stream from now on, after the observers registered before it. */
  observe(observer: StreamObserver): void;
}

/** The grpc-js internals this module relies on, checked at start-up. */
interface GrpcServerInternals {
  createHttp2Server(credentials: grpc.ServerCredentials): http2.Http2Server;
  /** Counts a stream as open until it closes, for the session's idle timeout (grpc.max_connection_idle_ms). */
  onStreamOpened(stream: http2.ServerHttp2Stream): void;
}

/** How streams that are not native gRPC are served. */
export interface HttpStreams {
  /** fastify's request handler. */
  handler: Http2RequestHandler;
  /** A request whose body has not all arrived this long after its headers is reset (HTTP/1.1's request timeout). */
  requestTimeoutMs: number;
}

/** How every stream that is not native gRPC is served, by the grpc-js server whose sessions carry them. */
const httpStreams = new WeakMap<grpc.Server, HttpStreams>();

/**
 * Serves every HTTP/2 stream of server's sessions that is not native gRPC
 * (REST, Connect, gRPC-Web, the plain routes) with handler: fastify's, the
 * very routes HTTP/1.1 reaches. Set before the sessions are created (the
 * connection injector creates them).
 */
export function serveHttpStreams(server: grpc.Server, streams: HttpStreams): void {
  httpStreams.set(server, streams);
}

/**
 * Whether a Content-Type is native gRPC's: application/grpc, alone or with
 * a +codec or parameters. gRPC-Web's (application/grpc-web…) is not, nor is
 * any other application/grpc-something, which grpc-js would take too (its
 * test is startsWith) and answer in a framing its client cannot read.
 */
export function isNativeGrpc(contentType: string | undefined): boolean {
  if (contentType === undefined || !contentType.startsWith("application/grpc")) return false;
  const next = contentType.charCodeAt(16);
  return Number.isNaN(next) || next === 0x2b /* + */ || next === 0x3b /* ; */;
}

/**
 * grpc-js creates the HTTP/2 server behind a connection injector itself and
 * offers no option for the header-list size, no hook on its streams and no
 * per-connection memory bound. This wraps its (private) createHttp2Server
 * to reach that server and to run before grpc-js on every stream: refuse a
 * header list over the limit, hand every stream that is not native gRPC to
 * the request handler (serveHttpStreams), give every error status grpc-js
 * writes on its own a google.rpc.Status, run the registered stream observers,
 * and bound the unfinished request bytes per connection, per client address
 * and over the process, on every stream. grpc-js keeps owning the sessions, so
 * its idle timeout, maximum connection age, keepalive and drain apply to all
 * of them. This is the one place that patches grpc-js. Throws at start-up when
 * a grpc-js upgrade removed a method it uses, rather than serving without these limits.
 */
export function limitGrpcHttp2(server: grpc.Server, limits: Http2Limits): GrpcHttp2Streams {
  const observers: StreamObserver[] = [];
  const clients = limits.clients ?? createClientAddresses();
  const internals = server as unknown as GrpcServerInternals;
  const create = internals.createHttp2Server;
  if (typeof create !== "function" || typeof internals.onStreamOpened !== "function")
    throw new Error("@grpc/grpc-js has no Server.createHttp2Server or onStreamOpened: the HTTP/2 limits cannot be applied");
  internals.createHttp2Server = (credentials) => {
    const h2 = create.call(server, credentials);
    h2.updateSettings({ maxHeaderListSize: limits.maxHeaderListBytes });
    const accounts = new WeakMap<http2.Http2Session, ConnectionAccount>();
    const grpcListeners = h2.listeners("stream") as ((...args: unknown[]) => void)[];
    // Set before the connection injector creates this server (one-port.ts).
    const http = httpStreams.get(server);
    h2.removeAllListeners("stream");
    h2.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      // A stream reset with an error code emits 'error'; its 'close' tells grpc-js all it needs.
      stream.on("error", () => {});
      // nghttp2 applies the advertised limit only once the client has
      // acknowledged it (until then, 64 KiB); this holds before that too.
      if (headerListOver(rawHeaders, limits.maxHeaderListBytes)) return stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      const session = stream.session;
      let account = session && accounts.get(session);
      // The address is read once, while the socket is surely open, and released under the same key.
      if (session && !account) accounts.set(session, (account = { unfinished: 0, addressKey: clients.limitKeyOf(session.socket) }));
      const native = isNativeGrpc(headers["content-type"]);
      if (http && !native) {
        internals.onStreamOpened(stream);
        const req = serveHttp2Request(stream, headers, rawHeaders, http.handler, http.requestTimeoutMs);
        // A stream ended with its headers has no body to count.
        if (account && !stream.endAfterHeaders) boundRequestBody(req, account, limits);
        return;
      }
      addStatusDetails(stream, String(headers[":path"] ?? ""));
      for (const observe of observers) observe(stream, headers);
      if (account) boundUnfinished(stream, account, limits);
      // A unary API method is served without grpc-js's call machinery (unary.ts); its session still counts the stream.
      const unary = native ? limits.unaryCalls?.(String(headers[":path"])) : undefined;
      if (unary) {
        internals.onStreamOpened(stream);
        return unary(stream, headers);
      }
      for (const listener of grpcListeners) listener.call(h2, stream, headers, flags, rawHeaders);
    });
    return h2;
  };
  return {
    observe(observer) {
      observers.push(observer);
    },
  };
}

/**
 * Whether a header list is larger than limit as SETTINGS_MAX_HEADER_LIST_SIZE
 * counts it (name and value octets plus 32 per field). A string's UTF-8 form
 * is at most 3 bytes per UTF-16 unit, so the octets are counted only when
 * that bound is over the limit (almost never).
 */
function headerListOver(rawHeaders: string[], limit: number): boolean {
  let bound = 16 * rawHeaders.length;
  for (const field of rawHeaders) bound += 3 * field.length;
  if (bound <= limit) return false;
  let size = 16 * rawHeaders.length;
  for (const field of rawHeaders) size += Buffer.byteLength(field);
  return size > limit;
}

/** Why a stream's bytes were refused: the ErrorInfo reason and the message the client reads. */
interface Refusal {
  reason: string;
  message: string;
}

/**
 * Takes `more` unfinished bytes for a connection, from its own bound and
 * from the process's budget under its client address: undefined when both
 * allow it, else what refused it (nothing taken).
 */
function takeBytes(account: ConnectionAccount, more: number, limits: Http2Limits): Refusal | undefined {
  const over: ByteBudgetScope | "connection" | undefined =
    account.unfinished + more > limits.unfinishedBytesPerConnection ? "connection" : limits.pending.take(account.addressKey, more);
  if (over === undefined) {
    account.unfinished += more;
    return undefined;
  }
  const { reason, holder, limit } = REFUSALS[over];
  return { reason, message: `${holder} more than ${limit(limits)} bytes of unfinished request messages; retry the call` };
}

/** Each refusal's reason and the words of its message, with the limit it names. */
const REFUSALS: Record<ByteBudgetScope | "connection", { reason: string; holder: string; limit: (l: Http2Limits) => number }> = {
  connection: { reason: CONNECTION_BUDGET_EXCEEDED, holder: "This connection holds", limit: (l) => l.unfinishedBytesPerConnection },
  address: {
    reason: ADDRESS_BUDGET_EXCEEDED,
    holder: "Connections from this client address hold",
    limit: (l) => l.pending.limits.perAddress,
  },
  server: { reason: SERVER_BUDGET_EXCEEDED, holder: "The server holds", limit: (l) => l.pending.limits.total },
};

/** Gives back bytes takeBytes took. */
function releaseBytes(account: ConnectionAccount, bytes: number, limits: Http2Limits): void {
  account.unfinished -= bytes;
  limits.pending.release(account.addressKey, bytes);
}

/**
 * Counts the stream's bytes of unfinished messages into its connection's
 * account and the process's budget (under its client address); a stream
 * whose bytes would take either over is answered RESOURCE_EXHAUSTED and
 * reset, which frees what grpc-js buffered for it. What a stream counted is
 * given back when its message completes and when it closes, however it
 * closes. (grpc-js reads every stream eagerly, so HTTP/2 flow control bounds
 * nothing.)
 */
function boundUnfinished(stream: http2.ServerHttp2Stream, account: ConnectionAccount, limits: Http2Limits): void {
  const envelopes = new EnvelopeTracker();
  let counted = 0;
  let watchingClose = false;
  const release = (bytes: number) => {
    if (bytes === 0) return;
    releaseBytes(account, bytes, limits);
    counted -= bytes;
  };
  const onData = (chunk: Buffer) => {
    envelopes.feed(chunk);
    const more = envelopes.unfinished - counted;
    if (more <= 0) return release(-more);
    const refusal = takeBytes(account, more, limits);
    if (refusal === undefined) {
      counted += more;
      // Only a stream holding counted bytes has anything to give back at its close (a small unary call never does).
      if (!watchingClose) stream.once("close", () => release(counted));
      watchingClose = true;
      return;
    }
    stream.off("data", onData);
    release(counted);
    refuseStream(stream, refusal.reason, refusal.message);
  };
  stream.on("data", onData);
}

/**
 * The same bound on a stream the request handler serves: its body counts
 * from the moment the handler reads it (until then HTTP/2 flow control holds
 * it at the client) until it ends or the stream closes. Over the bound, the
 * request fails with RESOURCE_EXHAUSTED: whatever reads it (fastify's body
 * parser, the Connect routes) answers that in the request's protocol, and
 * the stream, left open for the answer but no longer read, is reset once
 * the answer is out (serveHttp2Request).
 */
function boundRequestBody(req: http2.Http2ServerRequest, account: ConnectionAccount, limits: Http2Limits): void {
  let counted = 0;
  const release = () => {
    releaseBytes(account, counted, limits);
    counted = 0;
  };
  const push = req.push;
  req.push = (chunk: Buffer | null, encoding?: BufferEncoding) => {
    if (chunk === null) release();
    else {
      const refusal = takeBytes(account, chunk.byteLength, limits);
      if (refusal !== undefined) return refuseRequest(req, push, refusal);
      counted += chunk.byteLength;
    }
    return push.call(req, chunk, encoding);
  };
  req.stream.once("close", release);
  req.once("close", release);
}

/** Fails req with the refusal, keeping its stream open for the answer; returns push's false (stop sending). */
function refuseRequest(req: http2.Http2ServerRequest, push: http2.Http2ServerRequest["push"], refusal: Refusal): false {
  req.push = push;
  // Http2ServerRequest's own _destroy resets the stream, which would take the answer with it.
  req._destroy = (err, callback) => callback(err);
  req.destroy(toConnectError(new ApiError(Code.ResourceExhausted, refusal.reason, refusal.message), DEFAULT_ERROR_DOMAIN));
  return false;
}

/**
 * Ends a stream with RESOURCE_EXHAUSTED and one ErrorInfo of `reason`
 * (trailers-only when nothing was sent yet) and stops its upload, before
 * grpc-js decodes any more of it.
 */
export function refuseStream(stream: http2.ServerHttp2Stream, reason: string, message: string): void {
  const answered = !stream.headersSent;
  if (answered) {
    const err = toConnectError(new ApiError(Code.ResourceExhausted, reason, message), DEFAULT_ERROR_DOMAIN);
    stream.respond(
      {
        ":status": 200,
        "content-type": "application/grpc+proto",
        "grpc-status": String(Code.ResourceExhausted),
        "grpc-message": grpcMessageHeader(message),
        "grpc-status-details-bin": Buffer.from(grpcStatusDetails(err)).toString("base64"),
      },
      { endStream: true },
    );
  }
  // The reset tells the client to stop sending (RFC 9113 §8.1 suggests
  // NO_ERROR, but Node sends no RST_STREAM(NO_ERROR) on a stream it has
  // ended, so CANCEL). Once headers were out before, ENHANCE_YOUR_CALM
  // (which gRPC clients read as RESOURCE_EXHAUSTED) is all there is to say.
  stream.close(answered ? http2.constants.NGHTTP2_CANCEL : http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
}

/**
 * grpc-js writes some statuses itself, before or around our handlers: an
 * unknown method (UNIMPLEMENTED), a message over the limit
 * (RESOURCE_EXHAUSTED), a bad grpc-timeout, a failed decompression. Those
 * carry no grpc-status-details-bin; add one with the same google.rpc.Status
 * and single ErrorInfo as every other error. Statuses our handlers send
 * already have it and pass unchanged.
 */
function addStatusDetails(stream: http2.ServerHttp2Stream, path: string): void {
  // Shared functions and the path in a property: nothing bound or allocated per stream but the property.
  const detailed = stream as DetailedStream;
  detailed[STREAM_PATH] = path;
  detailed.respond = respondWithDetails;
  detailed.sendTrailers = sendTrailersWithDetails;
}

const STREAM_PATH = Symbol("grpc method path");
type DetailedStream = http2.ServerHttp2Stream & { [STREAM_PATH]: string };

/** ServerHttp2Stream.respond (the prototype's, which the stream's own property shadows), adding status details. */
function respondWithDetails(this: DetailedStream, headers?: http2.OutgoingHttpHeaders, options?: http2.ServerStreamResponseOptions): void {
  const respond = (Object.getPrototypeOf(this) as http2.ServerHttp2Stream).respond;
  respond.call(this, headers && withStatusDetails(headers, this[STREAM_PATH]), options);
}

/** ServerHttp2Stream.sendTrailers (the prototype's), adding status details. */
function sendTrailersWithDetails(this: DetailedStream, headers: http2.OutgoingHttpHeaders): void {
  const sendTrailers = (Object.getPrototypeOf(this) as http2.ServerHttp2Stream).sendTrailers;
  sendTrailers.call(this, withStatusDetails(headers, this[STREAM_PATH]));
}

function withStatusDetails(headers: http2.OutgoingHttpHeaders, path: string): http2.OutgoingHttpHeaders {
  const code = Number(headers["grpc-status"] ?? 0);
  if (!(code > 0) || headers["grpc-status-details-bin"] !== undefined) return headers;
  const message = decodeMessage(headers["grpc-message"]);
  // The only RESOURCE_EXHAUSTED grpc-js raises on a server without a send
  // limit is a request message over grpc.max_receive_message_length, and the
  // only UNIMPLEMENTED a method no service serves (Connect says the same).
  const unknown = code === Code.Unimplemented;
  const reason = code === Code.ResourceExhausted ? MESSAGE_TOO_LARGE : unknown ? "UNKNOWN_METHOD" : reasonOf(code as Code);
  const domain = unknown ? DEFAULT_ERROR_DOMAIN : areaErrorDomain(path.split("/")[1] ?? "");
  const err = toConnectError(new ApiError(code as Code, reason, message), domain);
  return { ...headers, "grpc-status-details-bin": Buffer.from(grpcStatusDetails(err)).toString("base64") };
}

/** grpc-message is percent-encoded (grpc-js uses encodeURI). */
function decodeMessage(value: http2.OutgoingHttpHeaders[string]): string {
  const text = String(value ?? "");
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
