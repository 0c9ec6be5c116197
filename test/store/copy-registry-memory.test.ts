/**
 * migrate-to-postgres (src/store/copy.ts) carries what the registry's
 * notifications left with the tags: the registry time each tag was set at
 * and the digests deleted from each repo. A late notification is decided in
 * the copy as it would have been in the source: an older push of a deleted
 * digest stays out, a push older than a tag's registry time does not move it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { copyStore } from "../../src/store/copy.js";
import { openStore } from "../../src/store/open.js";
import type { Store } from "../../src/store/store.js";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { repo, tag } from "../support/store-conformance-registry.js";
import { A, group } from "../support/store-fixtures.js";

const REPO = `${A}/${"5".repeat(16)}`;
const US = 1_700_000_000_000_000;
const digest = (c: string) => `sha256:${c.repeat(64)}`;
const tagUid = (c: string) => `${REPO}/${c.repeat(16)}`;

/** Everything of the registry's memory a store holds, read a page of one at a time (the copy's own paging). */
async function memoryOf(store: Store) {
  const times = [];
  for (let after = ""; ; ) {
    const [t] = await store.tags.registrySourceTimes(after, 1);
    if (t === undefined) break;
    times.push(t);
    after = t.tagUid;
  }
  const deleted = [];
  for (let after = null; ; ) {
    const [d]: Awaited<ReturnType<Store["tags"]["deletedDigests"]>> = await store.tags.deletedDigests(after, 1);
    if (d === undefined) break;
    deleted.push(d);
    after = d;
  }
  return { times, deleted };
}

test(
  "the registry's memory is copied with the tags: late notifications are decided in the copy as in the source",
  { skip: PG_SKIP },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "platform-copy-registry-"));
    const source = await openStore({ databaseUrl: "", dataDir: dir });
    const target = await openStore({ databaseUrl: await freshPgDatabase(), dataDir: ":memory:", maxConnections: 2 });
    try {
      await source.groups.create(group(A, null, "org"));
      await source.repos.create(repo(REPO, A, "copied/app"));
      // Set by pushes (their registry times), one by the API (none), and two digests deleted.
      await source.tags.putFromRegistry(tag(tagUid("1"), REPO, "latest", { digest: digest("1") }), US + 100);
      await source.tags.putFromRegistry(tag(tagUid("2"), REPO, "v2", { digest: digest("2") }), US + 200);
      await source.tags.put(tag(tagUid("3"), REPO, "pinned", { digest: digest("3") }));
      await source.tags.deleteFromRegistry(REPO, { digest: digest("4") }, US + 300);
      await source.tags.deleteFromRegistry(REPO, { digest: digest("5") }, US + 400);

      const counts = await copyStore(source, target);
      assert.equal(counts.tags, 3);
      assert.equal(counts["tag registry times"], 2);
      assert.equal(counts["deleted digests"], 2);
      assert.deepEqual(await memoryOf(target), await memoryOf(source));

      // The same late notifications, to each: the same outcome.
      for (const store of [source, target]) {
        // A push of a deleted digest older than its delete: not applied.
        assert.equal(await store.tags.putFromRegistry(tag(tagUid("6"), REPO, "old", { digest: digest("4") }), US + 250), null);
        // A push older than what set the tag: not applied; a newer one moves it.
        assert.equal(await store.tags.putFromRegistry(tag(tagUid("7"), REPO, "latest", { digest: digest("7") }), US + 50), null);
        const moved = await store.tags.putFromRegistry(tag(tagUid("7"), REPO, "latest", { digest: digest("7") }), US + 150);
        assert.equal(moved?.tag.uid, tagUid("1"));
      }
    } finally {
      await source.close();
      await target.close();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
