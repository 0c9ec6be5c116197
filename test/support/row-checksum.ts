import { createHash } from "node:crypto";
import { join } from "node:path";
import Database from "better-sqlite3";

/** Reads a running server's SQLite file and fingerprints everything stored in it. */
export interface RowChecksummer {
  /** A SHA-256 over the schema and every row of every table, in primary-key order. */
  checksum(): string;
  /** Rows per table, for messages when two checksums differ. */
  counts(): Record<string, number>;
  close(): void;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;
const stable = (_key: string, v: unknown) => (typeof v === "bigint" ? `${v}n` : v);

/**
 * Opens dataDir/platform.db read-only next to the server's own connection (WAL
 * lets a reader see the last committed state while the server writes). Each
 * checksum reads every table in one read transaction, so it is one snapshot.
 * PRAGMA data_version moves whenever another connection commits: while it has
 * not moved, the last checksum is still the checksum and is not recomputed.
 */
export function openRowChecksummer(dataDir: string): RowChecksummer {
  const db = new Database(join(dataDir, "platform.db"), { readonly: true, fileMustExist: true });
  db.defaultSafeIntegers(true);
  const tables = () =>
    db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string; sql: string | null }[];
  /** ORDER BY the primary key (these tables are WITHOUT ROWID), else every column. */
  const orderOf = (table: string) => {
    const cols = db.prepare(`PRAGMA table_info(${quote(table)})`).all() as { name: string; pk: bigint }[];
    const pk = cols.filter((c) => c.pk > 0n).sort((a, b) => Number(a.pk - b.pk));
    return (pk.length > 0 ? pk : cols).map((c) => quote(c.name)).join(", ");
  };
  const snapshot = db.transaction(() => {
    const hash = createHash("sha256");
    for (const { name, sql } of tables()) {
      hash.update(`\u0000table ${name} ${sql ?? ""}\u0000`);
      for (const row of db
        .prepare(`SELECT * FROM ${quote(name)} ORDER BY ${orderOf(name)}`)
        .raw()
        .iterate() as Iterable<unknown[]>) {
        hash.update(JSON.stringify(row, stable));
        hash.update("\u0001");
      }
    }
    return hash.digest("hex");
  });
  const dataVersion = db.prepare("PRAGMA data_version").pluck();
  let cached: { version: bigint; sum: string } | null = null;
  return {
    checksum() {
      const version = dataVersion.get() as bigint;
      if (cached?.version !== version) cached = { version, sum: snapshot() };
      return cached.sum;
    },
    counts: () =>
      Object.fromEntries(
        tables().map(({ name }) => [
          name,
          Number(
            db
              .prepare(`SELECT count(*) FROM ${quote(name)}`)
              .pluck()
              .get() as bigint,
          ),
        ]),
      ),
    close: () => db.close(),
  };
}
