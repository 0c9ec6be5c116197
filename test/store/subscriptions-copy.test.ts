/**
 * migrate-to-postgres (src/store/copy.ts) copies subscriptions with their
 * secrets and creators; their delivery starts with the events written after
 * the copy, and their logs start empty.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { copyStore } from "../../src/store/copy.js";
import { EVERYWHERE } from "../../src/store/event-store.js";
import { openStore } from "../../src/store/open.js";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer } from "../support/server.js";

test("subscriptions are copied with their secret and creator; the target delivers only what comes after", { skip: PG_SKIP }, async () => {
  const srv = await startTestServer({ backend: "sqlite" });
  const target = await openStore({ databaseUrl: await freshPgDatabase(), dataDir: ":memory:", maxConnections: 2 });
  const source = await srv.openStore();
  try {
    const org = (await createGroup(srv.url, null, "copied-org")).uid;
    const created = await ok(
      rest(srv.url, "POST", `/events/v1/subscriptions/${org}`, { sink: "https://hooks.example.com/x", types: ["api.platform.iam."] }),
    );
    const before = await createGroup(srv.url, org, "before-copy");
    const visible = { ...EVERYWHERE, group: [org] };
    const counts = await copyStore(source, target);
    assert.equal(counts.subscriptions, 1);
    const copied = await target.subscriptions.get(created.uid);
    assert.deepEqual(copied, await source.subscriptions.get(created.uid));
    assert.equal(copied?.secret, created.secret);
    assert.deepEqual(await target.deliveries.log(created.uid), []);
    // The copy's first read starts after the copied events: nothing from before the copy is delivered again.
    const [lease] = await target.deliveries.claim("copy-test", [created.uid as string], Date.now(), Date.now() + 60_000);
    assert.equal(lease?.subscription.uid, created.uid);
    assert.equal(lease?.cursor, null);
    const page = await target.events.read({
      after: null,
      startTime: lease!.startTime,
      typePrefix: "",
      hierarchy: {},
      visible,
      limit: 10,
    });
    assert.deepEqual(page.events, []);
    const all = await target.events.read({ after: null, typePrefix: "", hierarchy: {}, visible, limit: 10 });
    assert.deepEqual(
      all.events.map((e) => e.subject),
      [org, before.uid],
      "the events were copied",
    );
  } finally {
    await source.close();
    await target.close();
    await srv.close();
  }
});
