import type { Database, Statement } from "better-sqlite3";
import type { ConnectionGate } from "./async.js";

interface PendingWrite {
  /** A synchronous write, or a transaction function (awaited alone inside the group). */
  run: () => unknown;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/** What the store does around a group's writes (table-versions.ts moves the versions of what they wrote). */
export interface GroupHooks {
  /** Before each write: a mark to go back to if the write is undone. */
  save: () => number;
  /** The writes since save() returned at were undone. */
  restore: (at: number) => void;
  /** Inside the transaction, just before COMMIT. */
  beforeCommit: () => void;
  /** After every group, committed or rolled back. */
  settled: () => void;
}

/** How one write of a group ended. */
type Outcome = { ok: true; value: unknown } | { ok: false; err: unknown };

/**
 * Group commit: the writes that arrive while one commit is syncing to disk
 * are committed together by the next, one fsync for all of them. With
 * synchronous=FULL a commit costs about one fsync whatever it holds, so N
 * concurrent writers cost one fsync instead of N.
 *
 * A write that throws is rejected alone; the others commit. Every write's
 * promise settles only after the commit that holds it: an acknowledged write
 * is on disk. A failed COMMIT (disk full, I/O error) rejects every write of
 * the group; none is kept.
 *
 * The writes run bare first, with no savepoint each: a savepoint makes SQLite
 * copy every page a write touches into its sub-journal, which outgrows its
 * 64 KiB in memory within a few writes and then goes to a temporary file,
 * page by page (measured: most of what a create cost beyond its INSERTs). A
 * write that throws having changed nothing (the common failure: a check, a
 * constraint refusing its one statement, which SQLite undoes) is simply
 * rejected. One that throws after it changed rows (a transaction function
 * that wrote, then refused) cannot be undone alone: the group is rolled back
 * and run again with a savepoint per write, as it always was. So a write
 * function may run twice, as on PostgreSQL, which runs a transaction again
 * after a serialization failure; the store's writes and transaction
 * functions are written for that.
 */
export class GroupCommitter {
  private queue: PendingWrite[] = [];
  private scheduled = false;
  private readonly totalChanges: Statement;
  /** Groups run again with a savepoint per write (platform_sqlite_group_reruns_total). */
  reruns = 0;

  constructor(
    private readonly db: Database,
    private readonly gate: ConnectionGate,
    private readonly hooks: GroupHooks,
  ) {
    this.totalChanges = db.prepare("SELECT total_changes()").pluck();
  }

  /**
   * Runs fn in the next group; resolves with its result once committed. fn
   * may be asynchronous (a transaction function): the group awaits it before
   * running the next. fn may be run twice (see the class).
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
      let outcomes: Outcome[];
      try {
        this.db.exec("BEGIN IMMEDIATE");
        const bare = await this.runWrites(group, false);
        if (bare === null) {
          this.reruns++;
          this.hooks.restore(0);
          this.db.exec("ROLLBACK");
          this.db.exec("BEGIN IMMEDIATE");
        }
        outcomes = bare ?? (await this.runWrites(group, true))!;
        this.hooks.beforeCommit();
        this.db.exec("COMMIT");
      } catch (err) {
        if (this.db.inTransaction) this.db.exec("ROLLBACK");
        for (const w of group) w.reject(err);
        return;
      } finally {
        this.hooks.settled();
      }
      group.forEach((w, i) => {
        const outcome = outcomes[i]!;
        if (outcome.ok) w.resolve(outcome.value);
        else w.reject(outcome.err);
      });
    });
  }

  /**
   * Runs each write, bare or (isolated) in a savepoint of its own, and
   * returns their outcomes. A write that throws is rejected alone: isolated,
   * its savepoint is rolled back; bare, it must have changed nothing, or
   * null is returned (the group must be run again, isolated). Throws when
   * SQLite itself ended the transaction (an I/O error): the group fails.
   */
  private async runWrites(group: readonly PendingWrite[], isolated: boolean): Promise<Outcome[] | null> {
    const outcomes: Outcome[] = [];
    for (const w of group) {
      if (isolated) this.db.exec("SAVEPOINT write");
      const before = isolated ? 0 : (this.totalChanges.get() as number);
      const mark = this.hooks.save();
      try {
        outcomes.push({ ok: true, value: await w.run() });
        if (isolated) this.db.exec("RELEASE write");
      } catch (err) {
        if (!this.db.inTransaction) throw err;
        if (isolated) {
          this.db.exec("ROLLBACK TO write");
          this.db.exec("RELEASE write");
        } else if ((this.totalChanges.get() as number) !== before) {
          return null;
        }
        this.hooks.restore(mark);
        outcomes.push({ ok: false, err });
      }
    }
    return outcomes;
  }
}
