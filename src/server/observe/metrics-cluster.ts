import type { Worker } from "node:cluster";
import { Code } from "@connectrpc/connect";
import { AggregatorRegistry, type Registry } from "prom-client";
import { ApiError } from "../../domain/errors.js";

/**
 * One /metrics for a cluster of workers (PLATFORM_WORKERS=N): whichever
 * worker a scrape reaches asks the primary, which asks every worker for its
 * registry's numbers over the cluster channel and answers their sum. Counters
 * and histograms are summed, and a worker that exits leaves its last counts
 * in the sums, so no counter of the cluster ever goes backwards when a
 * worker is restarted. Gauges are summed (calls in flight, pool
 * connections) unless summing means nothing (event-loop lag, start time):
 * those get a `worker` label, the worker's slot (1..N, kept by its
 * replacement). A worker that has not answered within WORKER_ANSWER_MS is
 * counted with the numbers it gave last, and platform_metrics_stale_workers
 * says how many were.
 */

/** How long the primary waits for each worker's numbers before using the ones it sent last. */
export const WORKER_ANSWER_MS = 2_000;
/** How long a worker waits for the primary's answer before its scrape fails. */
const VIEW_WAIT_MS = WORKER_ANSWER_MS + 3_000;

const COLLECT = "platform-api:metrics-collect";
const SNAPSHOT = "platform-api:metrics-snapshot";
const VIEW_REQUEST = "platform-api:metrics-view-request";
const VIEW = "platform-api:metrics-view";

/** One sample of a metric, as prom-client's getMetricsAsJSON() gives it. */
interface Sample {
  value: number;
  labels: Record<string, string | number>;
  /** A histogram's _bucket, _sum or _count. */
  metricName?: string;
}

/** A metric as prom-client's getMetricsAsJSON() gives it, and AggregatorRegistry.aggregate() takes it. */
interface Metric {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: Sample[];
}

/** A message of ours on the cluster channel, of the given type. */
function isMessage<T extends object>(message: unknown, type: string): message is T & { type: string; id: number } {
  return typeof message === "object" && message !== null && (message as { type?: unknown }).type === type;
}

/** NaN and ±Infinity do not survive the channel's JSON: sent as text, read back as numbers. */
function encode(metrics: Metric[]): unknown[] {
  return metrics.map((m) => ({
    ...m,
    values: m.values.map((v) => (Number.isFinite(v.value) ? v : { ...v, value: String(v.value) })),
  }));
}

function decode(metrics: unknown[]): Metric[] {
  return (metrics as Metric[]).map((m) => ({
    ...m,
    values: m.values.map((v) => (typeof v.value === "number" ? v : { ...v, value: Number(v.value) })),
  }));
}

/** In a worker: answers the primary's requests for this process's numbers. Returns the way to stop. */
export function answerPrimary(registry: Registry): () => void {
  let seq = 0;
  const onMessage = (message: unknown) => {
    if (!isMessage(message, COLLECT)) return;
    void registry.getMetricsAsJSON().then(
      (metrics) =>
        process.send?.({ type: SNAPSHOT, id: message.id, seq: ++seq, metrics: encode(metrics as unknown as Metric[]) }, () => {}),
      () => {},
    );
  };
  process.on("message", onMessage);
  return () => process.off("message", onMessage);
}

const views = new Map<number, { resolve: (text: string) => void; reject: (err: Error) => void }>();
let lastView = 0;

/** The view this worker has asked the primary for and not yet received: concurrent scrapes share it. */
let pendingView: Promise<string> | undefined;

/**
 * In a worker: the whole cluster's exposition, from the primary; rejects when
 * the primary does not answer. Scrapes that arrive while one is being
 * gathered get that one's answer, so a flood of anonymous scrapes costs one
 * request to the primary at a time, not one per scrape.
 */
export function clusterExposition(): Promise<string> {
  pendingView ??= requestView().finally(() => {
    pendingView = undefined;
  });
  return pendingView;
}

function requestView(): Promise<string> {
  if (lastView === 0) {
    process.on("message", (message: unknown) => {
      if (!isMessage<{ text?: string; error?: string }>(message, VIEW)) return;
      const view = views.get(message.id);
      if (message.text !== undefined) view?.resolve(message.text);
      else view?.reject(new Error(message.error ?? "no view"));
    });
  }
  const id = ++lastView;
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`the primary did not answer within ${VIEW_WAIT_MS} ms`)), VIEW_WAIT_MS);
    const done = (err: Error | null, text = "") => {
      clearTimeout(timer);
      views.delete(id);
      // 503: the scrape failed for now, not the server (a scraper records the target down and retries).
      if (err)
        reject(new ApiError(Code.Unavailable, "UNAVAILABLE", `Unavailable: the cluster's metrics could not be gathered: ${err.message}`));
      else resolve(text);
    };
    views.set(id, { resolve: (text) => done(null, text), reject: done });
    process.send?.({ type: VIEW_REQUEST, id }, (err: Error | null) => {
      if (err) done(err);
    });
  });
}

/** A worker's numbers as last sent, in the order it took them. */
interface Snapshot {
  seq: number;
  metrics: Metric[];
}

/** A collection under way: the workers still to answer, and what to do once none is. */
interface Collection {
  waiting: Set<number>;
  done: () => void;
}

/** In the primary: the cluster's numbers, from its live workers and those that exited. */
export class ClusterMetrics {
  private readonly last = new Map<number, Snapshot>();
  /** The counters and histograms of exited workers, as they last sent them, summed. */
  private readonly retired = new Map<string, Metric>();
  private readonly collections = new Map<number, Collection>();
  private lastCollection = 0;
  private restarts = 0;
  /** The exposition being gathered now: scrapes arriving meanwhile share it. */
  private gathering: Promise<string> | undefined;
  /** Times the workers were asked for their numbers (platform_metrics_collections_total). */
  private collectionsStarted = 0;

