import { mkdirSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import type { Store } from "../store.js";
import { SqliteGroupStore, type ChildKind } from "./groups.js";
import { SqliteKeyStore } from "./keys.js";
import { ListRunner } from "./list.js";
import { migrate } from "./migrations.js";

/** Options for opening the SQLite store. */
export interface SqliteStoreOptions {
  /** Directory holding platform.db; created if missing. ":memory:" keeps everything in memory. */
  dataDir: string;
}

/** Kinds of record that live below a group, checked before the group may be deleted. */
const GROUP_CHILD_KINDS: readonly ChildKind[] = [];

/**
 * Opens (creating if needed) the SQLite store: WAL journal, synchronous=FULL so
 * an acknowledged commit survives power loss, foreign keys on, migrations run.
 */
export function openSqliteStore(opts: SqliteStoreOptions): Store {
  let file = ":memory:";
  if (opts.dataDir !== ":memory:") {
    mkdirSync(opts.dataDir, { recursive: true });
    file = join(opts.dataDir, "platform.db");
  }
  const db = new Database(file);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  migrate(db);

  const lists = new ListRunner(db);
  let open = true;
  return {
    groups: new SqliteGroupStore(db, lists, GROUP_CHILD_KINDS),
    keys: new SqliteKeyStore(db),
    transaction: (fn) => db.transaction(fn)(),
    ready: () => open,
    close() {
      if (!open) return;
      open = false;
      if (file !== ":memory:") db.pragma("wal_checkpoint(TRUNCATE)");
      db.close();
    },
  };
}
