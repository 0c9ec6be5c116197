/**
 * CachingStore.refresh is shared by the calls that ask for it in the same
 * event-loop turn (one read of the versions serves a burst of requests), yet
 * every caller gets a read that started after it asked: a write acknowledged
 * by another process before a request asked is seen by that request.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { createCachingStore } from "../../src/store/decorators/caching.js";
import { openEngine } from "../../src/store/open.js";
import type { Store } from "../../src/store/store.js";
import type { TableVersions } from "../../src/store/versions.js";
import { group } from "../support/store-fixtures.js";

const dir = mkdtempSync(join(tmpdir(), "platform-refresh-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const ORG = "b".repeat(40);

test("calls in one turn share one read; a call made while a read is under way gets a read of its own", async () => {
  const at = { databaseUrl: "", dataDir: mkdtempSync(join(dir, "db-")), maxConnections: 4 };
  const engine = await openEngine(at);
  let reads = 0;
  /** Runs at the start of the next read of the versions (before it), once. */
  let onRead: (() => void) | undefined;
  const counted: Store = {
    ...engine,
    readVersions(): Promise<TableVersions> {
      reads++;
      const hook = onRead;
      onRead = undefined;
      hook?.();
      return engine.readVersions();
    },
  };
  const a = createCachingStore(counted);
  const b = createCachingStore(await openEngine(at));
  try {
    await b.groups.create(group(ORG, null, "org"));
    await Promise.all([a.refresh(), a.refresh(), a.refresh()]);
    assert.equal(reads, 1, "three calls of one turn, one read");
    assert.equal((await a.groups.get(ORG))?.name, "org");

    await b.groups.update(ORG, { name: "renamed by b" }, 5);
    // b's write was acknowledged before this call: its read starts after it, and sees it.
    await a.refresh();
    assert.equal(reads, 2);
    assert.equal((await a.groups.get(ORG))?.name, "renamed by b");

    // A call arriving while a read is under way does not take that read's answer: it waits for the next one.
    let late: Promise<void> | undefined;
    onRead = () => (late = a.refresh());
    await a.refresh();
    assert.ok(late !== undefined);
    await late;
    assert.equal(reads, 4);
  } finally {
    await a.close();
    await b.close();
  }
});
