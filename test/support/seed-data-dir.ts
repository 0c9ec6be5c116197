import { prepareStore } from "../../src/app/start.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";

/**
 * The data directory as a server's first start leaves it (created, migrated, a signing key made), for tests
 * of the commands that refuse a directory no server has used.
 */
export async function seedDataDir(dir: string): Promise<void> {
  const store = openSqliteStore({ dataDir: dir });
  try {
    await prepareStore(store, Date.now());
  } finally {
    await store.close();
  }
}
