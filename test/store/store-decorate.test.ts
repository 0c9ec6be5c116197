/**
 * Store decorators (text guard, metrics, tracing) pass an engine's optional
 * fast paths on: transactionThenVersions (PostgreSQL reads the versions with
 * its COMMIT, saving CachingStore a round trip per write) and insertWithEvents.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { decorateStore } from "../../src/store/decorators/decorate.js";
import { guardStoredText } from "../../src/store/decorators/text-guard.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";
import type { Store } from "../../src/store/store.js";

test("a decorated store keeps transactionThenVersions and insertWithEvents, its parts decorated inside them", async () => {
  const dir = mkdtempSync(join(tmpdir(), "decorate-"));
  const engine = openSqliteStore({ dataDir: dir, checkPermissions: false });
  let thenVersions = 0;
  const withFastPath: Store = {
    ...engine,
    transactionThenVersions: async (fn, signal) => {
      thenVersions++;
      return [await engine.transaction(fn, signal), await engine.readVersions()];
    },
  };
  const wrapped: string[] = [];
  const decorated = decorateStore(guardStoredText(withFastPath), (part, method, original) => (...args) => {
    wrapped.push(`${part}.${method}`);
    return original(...args);
  });
  try {
    assert.ok(decorated.transactionThenVersions, "transactionThenVersions passed on");
    assert.ok(decorated.insertWithEvents, "insertWithEvents passed on");
    const [found] = await decorated.transactionThenVersions((tx) => tx.groups.get("nobody"));
    assert.equal(found, null);
    assert.equal(thenVersions, 1);
    assert.deepEqual(wrapped, ["groups.get"]);
  } finally {
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
