/**
 * What the h2c attack tests share: polite node:http2 sessions, a raw
 * Health.Check, and streams that declare a large gRPC message and send only
 * part of it (what the unfinished-request-bytes budgets bound), with how they
 * were refused.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { within } from "./assertions.js";
import { grpcPrefix } from "./raw-h2.js";

export const MiB = 1024 * 1024;
export const HEALTH_CHECK = "/grpc.health.v1.Health/Check";
export const GET_GROUP = "/platformapi.iam.v2beta1.GroupsService/GetGroup";
/** How long a test waits for something that must happen: a liveness bound, generous for a loaded machine, never a timing assertion. */
export const LIVENESS_MS = 30_000;

/**
 * An h2c session to the port, its SETTINGS received (and so acknowledged).
 * maxSessionMemory is in MB: with Node's default (10) a client with many
 * uploads pending drops the server's answers.
 */
export async function politeSession(port: number, maxSessionMemory = 10): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`http://127.0.0.1:${port}`, { maxSessionMemory });
  session.on("error", () => {});
  await within(LIVENESS_MS, once(session, "remoteSettings"), "server SETTINGS");
  return session;
}

/** A Health.Check over a raw node:http2 stream with extra headers: the response headers, trailers and the stream's reset code. */
export async function healthCheck(session: http2.ClientHttp2Session, extra: http2.OutgoingHttpHeaders = {}) {
  const req = session.request({ ":method": "POST", ":path": HEALTH_CHECK, "content-type": "application/grpc", te: "trailers", ...extra });
  req.on("error", () => {});
  const message = toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "" }));
  req.end(Buffer.concat([grpcPrefix(message.length), message]));
  req.resume();
  let status: string | undefined;
  req.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
  req.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
  await within(LIVENESS_MS, new Promise((resolve) => req.once("close", resolve)), "health check stream closes");
  return { grpcStatus: status, rstCode: req.rstCode };
}

/** How one stream of partialMessages ended up: answered RESOURCE_EXHAUSTED, reset without an answer, or still open. */
export interface PartialStream {
  /** Settles once the stream is refused or closed, or all its partial bytes went out (so the server has read them). */
  settled: Promise<void>;
  /** The refusal's status and details, once answered. */
  answer?: { grpcStatus?: string; details?: Buffer };
  /** The reset code, once closed without an answer. */
  rstCode?: number;
  /** The client's side of the stream (to reset it). */
  req: http2.ClientHttp2Stream;
}

/**
 * Opens `count` GetGroup streams, each declaring a `declared`-byte message
 * and sending `partial` bytes of it, never the rest. A write completes only
 * when the server's flow-control window let its bytes out, that is once the
 * server has read all but a window of them: so every stream settles on an
 * event (refused, or sent and held), never on a timer.
 */
export function partialMessages(session: http2.ClientHttp2Session, count: number, partial: number, declared = 4 * MiB): PartialStream[] {
  return Array.from({ length: count }, () => {
    const req = session.request({ ":method": "POST", ":path": GET_GROUP, "content-type": "application/grpc", te: "trailers" });
    req.on("error", () => {});
    const stream: PartialStream = { settled: Promise.resolve(), req };
    stream.settled = new Promise<void>((resolve) => {
      req.on("response", (h) => {
        const bin = h["grpc-status-details-bin"];
        stream.answer = {
          grpcStatus: h["grpc-status"] as string | undefined,
          details: typeof bin === "string" ? Buffer.from(bin, "base64") : undefined,
        };
        resolve();
      });
      req.on("close", () => {
        if (!stream.answer) stream.rstCode = req.rstCode;
        resolve();
      });
      req.write(grpcPrefix(declared));
      req.write(Buffer.alloc(partial, 0x61), () => resolve());
    });
    return stream;
  });
}

/** Streams neither answered nor reset: their partial bytes are held by the server. */
export const heldOf = (streams: PartialStream[]) => streams.filter((s) => !s.answer && s.rstCode === undefined);

/** The reasons of the refused streams' ErrorInfo, after checking each is RESOURCE_EXHAUSTED with exactly one. */
export function refusalReasons(streams: PartialStream[]): string[] {
  return streams
    .filter((s) => s.answer)
    .map((o) => {
      assert.equal(o.answer!.grpcStatus, "8");
      const status = fromBinary(StatusSchema, o.answer!.details!);
      assert.equal(status.code, 8);
      const infos = status.details.filter((d) => d.typeUrl.endsWith("google.rpc.ErrorInfo")).map((d) => anyUnpack(d, ErrorInfoSchema)!);
      assert.equal(infos.length, 1);
      return infos[0]!.reason;
    });
}
