import { randomBytes } from "node:crypto";
import { createRegistry, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { createContextValues, type ConnectRouter } from "@connectrpc/connect";
import Fastify, { type FastifyInstance, type FastifyReply } from "fastify";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { CapabilitySchema, type Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { adminSubject, createBearerAuthenticator } from "../auth/authenticator.js";
import { createAuthorizer } from "../auth/authorizer.js";
import { clientAddressKey, type Authenticator } from "../auth/principal.js";
import { createCallRateLimiter } from "../auth/rate-limit.js";
import { createRefreshTokens } from "../auth/refresh-tokens.js";
import { startSignInSweep } from "../auth/sign-in-sweep.js";
import { RelyingParty } from "../auth/sign-in/relying-party.js";
import { addSigningKey, TokenService } from "../auth/tokens.js";
import { UpstreamVerifier } from "../auth/upstream.js";
import { responseJson } from "../codec/json.js";
import type { Config } from "../config.js";
import { createDeliverer } from "../delivery/deliverer.js";
import { invalidField, UnavailableError } from "../domain/errors.js";
import { PACKAGE_VERSION } from "../package-root.js";
import { installRegistryNotifications } from "../registry/notifications-route.js";
import { installRegistryToken } from "../registry/routes.js";
import { connectPlugin } from "../server/connect/plugin.js";
import { healthService, HealthState, ServingStatus } from "../server/grpc/health.js";
import { serveHttpStreams } from "../server/grpc/http2.js";
import { reflectionSchema } from "../server/grpc/reflection.js";
import { createGrpcServer, SYSTEM_SERVICES } from "../server/grpc/server.js";
import { createByteBudget } from "../server/http/byte-budget.js";
import { createClientAddresses, installClientAddresses } from "../server/http/client-address.js";
import { clientErrorHandler } from "../server/http/client-errors.js";
import { installResponseCompression, isRpcRequest } from "../server/http/compression.js";
import { installCors } from "../server/http/cors.js";
import type { Http2RequestHandler } from "../server/http/http2-requests.js";
import { listenForMetrics } from "../server/http/metrics-endpoint.js";
import { createOnePortServer, timeoutsFor, type OnePortServer, type OnePortTimeouts } from "../server/http/one-port.js";
import { nextRequestId, requestIdFrom } from "../server/http/request-id.js";
import { RequestLog } from "../server/http/request-log.js";
import { installSignIn } from "../server/http/sign-in/index.js";
import { Upstreams } from "../server/http/sign-in/upstreams.js";
import { installHealthAndMetrics, installWellKnown } from "../server/http/system-routes.js";
import { createTlsTermination } from "../server/http/tls.js";
import { logDatabaseOutages } from "../server/observe/database-log.js";
import { lazyChildLogger } from "../server/observe/lazy-logger.js";
import { serverLogging } from "../server/observe/logging.js";
import { instrumentStore, Metrics } from "../server/observe/metrics.js";
import { startTracing } from "../server/observe/tracing-start.js";
import { installDocs } from "../server/rest/docs.js";
import { openApiDocument } from "../server/rest/openapi.js";
import { installRest, sendError } from "../server/rest/routes.js";
import { RestTranscoder, type RestOperation } from "../server/rest/transcoder.js";
import { requestIdKey, wrapService, type CallObserver, type WrappedService } from "../server/wrap.js";
import { FeedCursors } from "../services/events/feed-cursor.js";
import { startEventRetention } from "../services/events/retention.js";
import { createFeedNotifier } from "../services/events/watch.js";
import { CONTRACT_FILES, createServiceBindings } from "../services/index.js";
import { createPeople } from "../services/oidc/people.js";
import { identityAssumer } from "../services/oidc/sts.js";
import { PageTokenSealer } from "../services/paging/page-token.js";
import { seedBuiltinRoles } from "../store/seed.js";
import type { Store } from "../store/store.js";
import { listen, ServerLifecycle } from "./lifecycle.js";

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
  /** http://127.0.0.1:<port>, https:// with TLS */
  url: string;
  app: FastifyInstance;
  health: HealthState;
  /** Every REST operation the transcoder serves. */
  restOperations: readonly RestOperation[];
  /** This server's token issuer (for tests and the CLI). */
  tokens: TokenService;
  /** The uid the built-in administrator acts as. */
  adminSubject: string;
  /** Prunes the events older than PLATFORM_EVENT_RETENTION now (each process also does every minute); how many went. */
  pruneEvents(): Promise<number>;
  /** How this deployment seals feed positions into cursors (tests read positions from the store). */
  eventCursors: FeedCursors;
  /** http://host:port/metrics of the listener of PLATFORM_METRICS_ADDR, when this process serves one. */
  metricsUrl?: string;
  /** Re-reads the TLS certificate and key (SIGHUP); false when TLS is off or the new pair was refused (logged). */
  reloadTls(trigger: string): boolean;
  /**
   * Graceful stop: health goes NOT_SERVING while calls are still served for
   * PLATFORM_DRAIN_MS, then the listener stops accepting, in-flight calls
   * finish (up to the grace period), then the store closes. Called again
   * while draining, it skips the rest of the drain (see ServerLifecycle).
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
  metrics.watchStore(opts.store);
  // OpenTelemetry when OTEL_EXPORTER_OTLP_* name a collector; undefined, with nothing loaded, when not.
  const tracing = await startTracing({ version: PACKAGE_VERSION, warn: (fields, msg) => app.log.warn(fields, msg) });
  const observed = instrumentStore(opts.store, metrics);
  const store = tracing?.traceStore(observed) ?? observed;
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
  // Its refusals are logged at debug, with their request ids, by RequestLog.logRefusals below.
  const bearer = createBearerAuthenticator(tokens, admin, async (uid) => (await store.identities.get(uid)) !== null);
  const authenticator = opts.decorateAuthenticator?.(bearer) ?? bearer;
  const allCapabilities = CapabilitySchema.values.map((v) => v.number as Capability).filter((c) => c !== 0);
  const authorizer = createAuthorizer(store, allCapabilities, metrics.countCache("authorization"));

  // The onError callbacks below log through `app`, which exists before they can run.
  const registry = createRegistry(...CONTRACT_FILES);
  const feedNotifier = createFeedNotifier();
  const eventCursors = await FeedCursors.open(store.keys);
  const retention = startEventRetention(store.events, {
    retentionMs: config.eventRetentionMs,
    now,
    // A database outage is logged once, by logDatabaseOutages, not once per loop it stops.
    onError: (err) => {
      if (!(err instanceof UnavailableError)) app.log.warn({ err }, "pruning old events failed; retried in a minute");
    },
  });
  const signInSweep = startSignInSweep(store, {
    refresh: config.refresh,
    now,
    onError: (err) => {
      if (!(err instanceof UnavailableError))
        app.log.warn({ err }, "sweeping expired sign-ins and refresh tokens failed; retried in a minute");
    },
  });
  const deliverer = createDeliverer({
    store,
    authz: authorizer,
    tokens,
    source: config.baseUrl,
    policy: { allowLoopback: config.allowLoopbackIssuers },
    now,
    concurrency: config.deliveries.concurrency,
    leaseMs: config.deliveries.leaseMs,
    pollMs: config.deliveries.pollMs,
    onAttempt: (_subscription, attempt, event) => {
      metrics.deliveryAttempts.inc(attempt.outcome);
      metrics.deliveryLag.observe(Math.max(0, attempt.time - event.time) / 1000);
    },
    onError: (err) => {
      if (!(err instanceof UnavailableError)) app.log.error({ err }, "subscription delivery failed; retried shortly");
    },
  });
  metrics.watchSubscriptionLags(() => deliverer.lags());
  const onInternalError = (err: unknown, reqId?: string) => app.log.error({ err, reqId }, "internal error");
  // The operator's sign-in providers are user issuers: the operator trusts them as given (any address), and they vouch for emails.
  const userIssuers = [...new Set([...config.userIssuers, ...config.signInProviders.map((p) => p.issuer)])];
  const deps = {
    store,
    authz: authorizer,
    pageTokens,
    now,
    tokens,
    refreshTokens: createRefreshTokens({ store, now, settings: config.refresh }),
    upstream: new UpstreamVerifier(now, {
      allowLoopback: config.allowLoopbackIssuers,
      operatorIssuers: userIssuers,
      newIssuerTimeoutMs: config.issuerFetches.newIssuerTimeoutMs,
      fetchSlots: config.issuerFetches,
    }),
    urls: { base: config.baseUrl, auth: config.authUrl },
    signIn: { issuers: userIssuers, audiences: config.userAudiences },
    issuerPolicy: { allowLoopback: config.allowLoopbackIssuers },
    maxOrgsPerIdentity: config.maxOrgsPerIdentity,
    maxSubscriptionsPerOrg: config.maxSubscriptionsPerOrg,
    onInviteRefused: (reason: "per_caller" | "per_address") => metrics.inviteRefusals.inc(reason),
    events: {
      json: (schema: DescMessage, message: unknown) => responseJson(schema, message, registry),
      source: config.baseUrl,
      cursors: eventCursors,
      retentionMs: config.eventRetentionMs,
      written: (events: readonly { kind: string }[]) => {
        for (const e of events) metrics.eventsWritten.inc(e.kind);
        // The loop it wakes starts traces of its own rather than joining the call that committed.
        if (tracing) tracing.detached(() => deliverer.wake());
        else deliverer.wake();
      },
      watch: {
        notifier: feedNotifier,
        pollMs: config.eventWatch.pollMs,
        maxStreamMs: config.eventWatch.maxStreamMs,
        heartbeatMs: config.eventWatch.heartbeatMs,
        maxPerIdentity: config.eventWatch.perIdentity,
        maxPerOrganization: config.eventWatch.perOrganization,
        maxTotal: config.eventWatch.total,
      },
    },
  };
  metrics.watchCache("issuer_discovery", () => deps.upstream.discoveryLookups);
  metrics.watchCache("issuer_static_keys", () => deps.upstream.staticKeyLookups);
  // One line per RPC on every protocol: request id, caller, method, protocol, code, duration (and its span's ids when
  // tracing); one per other HTTP request.
  const logging = serverLogging(config.logLevel, opts.logStream, tracing && (() => tracing.logIds()));
  const requests = new RequestLog(logging, config.logLevel);
  const lifecycle = new ServerLifecycle({ drainMs: config.drainMs, graceMs: config.shutdownGraceMs });
  const { calls } = lifecycle;
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
      const rpc = `${call.service}/${call.method}`;
      calls.finished();
      requests.callFinished(call.requestId, rpc);
      metrics.inFlight.add(-1, call.protocol);
      metrics.requests.inc(call.service, call.method, call.protocol, call.code);
      metrics.latency.observe(call.durationMs / 1000, call.service, call.method, call.protocol);
      logging.rpc(app.log, {
        reqId: call.requestId,
        principal: call.principal,
        remoteAddress: call.remoteAddress,
        rpc,
        protocol: call.protocol,
        code: call.code,
        durationMs: Math.round(call.durationMs * 100) / 100,
      });
    },
  };
  const perSecond = config.callsPerIdentity;
  const callLimiter =
    perSecond > 0
      ? { perSecond, limiter: createCallRateLimiter({ perSecond, burst: 2 * perSecond, now: () => performance.now() }) }
      : undefined;
  const loggedAuthenticator = requests.logRefusals(authenticator, () => app.log);
  const wrapped = requests.announcingCalls(
    createServiceBindings(deps).map((b) => {
      const service = wrapService(b, {
        authenticator: loggedAuthenticator,
        authorizer,
        refresh: () => store.refresh(),
        onInternalError,
        observer,
        callLimiter,
      });
      return tracing?.traceService(service) ?? service;
    }),
  );
  const transcoder = new RestTranscoder(wrapped, registry);
  const apiNames = wrapped.map((w) => w.service.typeName);
  const health = new HealthState(apiNames, config.healthWatchMaxMs);
  const reflection = reflectionSchema(
    [...CONTRACT_FILES, ...[Health, ServerReflection, ServerReflectionV1alpha].map((s) => s.file)],
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
  const grpcServer = createGrpcServer(wrapped, health, reflection, {
    clients,
    maxMessageBytes: config.maxMessageBytes,
    pendingRequestBytes,
    idleMs: timeouts.http2Idle,
    maxConnectionAgeMs: config.http2MaxConnectionAgeMs,
    onInternal: onInternalError,
    // Health, reflection and unknown methods over native gRPC: grpc-js serves them outside the wrapper and fastify.
    onOtherStream: requests.otherGrpcStreams(() => app.log, clients),
  });

  let front: OnePortServer | undefined;
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
      front = createOnePortServer(
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
  lifecycle.install(app);
  installClientAddresses(app, clients);
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
        .set(clientAddressKey, req.clientAddress),
    shutdownTimeoutMs: config.shutdownGraceMs,
    maxMessageBytes: config.maxMessageBytes,
    anonymousMessageBytes: config.anonymousMessageBytes,
    bodyTimeoutMs: config.requestBodyTimeoutMs,
    registry,
    unaryHandlers: new Map(
      wrapped.flatMap((w) => w.service.methods.map((m) => [`/${w.service.typeName}/${m.name}`, w.handlers[m.localName]!])),
    ),
  });
  installHealthAndMetrics(app, { config, store, serving: () => health.status("") === ServingStatus.SERVING, metrics });
  installDocs(
    app,
    openApiDocument(transcoder.operations, { title: "Platform API", version: PACKAGE_VERSION, serverUrl: config.baseUrl }),
    config.baseUrl,
    metrics.registry,
  );
  installWellKnown(app, config, tokens);
  installRegistryNotifications(app, { store, now, events: deps.events, secret: config.registryNotifySecret });
  installRegistryToken(app, { config, store, authz: authorizer, authenticator: loggedAuthenticator, assume: identityAssumer(deps), now });
  installSignIn(app, {
    store,
    tokens,
    now,
    people: createPeople(deps),
    refreshTokens: deps.refreshTokens,
    rp: new RelyingParty({ redirectUri: `${config.authUrl}/sign-in/callback`, policy: deps.issuerPolicy, upstream: deps.upstream, now }),
    upstreams: new Upstreams(store, config.signInProviders),
    authUrl: config.authUrl,
    secureCookies: config.authUrl.startsWith("https:") || config.tls !== undefined,
    pendingPerAddress: config.signInPendingPerAddress,
  });

  // With PLATFORM_METRICS_ADDR, /metrics has a listener of its own (in worker mode, the primary's) instead of a route;
  // either way the line saying where metrics can be scraped, or that they are private, is logged here (or by the primary).
  const metricsListener = await listenForMetrics(config, metrics, app.log);
  const port = await listen(app, config, store);
  const stopOutageLog = logDatabaseOutages(() => app.log, store.describe().location);
  tracing?.logStart(app.log);
  if (config.deliveries.enabled) deliverer.start();
  return {
    port,
    url: `${config.tls ? "https" : "http"}://127.0.0.1:${port}`,
    app,
    health,
    restOperations: transcoder.operations,
    tokens,
    adminSubject: admin,
    // The log lines of every call answered are written before close() resolves (and the process exits).
    reloadTls: (trigger) => tls?.reload(trigger) ?? false,
    pruneEvents: () => retention.pruneNow(),
    eventCursors,
    metricsUrl: metricsListener?.url,
    close: async () => {
      retention.stop();
      signInSweep.stop();
      // Before the store closes: a post cut short is simply posted again by the next holder of its lease.
      await deliverer.stop();
      feedNotifier.close();
      tls?.close();
      const inFlight = () => requests.inFlight();
      return lifecycle.close({ app, front: front!, grpcServer, health, store, tracing, flush: logging.flush, inFlight }).finally(() => {
        stopOutageLog();
        // Last, so scrapes still see the drain.
        metrics.close();
        return metricsListener?.close();
      });
    },
  };
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
