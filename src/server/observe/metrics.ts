import cluster from "node:cluster";
import { collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { PACKAGE_VERSION } from "../../package-root.js";
import { cacheStatsOf } from "../../store/decorators/caching.js";
import { createObservedStore } from "../../store/decorators/observed.js";
import type { PoolStats, Store } from "../../store/store.js";
import { answerPrimary, clusterExposition } from "./metrics-cluster.js";
import { sampleEventLoopDelay } from "./metrics-event-loop.js";
import { CollectedSeries, SeriesCounter, SeriesGauge, SeriesHistogram, type CollectedValue } from "./series-metrics.js";

export { metricsTokenMatches } from "./metrics-token.js";

/**
 * Default metrics of prom-client left out: three gauges named like counters
 * (`_total`; promtool refuses them; their per-type gauges without the suffix
 * stay, and sum to the same), and the event-loop delay summaries that read
 * 10 ms on an idle loop and restart at every scrape (platform_event_loop_delay_seconds
 * replaces them; nodejs_eventloop_lag_seconds stays).
 */
const LEFT_OUT_DEFAULTS = [
  "nodejs_active_handles_total",
  "nodejs_active_requests_total",
  "nodejs_active_resources_total",
  ...["min", "max", "mean", "stddev", "p50", "p90", "p99"].map((s) => `nodejs_eventloop_lag_${s}_seconds`),
];

/** Lookups of a cache that found their answer, and those that did not. */
export interface CacheCounts {
  hits: number;
  misses: number;
}

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

  /** reason: per_caller or per_address, the limit that was reached */
  readonly inviteRefusals = new SeriesCounter(
    "platform_invite_refusals_total",
    "Invite codes refused RESOURCE_EXHAUSTED after too many failures, by the limit reached: per_caller or per_address",
    ["reason"],
    this.registry,
  );

  readonly eventLoopDelay = new SeriesHistogram(
    "platform_event_loop_delay_seconds",
    "How late a timer due every 20 ms ran: how long the event loop was busy with something else",
    [],
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    this.registry,
  );

  /** Each subscription's delivery lag as this process's deliverer sees it, read at every scrape. */
  private subscriptionLags: () => Iterable<[uid: string, seconds: number]> = () => [];

  /** Each cache's counts, read at every scrape. */
  private readonly caches = new Map<string, () => CacheCounts>();
  private readonly stops: (() => void)[] = [];

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "platform_" });
    for (const name of LEFT_OUT_DEFAULTS) this.registry.removeSingleMetric(`platform_${name}`);
    const cacheSeries = (key: keyof CacheCounts) => () => [...this.caches].map(([name, read]): CollectedValue => [[name], read()[key]]);
    new CollectedSeries(
      "platform_cache_hits_total",
      "Cache lookups answered from the cache, by cache",
      "counter",
      ["cache"],
      this.registry,
      cacheSeries("hits"),
    );
    new CollectedSeries(
      "platform_cache_misses_total",
      "Cache lookups that had to do the work, by cache",
      "counter",
      ["cache"],
      this.registry,
      cacheSeries("misses"),
    );
    new CollectedSeries(
      "platform_event_subscription_lag_seconds",
      "How long each subscription's oldest undelivered event has waited (0 when it is caught up; one series per subscription)",
      "gauge",
      ["subscription"],
      this.registry,
      () => [...this.subscriptionLags()].map(([uid, seconds]): CollectedValue => [[uid], seconds]),
      "max",
    );
    this.watchCache("tokens", () => ({ hits: this.tokenCache.value("hit"), misses: this.tokenCache.value("miss") }));
    this.stops.push(sampleEventLoopDelay((seconds) => this.eventLoopDelay.observe(seconds)));
    // In a worker, the primary gathers every worker's numbers into the one view a scrape gets.
    if (cluster.isWorker) this.stops.push(answerPrimary(this.registry));
  }

  /** The Prometheus text a scrape gets: this process's, or in a worker the whole cluster's (metrics-cluster.ts). */
  exposition(): Promise<string> {
    return cluster.isWorker ? clusterExposition() : this.registry.metrics();
  }

  /** The exposition's content type. */
  get contentType(): string {
    return this.registry.contentType;
  }

  /**
   * Reports what the store can say of itself: platform_build_info with its
   * engine, its pool (PostgreSQL; SQLite has one connection per process and
   * no pool) and its read caches.
   */
  watchStore(store: Store): void {
    const build = new Gauge({
      name: "platform_build_info",
      help: "Always 1: the running version, its Node.js and the store engine, as labels",
      labelNames: ["version", "node_version", "engine"],
      registers: [this.registry],
      aggregator: "first",
    });
    build.set({ version: PACKAGE_VERSION, node_version: process.version, engine: store.describe().backend }, 1);
    const pool = store.poolStats?.bind(store);
    if (pool) this.watchPool(pool);
    const caches = cacheStatsOf(store);
    if (caches) {
      this.watchCache("store_answers", () => caches.answers);
      this.watchCache("store_counts", () => caches.counts);
    }
  }

  /** The pool's connections by state, its waiters and its size, read at each scrape. */
  private watchPool(pool: () => PoolStats): void {
    new CollectedSeries(
      "platform_database_connections",
      "PostgreSQL connections of this process's pool, by state: in_use (lent to a query or transaction) or idle",
      "gauge",
      ["state"],
      this.registry,
      () => {
        const now = pool();
        return [
          [["in_use"], now.inUse],
          [["idle"], now.idle],
        ];
      },
    );
    new CollectedSeries(
      "platform_database_connection_waiters",
      "Queries and transactions waiting for a PostgreSQL connection because every one is in use",
      "gauge",
      [],
      this.registry,
      () => [[[], pool().waiting]],
    );
    new CollectedSeries(
      "platform_database_connections_max",
      "PostgreSQL connections this process's pool opens at most (PLATFORM_DATABASE_POOL_SIZE)",
      "gauge",
      [],
      this.registry,
      () => [[[], pool().max]],
    );
  }

  /** Reports each subscription's delivery lag, read from read() at each scrape (the deliverer's lags()). */
  watchSubscriptionLags(read: () => Iterable<[uid: string, seconds: number]>): void {
    this.subscriptionLags = read;
  }

  /** Reports a cache's hits and misses, read from read() at each scrape (counts that only grow). */
  watchCache(name: string, read: () => CacheCounts): void {
    this.caches.set(name, read);
  }

  /** A cache that tells of its lookups one at a time: call the answer with true for a hit, false for a miss. */
  countCache(name: string): (hit: boolean) => void {
    const counts: CacheCounts = { hits: 0, misses: 0 };
    this.watchCache(name, () => counts);
    return (hit) => void (hit ? counts.hits++ : counts.misses++);
  }

  /** Stops the event-loop sampler and, in a worker, answering the primary. */
  close(): void {
    for (const stop of this.stops.splice(0)) stop();
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

/** The store observed into the store-time histogram. */
export function instrumentStore(store: Store, metrics: Metrics): Store {
  return createObservedStore(store, (seconds, part, method) => metrics.storeTime.observe(seconds, part, method));
}
