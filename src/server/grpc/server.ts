import type http2 from "node:http2";
import { ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { Health, type HealthCheckRequest } from "../../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import { defaultPendingRequestBytes, defaultPendingRequestBytesPerAddress } from "../../config.js";
import type { InternalErrorSink } from "../errors.js";
import { createByteBudget, type ByteBudget } from "../http/byte-budget.js";
import type { ClientAddresses } from "../http/client-address.js";
import type { WrappedService } from "../wrap.js";
import { grpcService, methodDefinition } from "./adapter.js";
import { healthService, type HealthState } from "./health.js";
import { limitGrpcHttp2, type GrpcHttp2Streams } from "./http2.js";
import { limitReflectionStreams } from "./reflection-http2.js";
import { DEFAULT_MAX_REFLECTION_REQUESTS, reflectionHandler, reflectionMethod, type ReflectionStreamLimits } from "./reflection-stream.js";
import type { ReflectionSchema } from "./reflection.js";
import { grpcUnaryCalls, handledStreams } from "./unary.js";

const REFLECTION_V1ALPHA = "grpc.reflection.v1alpha.ServerReflection";

/** Names of the system services served next to the API on the gRPC side. */
export const SYSTEM_SERVICES = [Health.typeName, ServerReflection.typeName, REFLECTION_V1ALPHA];

/** How the gRPC side is limited. */
export interface GrpcServerOptions {
  /** The largest request message, counted after decompression. */
  maxMessageBytes: number;
  /** An HTTP/2 connection with no stream open this long is closed (default 5 minutes). */
  idleMs?: number;
  /**
   * An HTTP/2 connection this old (±10%) gets GOAWAY, then idleMs for its
   * calls to finish before it is closed, as grpc-go's MaxConnectionAge does:
   * no stream, authenticated or not, keeps a connection for ever (default: unlimited).
   */
  maxConnectionAgeMs?: number;
  onInternal?: InternalErrorSink;
  /**
   * Bounds of one reflection stream (default: 100 requests, and a lifetime of
   * idleMs: a stream waiting for a tool's next question should not hold its
   * connection open longer than an idle connection may stay).
   */
  reflection?: Partial<ReflectionStreamLimits>;
  /**
   * Unfinished request bytes over every connection and per client address
   * (default: a budget of its own, of the default size); the caller keeps it to report it.
   */
  pendingRequestBytes?: ByteBudget;
  /** Who each connection's and call's client is (the one-port listener's, so PROXY headers count); default: the TCP peer. */
  clients?: ClientAddresses;
  /**
   * Told of every native gRPC stream that is not a call of the wrapped services (which log themselves): health,
   * reflection, an unknown method, and a unary API call answered before its handler ran (then `handled` says, at
   * the stream's close, whether it did after all). Its line is written when the stream closes.
   */
  onOtherStream?: OtherStreamObserver;
}

/** Streams one HTTP/2 connection may have open at once (advertised in SETTINGS, enforced by nghttp2). */
export const MAX_CONCURRENT_STREAMS = 100;
/** The header-list limit, the same 16 KiB as HTTP/1.1 headers on this port. */
export const MAX_HEADER_LIST_BYTES = 16 * 1024;
const DEFAULT_IDLE_MS = 5 * 60_000;

/** onOtherStream's observer: a stream and its headers, and for a unary API call whether its handler ran (read at close). */
export type OtherStreamObserver = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, handled?: () => boolean) => void;

/**
 * The native gRPC side: a grpc-js server (never bound to a port; the one-port
 * listener injects its h2c connections) serving every wrapped service, health
 * and reflection v1 + v1alpha.
 */
