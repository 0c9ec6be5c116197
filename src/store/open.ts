import { createCachingStore, DEFAULT_CACHE_LIMITS } from "./decorators/caching.js";
import { guardStoredText } from "./decorators/text-guard.js";
import type { MigrationLog } from "./migration-log.js";
import { driverUrl, tlsStartupError } from "./postgres/url.js";
import { requireDatabase } from "./sqlite/data-dir.js";
import { openSqliteStore } from "./sqlite/index.js";
import type { Store } from "./store.js";

/** Where the data lives. */
export interface StoreLocation {
  /** postgres://… selects PostgreSQL; "" keeps SQLite in dataDir. */
  databaseUrl: string;
  /** The SQLite data directory (":memory:" for a throwaway store). */
  dataDir: string;
  /** Refuse a group- or world-accessible SQLite directory (default true). */
  checkPermissions?: boolean;
  /** PostgreSQL connections this process keeps at most. */
  maxConnections?: number;
  /**
   * Open only data a server has set up; a data directory without its database, or a PostgreSQL database
   * without the schema, is refused with StartupError and nothing is created (every command but `serve`).
   */
  existing?: boolean;
  /** The read caches' budget for answers, in bytes of their JSON text (default 16 MiB). */
  cacheBytes?: number;
  /** Told of each schema migration step applied while opening (the server logs them; other commands need not). */
  migrationLog?: MigrationLog;
  /** SQLite: checkpoint the WAL on a thread of its own (sqlite/checkpointer.ts), for a server; told of its failure. */
  backgroundCheckpoints?: { onError: (err: Error) => void };
}

/**
 * The bare engine: PostgreSQL when a URL is given, else SQLite, its schema migrated. A TLS failure reaching
 * PostgreSQL (a server without TLS while sslmode requires it, a certificate refused) is StartupError.
 */
export async function openEngine(at: StoreLocation): Promise<Store> {
  if (at.databaseUrl !== "") {
    // Loaded only when used: the embedded default never loads the driver.
    const { openPostgresStore } = await import("./postgres/index.js");
    const opts = {
      url: driverUrl(at.databaseUrl),
      maxConnections: at.maxConnections,
      existing: at.existing,
      migrationLog: at.migrationLog,
    };
    return openPostgresStore(opts).catch((err: unknown) => {
      throw tlsStartupError(err, at.databaseUrl) ?? err;
    });
  }
  if (at.existing && at.dataDir !== ":memory:") requireDatabase(at.dataDir);
  return openSqliteStore({
    dataDir: at.dataDir,
    checkPermissions: at.checkPermissions ?? true,
    migrationLog: at.migrationLog,
    backgroundCheckpoints: at.backgroundCheckpoints,
  });
}

/** The store a server runs on: the engine, refusing text it cannot store, behind its read caches. */
export async function openStore(at: StoreLocation): Promise<Store> {
  const limits = { ...DEFAULT_CACHE_LIMITS, ...(at.cacheBytes === undefined ? {} : { answerBytes: at.cacheBytes }) };
  return createCachingStore(guardStoredText(await openEngine(at)), limits);
}
