import type { Database, Statement } from "better-sqlite3";
import { mapMethods, STORE_PARTS, type PartName } from "../parts.js";
import type { SyncStoreParts } from "../store.js";
import type { VersionedTable } from "../versions.js";

/** The versioned tables a write of the part may change: its own and those STORE_PARTS says it also changes. */
export function tablesChangedBy(name: PartName): readonly VersionedTable[] {
  const { table, alsoChanges = [] } = STORE_PARTS[name];
  return table === null ? alsoChanges : [table, ...alsoChanges];
}

/**
 * SQLite's table versions (versions.ts), moved by the store rather than by
 * triggers: a write method of a part marks the tables it may change
 * (tablesChangedBy) as it runs, and the group commit moves each marked
 * table's version once, in its transaction, just before COMMIT. The marks of
 * a write that failed, or was rolled back to its savepoint, are taken back
 * with it (save/restore), so a refused request moves no version, as the
 * triggers' bumps were rolled back with it. A write that succeeded having
 * changed nothing still moves its tables: a cache misses once, never serves
 * stale rows.
 *
 * Why not triggers (which SQLite had until its 13th migration): a statement
 * on a table with a trigger keeps a statement journal that SQLite does not
 * truncate until the transaction ends, so a group commit of a few dozen
 * INSERTs copied every page they touched, again and again, into a temporary
 * file (measured: about a fifth of a create's cost). One UPDATE per table
 * per group replaces one per row.
 */
export class TableVersionBumps {
  /** The marked tables, each once, in the order they were first marked, so a failed write's marks can be taken back. */
  private readonly order: VersionedTable[] = [];
  private readonly bump: Statement;

  constructor(db: Database) {
    this.bump = db.prepare("UPDATE table_versions SET version = version + 1 WHERE name = ?");
  }

  /** The part with each write method marking the part's tables when it runs (its reads are the part's own). */
  track<P extends PartName>(name: P, part: SyncStoreParts[P]): SyncStoreParts[P] {
    const tables = tablesChangedBy(name);
    if (tables.length === 0) return part;
    return mapMethods<SyncStoreParts[P]>(part, STORE_PARTS[name].methods, (_method, kind, original) =>
      kind === "read"
        ? original
        : (...args: unknown[]) => {
            for (const t of tables) this.mark(t);
            return original(...args);
          },
    );
  }

  private mark(table: VersionedTable): void {
    // A handful of tables at most: a scan is cheaper than keeping a set beside the list.
    if (!this.order.includes(table)) this.order.push(table);
  }

  /** Where the marks stand before a write (restore takes back what the write marked, if it is undone). */
  save(): number {
    return this.order.length;
  }

  /** The writes since save(at) were undone: the tables only they marked are unmarked. */
  restore(at: number): void {
    this.order.length = Math.min(this.order.length, at);
  }

  /** Inside the transaction, before COMMIT: moves the version of every table marked since the last call. */
  apply(): void {
    for (const t of this.order) this.bump.run(t);
    this.forget();
  }

  /** The transaction ended without committing: nothing it marked was written. */
  forget(): void {
    this.order.length = 0;
  }
}
