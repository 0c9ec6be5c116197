import { randomBytes } from "node:crypto";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createRegistry, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type ConnectRouter } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import Fastify, { LogController, type FastifyInstance, type FastifyReply } from "fastify";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { CapabilitySchema, type Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { adminSubject, createBearerAuthenticator } from "../auth/authenticator.js";
import { createAuthorizer } from "../auth/authorizer.js";
import { clientAddressKey, type Authenticator } from "../auth/principal.js";
import { addSigningKey, TokenService } from "../auth/tokens.js";
import { UpstreamVerifier } from "../auth/upstream.js";
import type { Config } from "../config.js";
import { ApiError, invalidField } from "../domain/errors.js";
import { PACKAGE_VERSION } from "../package-root.js";
import { CONTRACT_FILES, createServiceBindings } from "../services/index.js";
import { PageTokenSealer } from "../store/page-token.js";
import { redactedUrl } from "../store/postgres/url.js";
import { seedBuiltinRoles } from "../store/seed.js";
import { DATABASE_FILE } from "../store/sqlite/data-dir.js";
import type { Store } from "../store/store.js";
import { connectPlugin } from "./connect/plugin.js";
import { DEFAULT_ERROR_DOMAIN, restErrorBody, toConnectError } from "./errors.js";
import { healthService, HealthState } from "./grpc/health.js";
import { reflectionSchema } from "./grpc/reflection.js";
import { createGrpcServer, SYSTEM_SERVICES } from "./grpc/server.js";
import { createByteBudget } from "./http/byte-budget.js";
import { clientErrorHandler } from "./http/client-errors.js";
import { installResponseCompression, isRpcRequest, REQUEST_CODINGS, requestCoding } from "./http/compression.js";
import { installCors } from "./http/cors.js";
import { HeaderView } from "./http/header-view.js";
import { createOnePortServer, timeoutsFor, type OnePortServer, type OnePortTimeouts } from "./http/one-port.js";
import { nextRequestId, requestIdFrom } from "./http/request-id.js";
import { bearerChallenge } from "./http/www-authenticate.js";
import { serverLogging } from "./observe/logging.js";
import { instrumentStore, Metrics, metricsTokenMatches } from "./observe/metrics.js";
import { admittedValues, installRestAdmission, type RestBodyLimits } from "./rest/body-admission.js";
import { installDocs } from "./rest/docs.js";
import { openApiDocument } from "./rest/openapi.js";
import { RestTranscoder, RouteNotFoundError, type RestOperation } from "./rest/transcoder.js";
import { requestIdKey, wrapService, type CallObserver, type WrappedService } from "./wrap.js";

/** What a running server needs from its caller. */
export interface ServerOptions {
  config: Config;
  store: Store;
  timeouts?: OnePortTimeouts;
  /** Where log lines go instead of stdout (tests read them). */
  logStream?: NodeJS.WritableStream;
  /** Wraps the bearer-token authenticator (tests use it to hold calls in flight). */
  decorateAuthenticator?: (inner: Authenticator) => Authenticator;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
}

/** A listening server. */
export interface RunningServer {
  /** The bound port (useful with PORT=0). */
  port: number;
  /** http://127.0.0.1:<port> */
  url: string;
  app: FastifyInstance;
  health: HealthState;
  /** Every REST operation the transcoder serves. */
  restOperations: readonly RestOperation[];
  /** This server's token issuer (for tests and the CLI). */
  tokens: TokenService;
  /** The uid the built-in administrator acts as. */
  adminSubject: string;
  /**
   * Graceful stop: health goes NOT_SERVING, the listener stops accepting,
   * in-flight calls finish (up to the grace period), then the store closes.
   */
  close(): Promise<void>;
}

/**
 * Brings a store to what every server process expects: the built-in roles,
 * the first signing key, the page-token key and the administrator's uid.
 * Idempotent; run once before several workers start, so they never race to
 * create the first key (each would sign with its own).
 */
export async function prepareStore(store: Store, now: number): Promise<void> {
  await seedBuiltinRoles(store, now);
  if ((await store.keys.signingKeys()).length === 0) await addSigningKey(store.keys, now);
  await store.keys.secret("page-token-key", () => randomBytes(32));
  await adminSubject(store.keys);
}

/** Builds every part and starts listening on the one port. */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  const { config } = opts;
  const metrics = new Metrics();
  const store = instrumentStore(opts.store, metrics);
  const now = opts.now ?? Date.now;
  await prepareStore(store, now());
  const pageTokens = new PageTokenSealer(await store.keys.secret("page-token-key", () => randomBytes(32)), now);
  const tokens = await TokenService.open(store.keys, {
    issuer: config.authUrl,
    audience: config.baseUrl,
    now,
    onCache: (hit) => metrics.tokenCache.inc(hit ? "hit" : "miss"),
    // A rotation or retirement by any process is seen by the next request (which refreshes the versions first).
    keysVersion: () => store.version(["signing_keys"]),
  });
  const admin = await adminSubject(store.keys);
  const bearer = createBearerAuthenticator(
    tokens,
    admin,
    async (uid) => (await store.identities.get(uid)) !== null,
    // Called only while serving, after `app` below exists. The client's message says only what kind of refusal.
    (reason) => app.log.debug({ reason }, "bearer token refused"),
  );
  const authenticator = opts.decorateAuthenticator?.(bearer) ?? bearer;
  const allCapabilities = CapabilitySchema.values.map((v) => v.number as Capability).filter((c) => c !== 0);
  const authorizer = createAuthorizer(store, allCapabilities);

  // Called only while serving, after `app` below exists.
  const onInternalError = (err: unknown, reqId?: string) => app.log.error({ err, reqId }, "internal error");
  const deps = {
    store,
    authz: authorizer,
    pageTokens,
    now,
    tokens,
    upstream: new UpstreamVerifier(now, {
      allowLoopback: config.allowLoopbackIssuers,
      operatorIssuers: config.userIssuers,
      newIssuerTimeoutMs: config.issuerFetches.newIssuerTimeoutMs,
      fetchSlots: config.issuerFetches,
    }),
    urls: { base: config.baseUrl, auth: config.authUrl },
    signIn: { issuers: config.userIssuers, audiences: config.userAudiences },
    issuerPolicy: { allowLoopback: config.allowLoopbackIssuers },
    maxOrgsPerIdentity: config.maxOrgsPerIdentity,
  };
  // One line per RPC on every protocol: request id, caller, method, protocol, code, duration.
  const logging = serverLogging(config.logLevel, opts.logStream);
  const calls = new CallsInFlight();
  const observer: CallObserver = {
    started(protocol) {
      calls.started();
      metrics.inFlight.add(1, protocol);
    },
    admitted(protocol) {
      calls.finished();
      metrics.inFlight.add(-1, protocol);
    },
    finished(call) {
      calls.finished();
      metrics.inFlight.add(-1, call.protocol);
      metrics.requests.inc(call.service, call.method, call.protocol, call.code);
      metrics.latency.observe(call.durationMs / 1000, call.service, call.method, call.protocol);
      logging.rpc(app.log, {
        reqId: call.requestId,
        principal: call.principal,
        rpc: `${call.service}/${call.method}`,
        protocol: call.protocol,
        code: call.code,
        durationMs: Math.round(call.durationMs * 100) / 100,
      });
    },
  };
  const wrapped = createServiceBindings(deps).map((b) =>
    wrapService(b, { authenticator, authorizer, refresh: () => store.refresh(), onInternalError, observer }),
  );
  const registry = createRegistry(...CONTRACT_FILES);
  const transcoder = new RestTranscoder(wrapped, registry);
  const apiNames = wrapped.map((w) => w.service.typeName);
  const health = new HealthState(apiNames, config.healthWatchMaxMs);
  const reflection = reflectionSchema(
    [...CONTRACT_FILES, ...[Health, ServerReflection, ServerReflectionV1alpha].map((s) => s.file)],
    [...apiNames, ...SYSTEM_SERVICES],
  );
  const timeouts = opts.timeouts ?? timeoutsFor(config.keepAliveTimeoutMs, config.http2IdleTimeoutMs);
  const pendingRequestBytes = createByteBudget({ total: config.pendingRequestBytes, perAddress: config.pendingRequestBytesPerAddress });
  metrics.watchPendingRequestBytes(() => pendingRequestBytes.held);
  const grpcServer = createGrpcServer(wrapped, health, reflection, {
    maxMessageBytes: config.maxMessageBytes,
    pendingRequestBytes,
    idleMs: timeouts.http2Idle,
    maxConnectionAgeMs: config.http2MaxConnectionAgeMs,
    onInternal: onInternalError,
  });

  let front: OnePortServer | undefined;
  const app: FastifyInstance = Fastify({
    logger: logging.options,
    // Calls are logged once each, by the wrapper, on every protocol.
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: (req) => requestIdFrom(req.headers["x-request-id"]),
    bodyLimit: config.maxMessageBytes,
    return503OnClosing: true,
    // Closing "idle" keep-alive sockets on shutdown resets a request the client
    // has already sent on them; instead, queued requests get 503 + Connection: close.
    forceCloseConnections: false,
    clientErrorHandler,
    // A path fastify cannot percent-decode never reaches a route: answer it in the spec's error shape too.
    frameworkErrors: (err, _req, reply) =>
      void sendError(reply as FastifyReply, err.code === "FST_ERR_BAD_URL" ? invalidField("path", "is not validly percent-encoded") : err),
    serverFactory: (handler) => {
      front = createOnePortServer(handler, grpcServer, timeouts, {
        total: config.maxConnections,
        perAddress: config.maxConnectionsPerAddress,
        onRefused: (cap) => metrics.connectionsRefused.inc(cap),
      });
      return front as unknown as ReturnType<NonNullable<Parameters<typeof Fastify>[0] & object>["serverFactory"] & object>;
    },
  });
  app.addHook("onRequest", (req, reply, done) => {
    reply.header("x-request-id", req.id);
    done();
  });
  // Objects the routes send (errors, health, discovery) are JSON ending with a newline, like the REST bodies.
  app.setReplySerializer((payload) => `${JSON.stringify(payload)}\n`);
  installCors(app, config.corsOrigins);
  installResponseCompression(app, isRpcRequest);
  installRest(app, transcoder, { bodyLimit: config.maxMessageBytes, anonymousBodyLimit: config.anonymousMessageBytes });
  await app.register(connectPlugin, {
    routes: (router) => registerConnect(router, wrapped, health),
    contextValues: (req) =>
      createContextValues()
        .set(requestIdKey, String(req.id ?? nextRequestId()))
        .set(clientAddressKey, req.socket.remoteAddress ?? ""),
    shutdownTimeoutMs: config.shutdownGraceMs,
    maxMessageBytes: config.maxMessageBytes,
    anonymousMessageBytes: config.anonymousMessageBytes,
    bodyTimeoutMs: config.requestBodyTimeoutMs,
    registry,
    unaryHandlers: new Map(
      wrapped.flatMap((w) => w.service.methods.map((m) => [`/${w.service.typeName}/${m.name}`, w.handlers[m.localName]!])),
    ),
  });
  app.get("/healthz", async (_req, reply) => reply.send({ status: "ok" }));
  app.get("/metrics", async (req, reply) => {
    if (!metricsTokenMatches(req.headers.authorization, config.metricsToken)) {
      reply.header("www-authenticate", bearerChallenge(req.headers.authorization, "metrics"));
      return sendError(
        reply,
        new ApiError(Code.Unauthenticated, "UNAUTHENTICATED", "Unauthenticated: /metrics requires Authorization: Bearer <metrics token>"),
      );
    }
    return reply.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  installDocs(
    app,
    openApiDocument(transcoder.operations, { title: "Platform API", version: PACKAGE_VERSION, serverUrl: config.baseUrl }),
    config.baseUrl,
    metrics.registry,
  );
  app.get("/.well-known/openid-configuration", async (_req, reply) =>
    reply.header("cache-control", "public, max-age=300").send({
      issuer: config.authUrl,
      jwks_uri: `${config.authUrl}/.well-known/jwks.json`,
      token_endpoint: `${config.authUrl}/sts/exchange`,
      response_types_supported: ["token"],
      subject_types_supported: ["public"],
      id_token_signing_alg_values_supported: ["ES256"],
    }),
  );
  app.get("/.well-known/jwks.json", async (_req, reply) => reply.header("cache-control", "public, max-age=300").send(await tokens.jwks()));
  app.get("/readyz", async (_req, reply) => {
    // One cheap read: a database that stopped answering makes the process not ready at once.
    const reachable = await store.refresh().then(
      () => true,
      () => false,
    );
    const ready = health.status("") === 1 && reachable && store.ready();
    return reply.code(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
  });

  // fastify would log one "listening" line per interface; ours is the single start-up line below.
  const level = app.log.level;
  app.log.level = "warn";
  try {
    await app.listen({ port: config.port, host: config.host });
  } finally {
    app.log.level = level;
  }
  const port = (app.server.address() as AddressInfo).port;
  const facts = startupFacts(config, port);
  app.log.info(facts, startupLine(facts));
  let closing: Promise<void> | undefined;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    app,
    health,
    restOperations: transcoder.operations,
    tokens,
    adminSubject: admin,
    // The log lines of every call answered are written before close() resolves (and the process exits).
    close: () => (closing ??= shutdown(app, front!, grpcServer, health, store, calls, config.shutdownGraceMs).finally(logging.flush)),
  };
}

/** What the start-up line says, as fields: version, where it listens, the backend and its data, the docs. */
function startupFacts(config: Config, port: number) {
  // With PORT=0 the default base URL names port 0; the address to browse is the one actually bound.
  const base = config.baseUrl === `http://localhost:${config.port}` ? `http://localhost:${port}` : config.baseUrl;
  return {
    version: PACKAGE_VERSION,
    listen: `http://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`,
    backend: config.databaseUrl !== "" ? "postgresql" : "sqlite",
    data: config.databaseUrl !== "" ? redactedUrl(config.databaseUrl) : join(config.dataDir, DATABASE_FILE),
    docs: `${base}/docs`,
  };
}

function startupLine(f: ReturnType<typeof startupFacts>): string {
  const backend = f.backend === "postgresql" ? "PostgreSQL" : "SQLite";
  return `platform-api ${f.version} listening on ${f.listen} (REST, gRPC, Connect, gRPC-Web) · ${backend} ${f.data} · docs ${f.docs}`;
}

async function shutdown(
  app: FastifyInstance,
  front: OnePortServer,
  grpcServer: grpc.Server,
  health: HealthState,
  store: Store,
  calls: CallsInFlight,
  graceMs: number,
): Promise<void> {
  const deadline = Date.now() + graceMs;
  health.shutdown();
  const grpcDone = new Promise<void>((resolve) => {
    const force = setTimeout(() => {
      grpcServer.forceShutdown();
      resolve();
    }, graceMs);
    grpcServer.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
  // GOAWAY after tryShutdown has begun, so grpcDone waits for the calls in flight.
  front.drainGrpc(graceMs);
  const force = setTimeout(() => front.closeAllConnections(), graceMs);
  await Promise.all([app.close(), grpcDone]);
  clearTimeout(force);
  // A call whose client went away has no connection left to wait for, but its
  // handler may still be writing: the store closes after it (or the grace).
  await calls.settled(deadline - Date.now());
  await store.close();
  app.log.info({ durationMs: Date.now() - (deadline - graceMs) }, "platform-api stopped");
}

/** How many calls are being handled, and a wait for none. */
class CallsInFlight {
  private running = 0;
  private waiters: (() => void)[] = [];

  started(): void {
    this.running++;
  }

  finished(): void {
    if (--this.running > 0) return;
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** Resolves when no call is running, or after ms. */
  settled(ms: number): Promise<void> {
    if (this.running <= 0 || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

/**
 * Connect and gRPC-Web routes: every wrapped service, and health. (Reflection
 * is a bidi stream, which Connect cannot serve over HTTP/1.1; gRPC clients
 * reach it over h2c through grpc-js.)
 */
function registerConnect(router: ConnectRouter, services: readonly WrappedService[], health: HealthState): void {
  for (const svc of services) router.service(svc.service as DescService, svc.handlers as never);
  router.service(Health, healthService(health));
}

declare module "fastify" {
  interface FastifyInstance {
    /** ErrorInfo.domain of an error on a request to method and url (RestTranscoder.errorDomainFor). */
    errorDomainFor?: (method: string, url: string) => string;
  }
}

function sendError(reply: FastifyReply, err: unknown, status?: number): FastifyReply {
  // Whatever refused it (body parser, size limit, the service), a request to a route answers in its service's domain.
  const domain = reply.server.errorDomainFor?.(reply.request.method, reply.request.url) ?? DEFAULT_ERROR_DOMAIN;
  const rendered = restErrorBody(toConnectError(err, domain, (e) => reply.log.error({ err: e }, "internal error")));
  const code = status ?? rendered.status;
  if (code === 401 && !reply.hasHeader("www-authenticate"))
    reply.header("www-authenticate", bearerChallenge(reply.request.headers.authorization));
  return reply.code(code).type("application/json").send(rendered.body);
}

/** The REST side: admission, JSON and form parsing, the generic transcoder route, and error rendering. */
function installRest(app: FastifyInstance, transcoder: RestTranscoder, limits: RestBodyLimits): void {
  app.decorate("errorDomainFor", (method: string, url: string) => transcoder.errorDomainFor(method, url));
  // Our parsers live in their own scope: the Connect plugin registers its own.
  void app.register(async (scope) => installTranscoderRoute(scope, transcoder, limits));
  installErrorHandlers(app, limits.bodyLimit);
}

function installTranscoderRoute(app: FastifyInstance, transcoder: RestTranscoder, limits: RestBodyLimits): void {
  // A body in a coding we cannot read would only fail as "not valid JSON": say what is wrong before reading it.
  app.addHook("onRequest", async (req, reply) => {
    if (requestCoding(req.headers["content-encoding"]) !== "unsupported") return;
    const accepted = REQUEST_CODINGS.join(", ");
    const coding = String(req.headers["content-encoding"]).trim().slice(0, 40);
    const err = new ApiError(
      Code.InvalidArgument,
      "UNSUPPORTED_CONTENT_ENCODING",
      `Content-Encoding ${coding} is not supported here: send ${accepted} or no coding`,
    );
    return sendError(reply.header("accept-encoding", accepted), err, 415);
  });
  // The caller is authenticated from the headers before the body is read, which is then limited by route.
  installRestAdmission(app, transcoder, limits);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "string" }, (_req, body, done) => {
    const text = (body as string).trim();
    if (text === "") return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(invalidField("body", "is not valid JSON"));
    }
  });
  app.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_req, body, done) => {
    done(null, new URLSearchParams(body as string));
  });

  app.route({
    method: ["GET", "POST", "PUT", "PATCH", "DELETE"],
    url: "/*",
    handler: async (req, reply) => {
      try {
        // Handlers run synchronously against the store: no cancellation signal to wire.
        const res = await transcoder.handle({
          requestId: req.id,
          clientAddress: req.socket.remoteAddress ?? "",
          // HEAD is GET without the body: fastify drops the payload and keeps its length and type.
          method: req.method === "HEAD" ? "GET" : req.method,
          url: req.url,
          headers: HeaderView.ofNode(req.headers),
          body: req.body,
          values: admittedValues(req),
        });
        res.headers?.forEach((value, key) => void reply.header(key, value));
        return reply.code(res.status).type("application/json").send(res.body);
      } catch (err) {
        if (err instanceof RouteNotFoundError) return notFound(reply, req.method, err.allowed);
        return sendError(reply, err);
      }
    },
  });
}

function installErrorHandlers(app: FastifyInstance, bodyLimit: number): void {
  app.setNotFoundHandler((req, reply) => notFound(reply, req.method, []));
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string; limit?: number }, req, reply) => {
    if (err instanceof ApiError || err instanceof ConnectError) return sendError(reply, err);
    const status = err.statusCode ?? 500;
    if (status === 413) {
      // The rest of a body over the limit is not read: the connection ends with the answer.
      if (!req.raw.complete) reply.header("connection", "close");
      const limit = err.limit ?? bodyLimit;
      return sendError(reply, new ApiError(Code.ResourceExhausted, "BODY_TOO_LARGE", `Request body exceeds ${limit} bytes`), 413);
    }
    if (status === 415) return sendError(reply, invalidField("Content-Type", "must be application/json"), 415);
    if (status >= 400 && status < 500) return sendError(reply, invalidField("request", "is malformed"), status);
    return sendError(reply, err);
  });
}

function notFound(reply: FastifyReply, method: string, routeMethods: string[]): FastifyReply {
  const allowed = routeMethods.includes("GET") ? [...routeMethods, "HEAD"] : routeMethods;
  if (allowed.length > 0) {
    reply.header("allow", allowed.join(", "));
    return sendError(
      reply,
      new ApiError(Code.Unimplemented, "METHOD_NOT_ALLOWED", `Method ${method} is not allowed here; use ${allowed.join(" or ")}`),
      405,
    );
  }
  return sendError(reply, new ApiError(Code.NotFound, "ROUTE_NOT_FOUND", "No such route"));
}
