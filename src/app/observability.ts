import type { FastifyBaseLogger } from "fastify";
import type { Config } from "../config.js";
import { PACKAGE_VERSION } from "../package-root.js";
import { RequestLog } from "../server/http/request-log.js";
import { serverLogging, type ServerLogging } from "../server/observe/logging.js";
import { instrumentStore, Metrics } from "../server/observe/metrics.js";
import { startTracing } from "../server/observe/tracing-start.js";
import type { Tracing } from "../server/observe/tracing.js";
import type { Store } from "../store/store.js";

/** How a server process is watched: its metrics, its traces when a collector is named, its log lines. */
export interface Observability {
  metrics: Metrics;
  /** OpenTelemetry when OTEL_EXPORTER_OTLP_* name a collector; undefined, with nothing loaded, when not. */
  tracing: Tracing | undefined;
  /** The store every part uses: each call measured, and traced when tracing is on. */
  store: Store;
  logging: ServerLogging;
  /** The line of every request and call, and what is in flight when a stop cuts it. */
  requests: RequestLog;
}

/**
 * Opens the metrics, the tracer and the logs, and wraps the store in them.
 * log is the server's logger, which exists before the tracer reports a
 * failed export (it does only once spans exist, so only while serving).
 */
export async function openObservability(
  config: Config,
  store: Store,
  logStream: NodeJS.WritableStream | undefined,
  log: () => FastifyBaseLogger,
): Promise<Observability> {
  const metrics = new Metrics();
  metrics.watchStore(store);
  const tracing = await startTracing({ version: PACKAGE_VERSION, warn: (fields, msg) => log().warn(fields, msg) });
  const observed = instrumentStore(store, metrics);
  // One line per RPC on every protocol: request id, caller, method, protocol, code, duration (and its span's ids when
  // tracing); one per other HTTP request.
  const logging = serverLogging(config.logLevel, logStream, tracing && (() => tracing.logIds()));
  return {
    metrics,
    tracing,
    store: tracing?.traceStore(observed) ?? observed,
    logging,
    requests: new RequestLog(logging, config.logLevel),
  };
}