export function createGrpcServer(
  services: readonly WrappedService[],
  health: HealthState,
  reflection: ReflectionSchema,
  opts: GrpcServerOptions,
): grpc.Server {
  const server = new grpc.Server({
    "grpc.max_receive_message_length": opts.maxMessageBytes,
    "grpc.max_concurrent_streams": MAX_CONCURRENT_STREAMS,
    "grpc.max_connection_idle_ms": opts.idleMs ?? DEFAULT_IDLE_MS,
    "grpc.keepalive_permit_without_calls": 1,
    // No channelz service is exposed, and its per-call counters and call tracking cost ~4% of a cheap call.
    "grpc.enable_channelz": 0,
    ...(opts.maxConnectionAgeMs === undefined
      ? {}
      : {
          "grpc.max_connection_age_ms": opts.maxConnectionAgeMs,
          "grpc.max_connection_age_grace_ms": opts.idleMs ?? DEFAULT_IDLE_MS,
        }),
  });
  const unaryCalls = grpcUnaryCalls(services, {
    maxMessageBytes: opts.maxMessageBytes,
    onInternal: opts.onInternal,
    clients: opts.clients,
  });
  const unaryPaths = new Set(
    services
      .flatMap((svc) => svc.service.methods.map((m) => `/${svc.service.typeName}/${m.name}`))
      .filter((p) => unaryCalls(p) !== undefined),
  );
  const streams = limitGrpcHttp2(server, {
    maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
    // Two messages of the largest size in flight at once, and never less than 16 MiB.
    unfinishedBytesPerConnection: Math.max(16 * 1024 * 1024, 2 * opts.maxMessageBytes),
    pending: opts.pendingRequestBytes ?? defaultPendingBudget(opts.maxMessageBytes),
    clients: opts.clients,
    unaryCalls,
  });
  if (opts.onOtherStream) {
    const onOther = opts.onOtherStream;
    const apiPaths = new Set(services.flatMap((svc) => svc.service.methods.map((m) => `/${svc.service.typeName}/${m.name}`)));
    const handled = (stream: http2.ServerHttp2Stream) => () => handledStreams.has(stream);
    streams.observe((stream, headers) => {
      const path = String(headers[":path"]);
      if (!apiPaths.has(path)) onOther(stream, headers);
      // Server streams are grpc-js's: it decodes their one message before the handler, which logs the call.
      else if (unaryPaths.has(path)) onOther(stream, headers, handled(stream));
    });
  }
  for (const svc of services) {
    const { definition, implementation } = grpcService(svc, opts.onInternal, opts.clients);
    server.addService(definition, implementation);
  }
  addHealth(server, health);
  addReflection(server, streams, reflection, {
    maxRequests: opts.reflection?.maxRequests ?? DEFAULT_MAX_REFLECTION_REQUESTS,
    lifetimeMs: opts.reflection?.lifetimeMs ?? opts.idleMs ?? DEFAULT_IDLE_MS,
  });
  return server;
}

function defaultPendingBudget(maxMessageBytes: number): ByteBudget {
  const total = defaultPendingRequestBytes(maxMessageBytes);
  return createByteBudget({ total, perAddress: defaultPendingRequestBytesPerAddress(total) });
}

function addHealth(server: grpc.Server, health: HealthState): void {
  const impl = healthService(health);
  const [check, watch, list] = ["check", "watch", "list"].map((n) => Health.methods.find((m) => m.localName === n)!);
  server.addService(
    { check: methodDefinition(Health, check!), watch: methodDefinition(Health, watch!), list: methodDefinition(Health, list!) },
    {
      check(call: grpc.ServerUnaryCall<HealthCheckRequest, unknown>, callback: grpc.sendUnaryData<unknown>) {
        try {
          callback(null, impl.check(call.request));
        } catch (err) {
          // Connect's codes are gRPC's.
          const e = ConnectError.from(err);
          callback({ code: e.code as number as grpc.status, details: e.rawMessage });
        }
      },
      watch(call: grpc.ServerWritableStream<HealthCheckRequest, unknown>) {
        const abort = new AbortController();
        call.on("cancelled", () => abort.abort());
        call.on("close", () => abort.abort());
        void (async () => {
          for await (const answer of impl.watch(call.request, abort)) call.write(answer);
          // The stream ends (status OK) once Watch's maximum duration has passed.
          if (!abort.signal.aborted) call.end();
        })();
      },
      list(_call: grpc.ServerUnaryCall<unknown, unknown>, callback: grpc.sendUnaryData<unknown>) {
        callback(null, impl.list());
      },
    },
  );
}

function addReflection(server: grpc.Server, streams: GrpcHttp2Streams, schema: ReflectionSchema, limits: ReflectionStreamLimits): void {
  const handler = reflectionHandler(schema, limits);
  const methods = [ServerReflection.typeName, REFLECTION_V1ALPHA].map(reflectionMethod);
  for (const method of methods) server.addService({ serverReflectionInfo: method }, { serverReflectionInfo: handler });
  // One request past the limit still reaches the handler, which refuses it with a status after the answers.
  limitReflectionStreams(
    streams,
    methods.map((m) => m.path),
    { maxMessages: limits.maxRequests + 1, lifetimeMs: limits.lifetimeMs },
  );
}
