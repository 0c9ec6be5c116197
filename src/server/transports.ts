import type { DescFile, Registry } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import Fastify, { type FastifyInstance, type FastifyReply } from "fastify";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { clientAddressKey } from "../auth/principal.js";
import type { TokenService } from "../auth/tokens.js";
import type { Config } from "../config.js";
import { invalidField } from "../domain/errors.js";
import { PACKAGE_VERSION } from "../package-root.js";
import type { Store } from "../store/store.js";
import { connectPlugin } from "./connect/plugin.js";
import { registerConnect } from "./connect/routes.js";
import { HealthState, ServingStatus } from "./grpc/health.js";
import { serveHttpStreams } from "./grpc/http2.js";
import { reflectionSchema } from "./grpc/reflection.js";
import { createGrpcServer, SYSTEM_SERVICES } from "./grpc/server.js";
import { createByteBudget } from "./http/byte-budget.js";
import { createClientAddresses, installClientAddresses } from "./http/client-address.js";
import { clientErrorHandler } from "./http/client-errors.js";
import { installResponseCompression, isRpcRequest } from "./http/compression.js";
import { installCors } from "./http/cors.js";
import type { Http2RequestHandler } from "./http/http2-requests.js";
import { createOnePortServer, timeoutsFor, type OnePortServer, type OnePortTimeouts } from "./http/one-port.js";
import { nextRequestId, requestIdFrom } from "./http/request-id.js";
import type { RequestLog } from "./http/request-log.js";
import { installSignIn, type SignInDeps } from "./http/sign-in/index.js";
import { installHealthAndMetrics, installWellKnown } from "./http/system-routes.js";
import { createTlsTermination, type TlsTermination } from "./http/tls.js";
import { lazyChildLogger } from "./observe/lazy-logger.js";
import type { ServerLogging } from "./observe/logging.js";
import type { Metrics } from "./observe/metrics.js";
import { installDocs } from "./rest/docs.js";
import { openApiDocument } from "./rest/openapi.js";
import { installRest, sendError } from "./rest/routes.js";
import { RestTranscoder, type RestOperation } from "./rest/transcoder.js";
import { requestIdKey, type WrappedService } from "./wrap.js";

/** What the transports serve: the wrapped services, and what the routes beside them read. */
export interface TransportOptions {
  config: Config;
  /** What /readyz asks whether the database answers. */
  store: Store;
  /** Every API service, wrapped once for every protocol (authenticated, authorized, observed). */
  services: readonly WrappedService[];
  /** The contract's proto files (reflection describes them) and the registry of their types (JSON, google.protobuf.Any). */
  contract: { files: readonly DescFile[]; registry: Registry };
  /** This server's token issuer: its keys are the JWKS. */
  tokens: TokenService;
  /** What the sign-in routes are built from. */
  signIn: SignInDeps;
  metrics: Metrics;
  logging: ServerLogging;
  requests: RequestLog;
  /** The listener's timeouts (default: PLATFORM_KEEP_ALIVE_TIMEOUT_MS and PLATFORM_HTTP2_IDLE_TIMEOUT_MS). */
  timeouts?: OnePortTimeouts;
  /** Receives each internal error of native gRPC with the request id of its call. */
  onInternalError: (err: unknown, reqId?: string) => void;
  /** Installs the hooks that see every request first, once it has its x-request-id (the lifecycle's drain and stop). */
  installFirstHooks: (app: FastifyInstance) => void;
  /** Installs the routes of the rooms above the transports that the port serves too (the registry's), after every other. */
  installMoreRoutes: (app: FastifyInstance) => void;
}

/** Every transport on the one port, built and not yet listening. */
export interface Transports {
  app: FastifyInstance;
  /** The listener fastify listens with: it takes every connection and hands native gRPC to grpcServer. */
  front: OnePortServer;
  grpcServer: grpc.Server;
  health: HealthState;
  /** Every REST operation the transcoder serves. */
  restOperations: readonly RestOperation[];
  /** TLS on the port, when configured: reloaded on SIGHUP, closed at the stop. */
  tls: TlsTermination | undefined;
}

/**
 * Builds the transports of the one port around the wrapped services: native
 * gRPC (grpc-js, with health and reflection), and on fastify REST, Connect and
 * gRPC-Web, the system routes (health, metrics, discovery, docs) and sign-in.
 */
