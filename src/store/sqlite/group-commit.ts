import type { Database } from "better-sqlite3";
import type { ConnectionGate } from "./async.js";

interface PendingWrite {
  run: () => unknown;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit: the writes that arrive while one commit is syncing to disk
 * are committed together by the next, one fsync for all of them. With
 * synchronous=FULL a commit costs about one fsync whatever it holds, so N
 * concurrent writers cost one fsync instead of N.
 *
 * Each write runs in its own savepoint: one that throws is rolled back alone
 * and rejects, the others commit. Every write's promise settles only after
 * the commit that holds it: an acknowledged write is on disk. A failed COMMIT
 * (disk full, I/O error) rejects every write of the group; none is kept.
 */
export class GroupCommitter {
  private queue: PendingWrite[] = [];
  private scheduled = false;

  constructor(
    private readonly db: Database,
    private readonly gate: ConnectionGate,
  ) {}

  /** Runs fn (a synchronous write) in the next group; resolves with its result once committed. */
  write<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ run: fn, resolve: resolve as (value: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        // Let the requests already read from the sockets queue their writes first.
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    await this.gate.exclusive(async () => {
      this.scheduled = false;
      const group = this.queue;
      this.queue = [];
      if (group.length === 0) return;
      const outcomes: ({ ok: true; value: unknown } | { ok: false; err: unknown })[] = [];
      try {
        this.db.exec("BEGIN IMMEDIATE");
        for (const w of group) {
          // A nested better-sqlite3 transaction is a savepoint.
          try {
            outcomes.push({ ok: true, value: this.db.transaction(w.run)() });
          } catch (err) {
            outcomes.push({ ok: false, err });
          }
        }
        this.db.exec("COMMIT");
      } catch (err) {
        if (this.db.inTransaction) this.db.exec("ROLLBACK");
        for (const w of group) w.reject(err);
        return;
      }
      group.forEach((w, i) => {
        const outcome = outcomes[i]!;
        if (outcome.ok) w.resolve(outcome.value);
        else w.reject(outcome.err);
      });
    });
  }
}
