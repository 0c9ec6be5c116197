import { createHash, timingSafeEqual } from "node:crypto";
import { collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { createObservedStore } from "../../store/observed.js";
import type { Store } from "../../store/store.js";
import { SeriesCounter, SeriesGauge, SeriesHistogram } from "./series-metrics.js";

/** The server's Prometheus metrics, served at /metrics. Label values are passed in labelNames order. */
export class Metrics {
  readonly registry = new Registry();
  /** service, method, protocol, code */
  readonly requests = new SeriesCounter(
    "platform_requests_total",
    "RPCs handled, by service, method, protocol and gRPC status code name",
    ["service", "method", "protocol", "code"],
    this.registry,
  );
  /** service, method, protocol */
  readonly latency = new SeriesHistogram(
    "platform_request_duration_seconds",
    "RPC handling time, by service, method and protocol",
    ["service", "method", "protocol"],
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    this.registry,
  );
  /** protocol */
  readonly inFlight = new SeriesGauge("platform_requests_in_flight", "RPCs being handled now, by protocol", ["protocol"], this.registry);
  /** part, operation */
  readonly storeTime = new SeriesHistogram(
    "platform_store_query_duration_seconds",
    "Time spent in store calls, by store part and operation",
    ["part", "operation"],
    [0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25],
    this.registry,
  );
  /** result */
  readonly tokenCache = new SeriesCounter(
    "platform_token_cache_total",
    "API token verifications, by result: hit (served from the verified-token cache) or miss",
    ["result"],
    this.registry,
  );
  /** cap */
  readonly connectionsRefused = new SeriesCounter(
    "platform_connections_refused_total",
    "Connections reset on arrival for being over a cap: total (PLATFORM_MAX_CONNECTIONS) or per_address",
    ["cap"],
    this.registry,
  );

  /** kind */
  readonly eventsWritten = new SeriesCounter(
    "platform_events_written_total",
    "Change-feed events committed by this process, by kind of resource (group, identity, role, ...)",
    ["kind"],
    this.registry,
  );

  /** outcome */
  readonly deliveryAttempts = new SeriesCounter(
    "platform_event_delivery_attempts_total",
    "Event deliveries to subscriptions' sinks attempted by this process, by outcome (delivered, retry, failed)",
    ["outcome"],
    this.registry,
  );
  readonly deliveryLag = new SeriesHistogram(
    "platform_event_delivery_lag_seconds",
    "Time from an event's commit to an attempt to deliver it",
    [],
    [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600],
    this.registry,
  );

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "platform_" });
  }

  /** Reports platform_pending_request_bytes, read from its one source at each scrape so it cannot drift. */
  watchPendingRequestBytes(held: () => number): void {
    new Gauge({
      name: "platform_pending_request_bytes",
      help: "Bytes of gRPC request messages still arriving, held now over every connection (PLATFORM_MAX_PENDING_REQUEST_BYTES bounds it)",
      registers: [this.registry],
      collect() {
        this.set(held());
      },
    });
  }
}

/**
 * Whether an Authorization header may read /metrics: always when no metrics
 * token is configured, else only "Bearer <token>". Both sides are hashed
 * first, so the comparison takes the same time whatever the length or the
 * first differing byte of a guess.
 */
export function metricsTokenMatches(authorization: string | undefined, token: string): boolean {
  if (token === "") return true;
  const m = /^Bearer (\S+)$/i.exec(authorization ?? "");
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(m?.[1] ?? ""), digest(token)) && m !== null;
}

/** The store observed into the store-time histogram. */
export function instrumentStore(store: Store, metrics: Metrics): Store {
  return createObservedStore(store, (seconds, part, method) => metrics.storeTime.observe(seconds, part, method));
}
