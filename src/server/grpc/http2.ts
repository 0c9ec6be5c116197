import http2 from "node:http2";
import { Code } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { ApiError } from "../../domain/errors.js";
import { EnvelopeTracker, MESSAGE_TOO_LARGE } from "../connect/message-limit.js";
import { areaErrorDomain, DEFAULT_ERROR_DOMAIN, grpcStatusDetails, reasonOf, toConnectError } from "../errors.js";
import type { ByteBudget, ByteBudgetScope } from "../http/byte-budget.js";
import { addressLimitKey, clientAddressOf } from "../http/client-address.js";

/** Limits of the HTTP/2 sessions grpc-js serves, beyond its own options. */
export interface Http2Limits {
  /** SETTINGS_MAX_HEADER_LIST_SIZE: larger header blocks are refused (the stream is reset). */
  maxHeaderListBytes: number;
  /** Bytes of request messages not yet complete that one connection may hold, over all its streams. */
  unfinishedBytesPerConnection: number;
  /** The same bytes counted over every connection of the process and per client address. */
  pending: ByteBudget;
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
  /** Runs `observer` on every stream from now on, after the observers registered before it. */
  observe(observer: StreamObserver): void;
}

/** The grpc-js internal this module relies on, checked at start-up. */
interface Http2ServerFactory {
  createHttp2Server(credentials: grpc.ServerCredentials): http2.Http2Server;
}

/**
 * grpc-js creates the HTTP/2 server behind a connection injector itself and
 * offers no option for the header-list size, no hook on its streams and no
 * per-connection memory bound. This wraps its (private) createHttp2Server
 * to reach that server and to run before grpc-js on every stream: refuse a
 * header list over the limit, give every error status grpc-js writes on its
 * own a google.rpc.Status, run the registered stream observers, and bound the
 * unfinished request bytes per connection, per client address and over the
 * process. This is the one place that patches grpc-js. Throws at start-up when
 * a grpc-js upgrade removed the method, rather than serving without these limits.
 */
export function limitGrpcHttp2(server: grpc.Server, limits: Http2Limits): GrpcHttp2Streams {
  const observers: StreamObserver[] = [];
  const factory = server as unknown as Http2ServerFactory;
  const create = factory.createHttp2Server;
  if (typeof create !== "function") throw new Error("@grpc/grpc-js has no Server.createHttp2Server: the HTTP/2 limits cannot be applied");
  factory.createHttp2Server = (credentials) => {
    const h2 = create.call(server, credentials);
    h2.updateSettings({ maxHeaderListSize: limits.maxHeaderListBytes });
    const accounts = new WeakMap<http2.Http2Session, ConnectionAccount>();
    const grpcListeners = h2.listeners("stream") as ((...args: unknown[]) => void)[];
    h2.removeAllListeners("stream");
    h2.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      // A stream reset with an error code emits 'error'; its 'close' tells grpc-js all it needs.
      stream.on("error", () => {});
      // nghttp2 applies the advertised limit only once the client has
      // acknowledged it (until then, 64 KiB); this holds before that too.
      if (headerListSize(rawHeaders) > limits.maxHeaderListBytes) return stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      addStatusDetails(stream, String(headers[":path"] ?? ""));
      for (const observe of observers) observe(stream, headers);
      const session = stream.session;
      if (session) {
        let account = accounts.get(session);
        // The address is read once, while the socket is surely open, and released under the same key.
        if (!account) accounts.set(session, (account = { unfinished: 0, addressKey: addressLimitKey(clientAddressOf(session.socket)) }));
        boundUnfinished(stream, account, limits);
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

/** The size of a header list as SETTINGS_MAX_HEADER_LIST_SIZE counts it: name and value octets plus 32 per field. */
function headerListSize(rawHeaders: string[]): number {
  let size = 0;
  for (const field of rawHeaders) size += Buffer.byteLength(field);
  return size + 16 * rawHeaders.length;
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
  const release = (bytes: number) => {
    account.unfinished -= bytes;
    limits.pending.release(account.addressKey, bytes);
    counted -= bytes;
  };
  const onData = (chunk: Buffer) => {
    envelopes.feed(chunk);
    const more = envelopes.unfinished - counted;
    if (more <= 0) return release(-more);
    const over: ByteBudgetScope | "connection" | undefined =
      account.unfinished + more > limits.unfinishedBytesPerConnection ? "connection" : limits.pending.take(account.addressKey, more);
    if (over === undefined) {
      account.unfinished += more;
      counted += more;
      return;
    }
    stream.off("data", onData);
    release(counted);
    const { reason, holder, limit } = REFUSALS[over];
    refuseStream(stream, reason, `${holder} more than ${limit(limits)} bytes of unfinished request messages; retry the call`);
  };
  stream.on("data", onData);
  stream.once("close", () => release(counted));
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
        "grpc-message": encodeURI(message),
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
  const respond = stream.respond.bind(stream);
  const sendTrailers = stream.sendTrailers.bind(stream);
  stream.respond = (headers, options) => respond(headers && withStatusDetails(headers, path), options);
  stream.sendTrailers = (headers) => sendTrailers(withStatusDetails(headers, path));
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
