/** Latency percentiles of a set of calls, in milliseconds. */
export interface LatencySummary {
  calls: number;
  p50: number;
  p99: number;
  max: number;
}

/** Every successful call's latency, by key (e.g. "rest GetGroup"). */
export class LatencyLog {
  private readonly byKey = new Map<string, number[]>();

  add(key: string, ms: number): void {
    let list = this.byKey.get(key);
    if (!list) this.byKey.set(key, (list = []));
    list.push(ms);
  }

  /** The summary of every key that matches, or of all keys. */
  summary(match: (key: string) => boolean = () => true): LatencySummary {
    const all: number[] = [];
    for (const [key, list] of this.byKey) if (match(key)) for (const ms of list) all.push(ms);
    all.sort((a, b) => a - b);
    return { calls: all.length, p50: percentile(all, 0.5), p99: percentile(all, 0.99), max: all.length === 0 ? 0 : all[all.length - 1]! };
  }

  keys(): string[] {
    return [...this.byKey.keys()].sort();
  }
}

/** Nearest-rank percentile of sorted values; 0 when empty. */
function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** Failure messages with their counts, most frequent first. */
export class FailureTally {
  private readonly counts = new Map<string, number>();
  total = 0;

  add(message: string): void {
    this.total++;
    // Uids and request ids vary per call; the kind of failure does not.
    const kind = message.replace(/[0-9a-f]{16,}(\/[0-9a-f]{16})*/g, "<uid>");
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + 1);
  }

  top(n: number): string[] {
    return [...this.counts.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([message, count]) => `${count} × ${message}`);
  }
}

export const ms = (v: number): string => `${v.toFixed(1)} ms`;
export const mib = (kib: number): string => `${(kib / 1024).toFixed(1)} MiB`;
export const count = (n: number): string => n.toLocaleString("en-US");
