import type { Registry } from "prom-client";

/**
 * Counters, gauges and histograms for the request path. prom-client hashes a
 * sorted copy of the label object on every update, a measurable share of a
 * cheap request; these find their series by the label values joined into one
 * key and update plain numbers. They render through a prom-client Registry
 * (registerMetric duck-types on name and get()), next to its default metrics.
 */
abstract class SeriesMetric<S> {
  private readonly all = new Map<string, { labels: Record<string, string>; state: S }>();
  abstract readonly type: "counter" | "gauge" | "histogram";

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  protected abstract fresh(): S;

  /** The series for these label values, in labelNames order. */
  protected at(values: readonly string[]): S {
    const key = keyOf(values);
    let found = this.all.get(key);
    if (!found) {
      const labels = Object.fromEntries(this.labelNames.map((n, i) => [n, values[i] ?? ""]));
      found = { labels, state: this.fresh() };
      this.all.set(key, found);
    }
    return found.state;
  }

  /** The series for these label values if it was ever updated, without making it. */
  protected find(values: readonly string[]): S | undefined {
    return this.all.get(keyOf(values))?.state;
  }

  protected abstract render(
    labels: Record<string, string>,
    state: S,
  ): { value: number; labels: Record<string, string | number>; metricName?: string }[];

  /** prom-client's MetricObjectWithValues, as Registry#metrics() reads it. */
  get() {
    const values = [...this.all.values()].flatMap(({ labels, state }) => this.render(labels, state));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: "sum" };
  }
}

/** The key of a series: its one label value, or the values joined. */
function keyOf(values: readonly string[]): string {
  return values.length === 1 ? values[0]! : values.join("\u0000");
}

/** One number per series: the shared body of counters and gauges. */
abstract class SeriesNumber extends SeriesMetric<{ n: number }> {
  protected fresh() {
    return { n: 0 };
  }
  protected render(labels: Record<string, string>, state: { n: number }) {
    return [{ value: state.n, labels }];
  }
  /** The series' number now (0 before its first update). */
  value(...values: string[]): number {
    return this.find(values)?.n ?? 0;
  }
}

/** A counter: inc(...labelValues). */
export class SeriesCounter extends SeriesNumber {
  readonly type = "counter";
  inc(...values: string[]): void {
    this.at(values).n++;
  }
}

/** A gauge moved up and down: add(delta, ...labelValues). */
export class SeriesGauge extends SeriesNumber {
  readonly type = "gauge";
  add(delta: number, ...values: string[]): void {
    this.at(values).n += delta;
  }
}

interface HistogramState {
  /** Observations at or below each bound (not cumulative; summed when rendered). */
  counts: Float64Array;
  sum: number;
  count: number;
}

/** A histogram with fixed upper bounds: observe(value, ...labelValues). */
export class SeriesHistogram extends SeriesMetric<HistogramState> {
  readonly type = "histogram";

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly bounds: readonly number[],
    registry: Registry,
  ) {
    super(name, help, labelNames, registry);
  }

  protected fresh(): HistogramState {
    return { counts: new Float64Array(this.bounds.length), sum: 0, count: 0 };
  }

  observe(value: number, ...values: string[]): void {
    const state = this.at(values);
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    if (i < bounds.length) state.counts[i]!++;
    state.sum += value;
    state.count++;
  }

  protected render(labels: Record<string, string>, state: HistogramState) {
    const out: { value: number; labels: Record<string, string | number>; metricName: string }[] = [];
    let cumulative = 0;
    this.bounds.forEach((le, i) => {
      cumulative += state.counts[i]!;
      out.push({ value: cumulative, labels: { ...labels, le }, metricName: `${this.name}_bucket` });
    });
    out.push({ value: state.count, labels: { ...labels, le: "+Inf" }, metricName: `${this.name}_bucket` });
    out.push({ value: state.sum, labels, metricName: `${this.name}_sum` });
    out.push({ value: state.count, labels, metricName: `${this.name}_count` });
    return out;
  }
}

/** One series of a CollectedSeries: its label values, in labelNames order, and its number. */
export type CollectedValue = readonly [labelValues: readonly string[], value: number];

/**
 * A counter or gauge whose numbers are read from their source at each scrape
 * (a pool's connections, a cache's hits), so they cannot drift from it and
 * cost nothing between scrapes. A counter's source must only grow.
 */
export class CollectedSeries {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: "counter" | "gauge",
    private readonly labelNames: readonly string[],
    registry: Registry,
    private readonly read: () => Iterable<CollectedValue>,
    /** How the primary combines the workers' series in worker mode (prom-client's aggregators). */
    private readonly aggregator: "sum" | "max" = "sum",
  ) {
    registry.registerMetric(this as never);
  }

  /** prom-client's MetricObjectWithValues, as Registry#metrics() reads it. */
  get() {
    const values = [...this.read()].map(([labelValues, value]) => ({
      value,
      labels: Object.fromEntries(this.labelNames.map((n, i) => [n, labelValues[i] ?? ""])),
    }));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}