  /** workers(): the live workers and their slots. */
  constructor(private readonly workers: () => ReadonlyMap<Worker, number>) {}

  /** Hands it every message a worker sends; it takes those of the metrics protocol. */
  onMessage(worker: Worker, message: unknown): void {
    if (isMessage<{ seq: number; metrics: unknown[] }>(message, SNAPSHOT)) {
      // A worker retired already is not brought back by an answer that arrived after its exit.
      if (!this.workers().has(worker)) return;
      const previous = this.last.get(worker.id);
      if (!previous || message.seq > previous.seq) this.last.set(worker.id, { seq: message.seq, metrics: decode(message.metrics) });
      const collection = this.collections.get(message.id);
      if (collection?.waiting.delete(worker.id) && collection.waiting.size === 0) collection.done();
    } else if (isMessage(message, VIEW_REQUEST)) {
      const { id } = message;
      this.exposition().then(
        (text) => worker.isConnected() && worker.send({ type: VIEW, id, text }, () => {}),
        (err: unknown) => worker.isConnected() && worker.send({ type: VIEW, id, error: String(err) }, () => {}),
      );
    }
  }

  /** A worker exited: its counters stay in the sums, its gauges go; replaced tells it a new one takes its slot. */
  retire(worker: Worker, replaced: boolean): void {
    const snapshot = this.last.get(worker.id);
    this.last.delete(worker.id);
    if (replaced) this.restarts++;
    if (!snapshot) return;
    for (const metric of snapshot.metrics) {
      if ((metric.type !== "counter" && metric.type !== "histogram") || metric.aggregator !== "sum") continue;
      const sum = this.retired.get(metric.name);
      this.retired.set(metric.name, sum ? summed([sum, metric]) : metric);
    }
  }

  /**
   * The whole cluster's Prometheus text: every live worker asked now,
   * WORKER_ANSWER_MS at most. Calls made while a collection is under way get
   * its answer: however many scrapes arrive at once, the workers are asked
   * once at a time.
   */
  exposition(): Promise<string> {
    this.gathering ??= this.gather().finally(() => {
      this.gathering = undefined;
    });
    return this.gathering;
  }

  private async gather(): Promise<string> {
    this.collectionsStarted++;
    const live = this.workers();
    const answered = await this.collect([...live.keys()].filter((w) => w.isConnected()));
    const lists: Metric[][] = [[...this.retired.values()]];
    for (const [worker, slot] of live) {
      const snapshot = this.last.get(worker.id);
      if (snapshot) lists.push(perWorker(snapshot.metrics, String(slot)));
    }
    lists.push(this.ownMetrics(live.size, live.size - answered));
    return AggregatorRegistry.aggregate(lists as never).metrics();
  }

  /** Asks workers for their numbers; resolves with how many answered in time. */
  private collect(workers: Worker[]): Promise<number> {
    const id = ++this.lastCollection;
    const waiting = new Set(workers.map((w) => w.id));
    return new Promise<number>((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        this.collections.delete(id);
        resolve(workers.length - waiting.size);
      };
      const timer = setTimeout(finish, WORKER_ANSWER_MS);
      this.collections.set(id, { waiting, done: finish });
      for (const worker of workers) worker.send({ type: COLLECT, id }, () => {});
      if (waiting.size === 0) finish();
    });
  }

  /** What only the primary knows: its workers, their restarts, and who answered this scrape late. */
  private ownMetrics(workers: number, stale: number): Metric[] {
    const one = (name: string, help: string, type: "gauge" | "counter", value: number): Metric => ({
      name,
      help,
      type,
      aggregator: "sum",
      values: [{ value, labels: {} }],
    });
    return [
      one("platform_workers", "Worker processes running now (PLATFORM_WORKERS)", "gauge", workers),
      one("platform_worker_restarts_total", "Workers that died and were started again by the primary", "counter", this.restarts),
      one(
        "platform_metrics_collections_total",
        "Times the primary asked its workers for their numbers (concurrent scrapes share one)",
        "counter",
        this.collectionsStarted,
      ),
      one(
        "platform_metrics_stale_workers",
        "Workers whose numbers in this scrape are the ones they sent before, for not answering in time",
        "gauge",
        stale,
      ),
    ];
  }
}

/** Per-worker gauges (whatever prom-client would average, take the least or most of, or omit) labelled by slot. */
function perWorker(metrics: Metric[], slot: string): Metric[] {
  return metrics.map((m) =>
    m.type !== "gauge" || m.aggregator === "sum" || m.aggregator === "first"
      ? m
      : { ...m, aggregator: "first", values: m.values.map((v) => ({ ...v, labels: { ...v.labels, worker: slot } })) },
  );
}

/** One metric's series from several sources, summed by sample name and labels (prom-client's "sum", kept synchronous). */
function summed(metrics: Metric[]): Metric {
  const byKey = new Map<string, Sample>();
  for (const metric of metrics) {
    for (const v of metric.values) {
      const labels = Object.entries(v.labels).sort(([a], [b]) => (a < b ? -1 : 1));
      const key = `${v.metricName ?? ""}\u0000${JSON.stringify(labels)}`;
      const sum = byKey.get(key);
      if (sum) sum.value += v.value;
      else byKey.set(key, { ...v });
    }
  }
  return { ...metrics[0]!, values: [...byKey.values()] };
}
