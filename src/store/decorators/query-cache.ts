/**
 * A bounded cache of derived values: least recently used first out, bounded
 * by total weight (entries, or bytes). The SQLite reads key their entries with
 * the table's write version, so nothing is served after a write; page tokens
 * keep what they sealed and opened.
 */
export class QueryCache<T> {
  private readonly entries = new Map<string, { value: T; weight: number }>();
  private total = 0;
  hits = 0;
  misses = 0;

  constructor(private readonly budget: number) {}

  get(key: string): T | undefined {
    const entry = this.entries.get(key);
    if (!entry) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Most recently used last.
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry.value;
  }

  /** The value for key, computed and kept on a miss. */
  getOrSet(key: string, compute: () => T): T {
    let value = this.get(key);
    if (value === undefined) {
      value = compute();
      this.set(key, value);
    }
    return value;
  }

  set(key: string, value: T, weight = 1): void {
    if (weight > this.budget) return;
    const old = this.entries.get(key);
    if (old) {
      this.total -= old.weight;
      this.entries.delete(key);
    }
    for (const [oldest, entry] of this.entries) {
      if (this.total + weight <= this.budget) break;
      this.entries.delete(oldest);
      this.total -= entry.weight;
    }
    this.entries.set(key, { value, weight });
    this.total += weight;
  }

  /** Entries and their total weight, for tests. */
  get size(): { entries: number; weight: number } {
    return { entries: this.entries.size, weight: this.total };
  }
}
