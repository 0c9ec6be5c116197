import http2 from "node:http2";
import { Code } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import { ApiError } from "../../domain/errors.js";
import { EnvelopeTracker } from "../connect/message-limit.js";
import { DEFAULT_ERROR_DOMAIN, grpcStatusDetails, toConnectError } from "../errors.js";
import { REFLECTION_REQUEST_LIMIT } from "./reflection-stream.js";

/** The grpc-js internal this module relies on (http2.ts wraps it too), checked at start-up. */
interface Http2ServerFactory {
  createHttp2Server(credentials: grpc.ServerCredentials): http2.Http2Server;
}

/**
 * grpc-js decodes every message of a DATA frame as soon as it arrives (a
 * 16 KiB frame holds up to 3,276 empty ones) and queues them for the call,
 * ahead of any handler: a client pipelining tiny reflection requests on 100
 * streams made it hold about 600 KB per stream. Counting the messages of each
 * reflection stream on the raw HTTP/2 stream, before grpc-js sees a chunk,
 * bounds that queue: the chunk that takes a stream past `maxMessages` resets
 * it, and grpc-js, finding the stream closed, decodes none of it. And the
 * handler's status at the end of a stream's lifetime waits behind its
 * answers, which a client that stopped reading never takes: such a stream is
 * reset RESET_GRACE_MS later, so its lifetime holds either way. Throws at
 * start-up when a grpc-js upgrade removed the method, rather than serving
 * without the bound.
 */
export function limitReflectionStreams(server: grpc.Server, paths: readonly string[], limits: RawReflectionLimits): void {
  const factory = server as unknown as Http2ServerFactory;
  const create = factory.createHttp2Server;
  if (typeof create !== "function") throw new Error("@grpc/grpc-js has no Server.createHttp2Server: reflection streams cannot be bounded");
  factory.createHttp2Server = (credentials) => {
    const h2 = create.call(server, credentials);
    // First, so this stream's data listener runs before grpc-js's.
    h2.prependListener("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => {
      if (!paths.includes(String(headers[":path"]))) return;
      countMessages(stream, limits.maxMessages);
      resetAfter(stream, limits.lifetimeMs + RESET_GRACE_MS);
    });
    return h2;
  };
}

/** How the raw streams are held: messages counted before grpc-js decodes them, and a hard end to their lifetime. */
export interface RawReflectionLimits {
  maxMessages: number;
  lifetimeMs: number;
}

/** How long after its lifetime a stream may still be open (its final answers and status unread) before it is reset. */
export const RESET_GRACE_MS = 10_000;

function resetAfter(stream: http2.ServerHttp2Stream, ms: number): void {
  const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), ms);
  timer.unref();
  stream.once("close", () => clearTimeout(timer));
}

function countMessages(stream: http2.ServerHttp2Stream, maxMessages: number): void {
  let messages = 0;
  const envelopes = new EnvelopeTracker(() => messages++);
  const onData = (chunk: Buffer) => {
    envelopes.feed(chunk);
    if (messages <= maxMessages) return;
    stream.off("data", onData);
    refuse(stream, `A reflection stream takes at most ${maxMessages - 1} requests; open a new one`);
  };
  stream.on("data", onData);
}

/**
 * RESOURCE_EXHAUSTED, trailers-only when nothing was answered yet; once
 * answers went out, a reset with ENHANCE_YOUR_CALM (which gRPC clients read as
 * RESOURCE_EXHAUSTED) is all there is room for.
 */
function refuse(stream: http2.ServerHttp2Stream, message: string): void {
  const answered = !stream.headersSent;
  if (answered) {
    const err = toConnectError(new ApiError(Code.ResourceExhausted, REFLECTION_REQUEST_LIMIT, message), DEFAULT_ERROR_DOMAIN);
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
  stream.close(answered ? http2.constants.NGHTTP2_CANCEL : http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
}
