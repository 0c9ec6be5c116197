import type { Database } from "better-sqlite3";
import type { ConnectionGate } from "./async.js";

interface PendingWrite {
  /** A synchronous write, or a transaction function (awaited alone inside the group). */
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
    /** Told after every group, committed or rolled back. */
    private readonly onSettled: () => void,
  ) {}

  /**
   * Runs fn in the next group, in a savepoint of its own; resolves with its
   * result once committed. fn may be asynchronous (a transaction function):
   * the group awaits it before running the next.
   */
  write<T>(fn: () => T): Promise<Awaited<T>> {
    return new Promise<Awaited<T>>((resolve, reject) => {
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
          this.db.exec("SAVEPOINT write");
          try {
            outcomes.push({ ok: true, value: await w.run() });
            this.db.exec("RELEASE write");
          } catch (err) {
            this.db.exec("ROLLBACK TO write");
            this.db.exec("RELEASE write");
            outcomes.push({ ok: false, err });
          }
        }
        this.db.exec("COMMIT");
      } catch (err) {
        if (this.db.inTransaction) this.db.exec("ROLLBACK");
        for (const w of group) w.reject(err);
        return;
      } finally {
        this.onSettled();
      }
      group.forEach((w, i) => {
        const outcome = outcomes[i]!;
        if (outcome.ok) w.resolve(outcome.value);
        else w.reject(outcome.err);
      });
    });
  }
}
