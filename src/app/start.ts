import { randomBytes } from "node:crypto";
import type { FastifyInstance } from "fastify";
import { adminSubject } from "../auth/authenticator.js";
import type { Authenticator } from "../auth/principal.js";
import { addSigningKey, type TokenService } from "../auth/tokens.js";
import type { Config } from "../config.js";
import { installRegistryNotifications } from "../registry/notifications-route.js";
import { installRegistryToken } from "../registry/routes.js";
import type { HealthState } from "../server/grpc/health.js";
import { listenForMetrics } from "../server/http/metrics-endpoint.js";
import type { OnePortTimeouts } from "../server/http/one-port.js";
import { logDatabaseOutages } from "../server/observe/database-log.js";
import type { RestOperation } from "../server/rest/transcoder.js";
import { assembleTransports } from "../server/transports.js";
import type { FeedCursors } from "../services/events/feed-cursor.js";
import { CONTRACT_FILES } from "../services/index.js";
import { identityAssumer } from "../services/oidc/sts.js";
import { seedBuiltinRoles } from "../store/seed.js";
import type { Store } from "../store/store.js";
import { wrapServices } from "./calls.js";
import { buildDependencies } from "./dependencies.js";
import { listen, ServerLifecycle } from "./lifecycle.js";
import { openObservability } from "./observability.js";

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

/**
 * Starts a server: opens its observability, builds the services' dependencies,
 * wraps the services and hands them to the transports of the one port, then
 * listens there.
 */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  const { config } = opts;
  const now = opts.now ?? Date.now;
  // Whatever logs from here on (a failed span export, the background work, a call) does so through the transports'
  // logger: none of it can run before the transports exist.
  const log = () => transports.app.log;
  const observability = await openObservability(config, opts.store, opts.logStream, log);
  const { metrics, tracing, store, logging, requests } = observability;
  await prepareStore(store, now());
  const deps = await buildDependencies({ config, store, now, observability, log, decorateAuthenticator: opts.decorateAuthenticator });
  const lifecycle = new ServerLifecycle({ drainMs: config.drainMs, graceMs: config.shutdownGraceMs });
  const onInternalError = (err: unknown, reqId?: string) => log().error({ err, reqId }, "internal error");
  const transports = await assembleTransports({
    config,
    store,
    services: wrapServices(deps, { observability, calls: lifecycle.calls, log, onInternalError }),
    contract: { files: CONTRACT_FILES, registry: deps.registry },
    tokens: deps.services.tokens,
    signIn: deps.signIn,
    metrics,
    logging,
    requests,
    timeouts: opts.timeouts,
    onInternalError,
    installFirstHooks: (app) => lifecycle.install(app),
    installMoreRoutes: (app) => {
      installRegistryNotifications(app, { store, now, events: deps.services.events, secret: config.registryNotifySecret });
      installRegistryToken(app, {
        config,
        store,
        authz: deps.services.authz,
        authenticator: deps.authenticator,
        assume: identityAssumer(deps.services),
        now,
      });
    },
  });
  const { app, front, grpcServer, health, tls } = transports;

  // With PLATFORM_METRICS_ADDR, /metrics has a listener of its own (in worker mode, the primary's) instead of a route;
  // either way the line saying where metrics can be scraped, or that they are private, is logged here (or by the primary).
  const metricsListener = await listenForMetrics(config, metrics, app.log);
  const port = await listen(app, config, store);
  const stopOutageLog = logDatabaseOutages(() => app.log, store.describe().location);
  tracing?.logStart(app.log);
  if (config.deliveries.enabled) deps.deliverer.start();
  return {
    port,
    url: `${config.tls ? "https" : "http"}://127.0.0.1:${port}`,
    app,
    health,
    restOperations: transports.restOperations,
    tokens: deps.services.tokens,
    adminSubject: deps.admin,
    reloadTls: (trigger) => tls?.reload(trigger) ?? false,
    pruneEvents: () => deps.retention.pruneNow(),
    eventCursors: deps.services.events.cursors,
    metricsUrl: metricsListener?.url,
    // The log lines of every call answered are written before close() resolves (and the process exits).
    close: async () => {
      await deps.stopBackground();
      tls?.close();
      const inFlight = () => requests.inFlight();
      return lifecycle.close({ app, front, grpcServer, health, store, tracing, flush: logging.flush, inFlight }).finally(() => {
        stopOutageLog();
        // Last, so scrapes still see the drain.
        metrics.close();
        return metricsListener?.close();
      });
    },
  };
}