export async function assembleTransports(opts: TransportOptions): Promise<Transports> {
  const { config, services, metrics, logging, requests } = opts;
  const { registry } = opts.contract;
  const transcoder = new RestTranscoder(services, registry);
  const apiNames = services.map((w) => w.service.typeName);
  const health = new HealthState(apiNames, config.healthWatchMaxMs);
  const reflection = reflectionSchema(
    [...opts.contract.files, ...[Health, ServerReflection, ServerReflectionV1alpha].map((s) => s.file)],
    [...apiNames, ...SYSTEM_SERVICES],
  );
  // Read first: a missing or mismatched pair stops the start with one line. Reloads are logged once `app` exists.
  const tls = config.tls && createTlsTermination(config.tls, (level, fields, msg) => app.log[level](fields, msg));
  const timeouts = opts.timeouts ?? timeoutsFor(config.keepAliveTimeoutMs, config.http2IdleTimeoutMs);
  const pendingRequestBytes = createByteBudget({ total: config.pendingRequestBytes, perAddress: config.pendingRequestBytesPerAddress });
  metrics.watchPendingRequestBytes(() => pendingRequestBytes.held);
  // Who each connection's and request's client is, for every per-address limit and the log line.
  const clients = createClientAddresses({
    trustedProxies: config.trustedProxies,
    proxyProtocol: config.proxyProtocol,
    forwardedHeader: config.forwardedHeader,
  });
  const grpcServer = createGrpcServer(services, health, reflection, {
    clients,
    maxMessageBytes: config.maxMessageBytes,
    pendingRequestBytes,
    idleMs: timeouts.http2Idle,
    maxConnectionAgeMs: config.http2MaxConnectionAgeMs,
    onInternal: opts.onInternalError,
    // Health, reflection and unknown methods over native gRPC: grpc-js serves them outside the wrapper and fastify.
    onOtherStream: requests.otherGrpcStreams(() => app.log, clients),
  });

  const app: FastifyInstance = Fastify({
    logger: logging.options,
    // Calls are logged once each, by the wrapper, on every protocol; every other request by RequestLog.
    logController: requests,
    // A request's child logger is made only if something logs through it (most requests log nothing there).
    childLoggerFactory: lazyChildLogger,
    genReqId: (req) => requestIdFrom(req.headers["x-request-id"]),
    bodyLimit: config.maxMessageBytes,
    // Requests after the listener closed are refused by the lifecycle's hook, in the spec's error shape.
    return503OnClosing: false,
    // Closing "idle" keep-alive sockets on shutdown resets a request the client
    // has already sent on them; instead, queued requests get 503 + Connection: close.
    forceCloseConnections: false,
    clientErrorHandler,
    // A path fastify cannot percent-decode never reaches a route: answer it in the spec's error shape too.
    frameworkErrors: (err, _req, reply) =>
      void sendError(reply as FastifyReply, err.code === "FST_ERR_BAD_URL" ? invalidField("path", "is not validly percent-encoded") : err),
    serverFactory: (handler) => {
      // HTTP/2 streams that are not native gRPC reach the same handler, without the pipelining bound HTTP/1.1 needs.
      serveHttpStreams(grpcServer, { handler: handler as unknown as Http2RequestHandler, requestTimeoutMs: timeouts.request });
      const front = createOnePortServer(
        handler,
        grpcServer,
        timeouts,
        {
          total: config.maxConnections,
          perAddress: config.maxConnectionsPerAddress,
          onRefused: (cap) => metrics.connectionsRefused.inc(cap),
        },
        clients,
        tls,
      );
      return front as unknown as ReturnType<NonNullable<Parameters<typeof Fastify>[0] & object>["serverFactory"] & object>;
    },
  });
  app.addHook("onRequest", (req, reply, done) => {
    reply.header("x-request-id", req.id);
    done();
  });
  opts.installFirstHooks(app);
  installClientAddresses(app, clients);
  // Objects the routes send (errors, health, discovery) are JSON ending with a newline, like the REST bodies.
  app.setReplySerializer((payload) => `${JSON.stringify(payload)}\n`);
  installCors(app, config.corsOrigins);
  installResponseCompression(app, isRpcRequest);
  installRest(app, transcoder, { bodyLimit: config.maxMessageBytes, anonymousBodyLimit: config.anonymousMessageBytes });
  await app.register(connectPlugin, {
    routes: (router) => registerConnect(router, services, health),
    contextValues: (req) =>
      createContextValues()
        .set(requestIdKey, String(req.id ?? nextRequestId()))
        .set(clientAddressKey, req.clientAddress),
    shutdownTimeoutMs: config.shutdownGraceMs,
    maxMessageBytes: config.maxMessageBytes,
    anonymousMessageBytes: config.anonymousMessageBytes,
    bodyTimeoutMs: config.requestBodyTimeoutMs,
    registry,
    unaryHandlers: new Map(
      services.flatMap((w) => w.service.methods.map((m) => [`/${w.service.typeName}/${m.name}`, w.handlers[m.localName]!])),
    ),
  });
  installHealthAndMetrics(app, { config, store: opts.store, serving: () => health.status("") === ServingStatus.SERVING, metrics });
  installDocs(
    app,
    openApiDocument(transcoder.operations, { title: "Platform API", version: PACKAGE_VERSION, serverUrl: config.baseUrl }),
    config.baseUrl,
    metrics.registry,
  );
  installWellKnown(app, config, opts.tokens);
  installSignIn(app, opts.signIn);
  opts.installMoreRoutes(app);
  return {
    app,
    // fastify's server is the one serverFactory made.
    front: app.server as unknown as OnePortServer,
    grpcServer,
    health,
    restOperations: transcoder.operations,
    tls,
  };
}
