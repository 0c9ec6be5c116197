/**
 * What the commands that work on a server's data share: the server's
 * configuration from the environment, and its store. The store's modules are
 * imported only when a command opens it, so `--help` stays quick.
 */
import { ConfigError, loadConfig, type Config } from "../config.js";
import type { Store } from "../store/store.js";

/** The sentence every such command's help ends with. */
export const STORE_ENVIRONMENT =
  "It works on the server's database: PostgreSQL at PLATFORM_DATABASE_URL when that is set, else SQLite in PLATFORM_DATA_DIR, and reads the rest of the server's environment (PORT, PLATFORM_BASE_URL, PLATFORM_AUTH_URL).";

/** The configuration; an invalid one is printed (every problem) and ends the process with exit code 2. */
export function commandConfig(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

/**
 * The configured store: PostgreSQL at PLATFORM_DATABASE_URL when set, else
 * SQLite in the data directory, with its permission check unless the
 * operator opted out. Only `serve` creates a database (create: true); every
 * other command opens the one a server made, or refuses with StartupError.
 */
export async function openCommandStore(cfg: Config, create = false): Promise<Store> {
  const { openStore } = await import("../store/open.js");
  // The server logs each schema migration it applies (JSON lines, as its own log); other commands migrate nothing.
  const lines = create ? await import("../store/migration-log.js") : undefined;
  const migrationLog = lines?.jsonMigrationLog(cfg.logLevel);
  // A server checkpoints SQLite's WAL on a thread; a command's few writes leave it to SQLite.
  const warn = lines?.jsonStoreWarning(cfg.logLevel);
  const backgroundCheckpoints = warn && {
    onError: (err: Error) => warn("SQLite's checkpoint thread failed: the connection that commits checkpoints instead", err),
  };
  return openStore({
    databaseUrl: cfg.databaseUrl,
    dataDir: cfg.dataDir,
    checkPermissions: !cfg.skipPermissionCheck,
    existing: !create,
    cacheBytes: cfg.cacheBytes,
    maxConnections: cfg.databasePoolSize,
    migrationLog,
    backgroundCheckpoints,
  });
}

/** Runs fn on the configured store and closes it, whatever fn does. */
export async function withCommandStore<T>(fn: (store: Store, cfg: Config) => Promise<T>): Promise<T> {
  const cfg = commandConfig();
  const store = await openCommandStore(cfg);
  try {
    return await fn(store, cfg);
  } finally {
    await store.close();
  }
}
