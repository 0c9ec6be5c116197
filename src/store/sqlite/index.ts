import Database from "better-sqlite3";
import { StartupError } from "../../startup-error.js";
import type { MigrationLog } from "../migration-log.js";
import { GROUP_CHILD_KINDS, makeParts, ownParts, STORE_PARTS, type PartName } from "../parts.js";
import { throwIfCancelled } from "../signal.js";
import type { Store, StoreParts, SyncStoreParts } from "../store.js";
import { versionsFromRows, type TableVersions } from "../versions.js";
import { SqliteAccountAssociationStore } from "./account-associations.js";
import { SqliteAdvisoryStore } from "./advisories.js";
import { asyncPart, ConnectionGate, direct, type Run } from "./async.js";
import { BackgroundCheckpointer, FALLBACK_AUTOCHECKPOINT_PAGES } from "./checkpointer.js";
import { prepareDataDir } from "./data-dir.js";
import { SqliteEventStore } from "./events.js";
import { GroupCommitter } from "./group-commit.js";
import { SqliteGroupInviteStore } from "./group-invites.js";
import { SqliteGroupStore } from "./groups.js";
import { SqliteIdentityStore } from "./identities.js";
import { SqliteIdentityProviderStore } from "./identity-providers.js";
import { SqliteKeyStore } from "./keys.js";
import { ListRunner } from "./list.js";
import { migrate } from "./migrations.js";
import { SqliteRepoStore } from "./repos.js";
import { SqliteRoleBindingStore } from "./role-bindings.js";
import { SqliteRoleStore } from "./roles.js";
import { SqliteRefreshTokenStore, SqliteSignInFlowStore } from "./sign-in.js";
import { SqliteDeliveryStore, SqliteSubscriptionStore } from "./subscriptions.js";
import { TableVersionBumps } from "./table-versions.js";
import { SqliteTagStore } from "./tags.js";

/** Options for opening the SQLite store. */
export interface SqliteStoreOptions {
  /** Directory holding platform.db; created 0700 if missing. ":memory:" keeps everything in memory. */
  dataDir: string;
  /**
   * Refuse (DataDirPermissionError) a directory or database file that the
   * group or others can access. Default true.
   */
  checkPermissions?: boolean;
  /** Told of each schema migration step applied while opening. */
  migrationLog?: MigrationLog;
  /** Checkpoint the WAL on a thread of its own (checkpointer.ts), telling onError if the thread fails. */
  backgroundCheckpoints?: { onError: (err: Error) => void };
}

/**
 * The database with the durability settings and the schema migrated. A file SQLite cannot open or read (a
 * directory, another file format, a disk error) is the operator's to fix: StartupError, naming the file.
 */
function openDatabase(file: string, migrationLog: MigrationLog | undefined): Database.Database {
  let db: Database.Database | undefined;
  try {
    db = new Database(file);
    const journal = db.pragma("journal_mode = WAL", { simple: true });
    db.pragma("synchronous = FULL");
    db.pragma("foreign_keys = ON");
    db.pragma("busy_timeout = 5000");
    // Refuse to run with weaker guarantees than acknowledged-means-durable.
    const synchronous = db.pragma("synchronous", { simple: true });
    const foreignKeys = db.pragma("foreign_keys", { simple: true });
    if ((file !== ":memory:" && journal !== "wal") || synchronous !== 2 || foreignKeys !== 1) {
      throw new StartupError(
        `SQLite refused the durability settings for ${file}: journal_mode=${String(journal)}, synchronous=${String(synchronous)}, foreign_keys=${String(foreignKeys)}`,
      );
    }
    migrate(db, migrationLog);
    return db;
  } catch (err) {
    db?.close();
    if (err instanceof Database.SqliteError) throw new StartupError(`cannot open database ${file}: ${err.message} (${err.code})`);
    throw err;
  }
}

/**
 * Opens (creating if needed) the SQLite store: WAL journal, synchronous=FULL so
 * an acknowledged commit survives power loss, foreign keys on, migrations run.
 */
