import http2 from "node:http2";
import { EnvelopeTracker } from "../../codec/envelope.js";
import { refuseStream, type GrpcHttp2Streams } from "./http2.js";
import { REFLECTION_REQUEST_LIMIT } from "./reflection-stream.js";

/**
 * grpc-js decodes every message of a DATA frame as soon as it arrives (a
 * 16 KiB frame holds up to 3,276 empty ones) and queues them for the call,
 * ahead of any handler: a client pipelining tiny reflection requests on 100
 * streams made it hold about 600 KB per stream. Counting the messages of each
 * reflection stream on the raw HTTP/2 stream, before grpc-js sees a chunk
 * (through limitGrpcHttp2's stream hook), bounds that queue: the chunk that
 * takes a stream past `maxMessages` resets it, and grpc-js, finding the stream
 * closed, decodes none of it. And the handler's status at the end of a
 * stream's lifetime waits behind its answers, which a client that stopped
 * reading never takes: such a stream is reset RESET_GRACE_MS later, so its
 * lifetime holds either way.
 */
export function limitReflectionStreams(streams: GrpcHttp2Streams, paths: readonly string[], limits: RawReflectionLimits): void {
  streams.observe((stream, headers) => {
    if (!paths.includes(String(headers[":path"]))) return;
    countMessages(stream, limits.maxMessages);
    resetAfter(stream, limits.lifetimeMs + RESET_GRACE_MS);
  });
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
    refuseStream(stream, REFLECTION_REQUEST_LIMIT, `A reflection stream takes at most ${maxMessages - 1} requests; open a new one`);
  };
  stream.on("data", onData);
}