export function openSqliteStore(opts: SqliteStoreOptions): Store {
  let file = ":memory:";
  if (opts.dataDir !== ":memory:") file = prepareDataDir(opts.dataDir, opts.checkPermissions ?? true);
  const db = openDatabase(file, opts.migrationLog);

  const lists = new ListRunner(db);
  // Each part's class: this engine's one record of its parts, which the compiler holds complete.
  const bare: SyncStoreParts = {
    groups: new SqliteGroupStore(db, lists, GROUP_CHILD_KINDS),
    identities: new SqliteIdentityStore(db, lists),
    roles: new SqliteRoleStore(db, lists),
    roleBindings: new SqliteRoleBindingStore(db, lists),
    identityProviders: new SqliteIdentityProviderStore(db, lists),
    accountAssociations: new SqliteAccountAssociationStore(db, lists),
    groupInvites: new SqliteGroupInviteStore(db, lists),
    repos: new SqliteRepoStore(db, lists),
    tags: new SqliteTagStore(db, lists),
    advisories: new SqliteAdvisoryStore(db, lists),
    keys: new SqliteKeyStore(db),
    events: new SqliteEventStore(db),
    subscriptions: new SqliteSubscriptionStore(db, lists),
    deliveries: new SqliteDeliveryStore(db),
    signInFlows: new SqliteSignInFlowStore(db),
    refreshTokens: new SqliteRefreshTokenStore(db),
  };
  const checkpointer =
    opts.backgroundCheckpoints && file !== ":memory:" ? new BackgroundCheckpointer(file, opts.backgroundCheckpoints.onError) : null;
  if (checkpointer) db.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
  const bumps = new TableVersionBumps(db);
  const sync = <P extends PartName>(name: P): SyncStoreParts[P] => bumps.track(name, bare[name]);
  const gate = new ConnectionGate();
  // Versions are read again only after a commit: this connection's own (a
  // group or a transaction), or another's, which moves data_version.
  const versions = db.prepare("SELECT name, version FROM table_versions");
  const dataVersion = db.prepare("PRAGMA data_version").pluck();
  let known: { versions: TableVersions; dataVersion: number } | null = null;
  const committed = () => {
    known = null;
  };
  const committer = new GroupCommitter(db, gate, {
    save: () => bumps.save(),
    restore: (at) => bumps.restore(at),
    beforeCommit: () => bumps.apply(),
    settled: () => {
      bumps.forget();
      committed();
      checkpointer?.committed();
    },
  });
  let calls = 0;
  const partsVia = (read: Run, write: Run): StoreParts =>
    makeParts((name) => asyncPart(sync(name), STORE_PARTS[name].methods, read, write));
  // Reads run as soon as no transaction holds the connection; writes join the next group commit.
  const parts = partsVia(
    (fn) => gate.shared(fn),
    (fn) => committer.write(fn),
  );
  // Inside a transaction the gate is held already: its operations run directly.
  const txParts = partsVia(direct, direct);
  let open = true;
  return {
    ...ownParts(parts),
    readVersions: () =>
      gate.shared(() => {
        const now = dataVersion.get() as number;
        if (known?.dataVersion !== now)
          known = { versions: versionsFromRows(versions.all() as { name: string; version: number }[]), dataVersion: now };
        return known.versions;
      }),
    version: () => ++calls,
    refresh: async () => {},
    // A transaction joins the next group commit like any write (group-commit.ts: it may be run twice).
    transaction: (fn, signal) =>
      committer.write(() => {
        throwIfCancelled(signal);
        return fn(txParts);
      }),
    // A create and its events in one write of the next group commit: the INSERT through the parts, the events
    // appended directly (they are the server's own text, rendered from what was just validated).
    insertWithEvents: (write, events, signal) =>
      committer.write(async () => {
        throwIfCancelled(signal);
        const result = await write(txParts);
        bare.events.append(events);
        return result;
      }),
    ready: () => open,
    describe: () => ({ backend: "sqlite", location: file }),
    close: () =>
      gate.exclusive(async () => {
        if (!open) return;
        open = false;
        await checkpointer?.stop();
        if (file !== ":memory:") db.pragma("wal_checkpoint(TRUNCATE)");
        db.close();
      }),
  };
}
