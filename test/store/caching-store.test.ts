/**
 * The read caches (CachingStore) over each engine: an answer asked again is
 * served without touching the engine until its table is written, by this
 * process (seen at once) or by another (seen at its next refresh, which the
 * server runs once per request); counts are kept across the pages of a walk;
 * what is cached is frozen and bounded.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { createCachingStore } from "../../src/store/decorators/caching.js";
import { decorateStore } from "../../src/store/decorators/decorate.js";
import { QueryCache } from "../../src/store/decorators/query-cache.js";
import { openEngine } from "../../src/store/open.js";
import type { ListQuery, Store } from "../../src/store/store.js";
import { AUTHZ_TABLES } from "../../src/store/versions.js";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { binding, group, identity, query, role } from "../support/store-fixtures.js";

const dir = mkdtempSync(join(tmpdir(), "platform-caching-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const ORG = "a".repeat(40);
const child = (i: number) => `${ORG}/${i.toString(16).padStart(16, "0")}`;

/** Two processes' stores on one database, each engine call counted by "part.method" (and "list-counted" for lists that counted). */
interface Pair {
  a: Store;
  b: Store;
  calls: Map<string, number>;
  close(): Promise<void>;
}

type Location = { databaseUrl: string; dataDir: string };

async function pairOn(at: Location): Promise<Pair> {
  const calls = new Map<string, number>();
  const bump = (name: string) => calls.set(name, (calls.get(name) ?? 0) + 1);
  const counted = decorateStore(await openEngine({ ...at, maxConnections: 4 }), (part, method, original) => async (...args) => {
    bump(`${part}.${method}`);
    if (method === "list" && (args[0] as ListQuery<unknown, string>).knownTotal === undefined) bump("list-counted");
    return original(...args);
  });
  const a = createCachingStore(counted);
  const b = createCachingStore(await openEngine({ ...at, maxConnections: 4 }));
  await a.refresh();
  await b.refresh();
  return {
    a,
    b,
    calls,
    async close() {
      await a.close();
      await b.close();
    },
  };
}

/** Runs fn on a fresh pair over the backend's storage, closing both stores after. */
async function withPair(backend: { location: () => Promise<Location> }, fn: (p: Pair) => Promise<void>): Promise<void> {
  const p = await pairOn(await backend.location());
  try {
    await fn(p);
  } finally {
    await p.close();
  }
}

const backends: { name: string; location: () => Promise<Location> }[] = [
  { name: "sqlite", location: async () => ({ databaseUrl: "", dataDir: mkdtempSync(join(dir, "db-")) }) },
];
if (pgAvailable()) backends.push({ name: "postgresql", location: async () => ({ databaseUrl: await freshPgDatabase(), dataDir: "" }) });

for (const backend of backends) {
  describe(`caching store on ${backend.name}`, () => {
    test("an answer asked again is served from memory until its table is written here, and frozen", async () =>
      withPair(backend, async (p) => {
        await p.a.groups.create(group(ORG, null, "org"));
        for (let i = 1; i <= 3; i++) await p.a.groups.create(group(child(i), ORG, `team ${i}`));
        p.calls.clear();

        const first = await p.a.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: 2 }));
        assert.deepEqual(
          first.items.map((g) => g.name),
          ["team 1", "team 2"],
        );
        assert.equal(first.totalCount, 3);
        assert.equal(await p.a.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: 2 })), first, "the same frozen answer");
        assert.ok(Object.isFrozen(first) && Object.isFrozen(first.items) && Object.isFrozen(first.items[0]));
        const got = await p.a.groups.get(child(1));
        assert.equal(await p.a.groups.get(child(1)), got);
        assert.equal(await p.a.groups.get(child(9)), null);
        assert.equal(await p.a.groups.get(child(9)), null, "a miss is remembered too");
        assert.equal(p.calls.get("groups.list"), 1);
        assert.equal(p.calls.get("groups.get"), 2);

        await p.a.groups.update(child(1), { name: "renamed" }, 5);
        assert.equal((await p.a.groups.get(child(1)))?.name, "renamed", "this process's write is seen at once, without a refresh");
        const after = await p.a.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: 2 }));
        assert.equal(after.items[0]?.name, "renamed");
        await p.a.groups.create(group(child(4), ORG, "team 4"));
        assert.equal((await p.a.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: 2 }))).totalCount, 4);
      }));

    test("another process's write is seen at the next refresh, never before a refresh is needed", async () =>
      withPair(backend, async (p) => {
        await p.b.groups.create(group(ORG, null, "org"));
        await p.a.refresh();
        assert.equal((await p.a.groups.get(ORG))?.name, "org");
        await p.b.groups.update(ORG, { name: "renamed by b" }, 5);
        // The server refreshes once per request; a request that began before b's
        // write was acknowledged may still answer from before it.
        await p.a.refresh();
        assert.equal((await p.a.groups.get(ORG))?.name, "renamed by b");
        // 100 rounds of write on one, read on the other.
        for (let i = 0; i < 100; i++) {
          const [writer, reader] = i % 2 ? [p.a, p.b] : [p.b, p.a];
          await writer.groups.update(ORG, { description: `round ${i}` }, 10 + i);
          await reader.refresh();
          assert.equal((await reader.groups.get(ORG))?.description, `round ${i}`);
          assert.equal((await reader.groups.list(query({ hierarchy: { inRoot: true } }))).items[0]?.description, `round ${i}`);
        }
      }));

    test("authorization data changed by another process, a cascade included, moves the authorization version", async () =>
      withPair(backend, async (p) => {
        const person = "9".repeat(40);
        const viewer = "8".repeat(40);
        await p.b.groups.create(group(ORG, null, "org"));
        await p.b.identities.create(identity(person, null, "Ada"));
        await p.b.roles.create(role(viewer, null, "viewer"));
        await p.b.roleBindings.create([binding(`${ORG}/${"1".repeat(16)}`, ORG, person, viewer)]);
        await p.a.refresh();
        assert.equal((await p.a.roleBindings.forIdentity(person)).length, 1);
        const before = p.a.version(AUTHZ_TABLES);
        await p.b.identities.delete(person);
        await p.a.refresh();
        assert.notEqual(p.a.version(AUTHZ_TABLES), before);
        assert.deepEqual(await p.a.roleBindings.forIdentity(person), [], "the binding went with the identity");
      }));

    test("walking the pages of a list counts once", async () =>
      withPair(backend, async (p) => {
        await p.a.groups.create(group(ORG, null, "org"));
        for (let i = 1; i <= 10; i++) await p.a.groups.create(group(child(i), ORG, `team ${i}`));
        p.calls.clear();
        let after = null;
        const seen: string[] = [];
        for (;;) {
          const page = await p.a.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: 3, after }));
          assert.equal(page.totalCount, 10);
          seen.push(...page.items.map((g) => g.uid));
          if (!page.hasMore) break;
          const last = page.items[page.items.length - 1]!;
          after = { key: last.uid, uid: last.uid };
        }
        assert.equal(seen.length, 10);
        assert.equal(p.calls.get("groups.list"), 4);
        assert.equal(p.calls.get("list-counted"), 1);
      }));
  });
}

test("the cache keeps within its budget, dropping the least recently used", () => {
  const cache = new QueryCache<string>(10);
  cache.set("a", "A", 4);
  cache.set("b", "B", 4);
  assert.equal(cache.get("a"), "A"); // a is now the most recent
  cache.set("c", "C", 4); // over budget: b goes
  assert.equal(cache.get("b"), undefined);
  assert.equal(cache.get("a"), "A");
  assert.equal(cache.get("c"), "C");
  assert.deepEqual(cache.size, { entries: 2, weight: 8 });
  cache.set("huge", "H", 11);
  assert.equal(cache.get("huge"), undefined, "an entry over the whole budget is not kept");
  cache.set("a", "A2", 2);
  assert.deepEqual(cache.size, { entries: 2, weight: 6 });
  assert.equal(cache.get("a"), "A2");
});

test("answers stay within the store's byte budget", async () => {
  const engine = await openEngine({ databaseUrl: "", dataDir: ":memory:" });
  const store = createCachingStore(engine, { answerBytes: 4096, counts: 8 });
  try {
    await store.groups.create(group(ORG, null, "org"));
    for (let i = 1; i <= 40; i++) await store.groups.create(group(child(i), ORG, `team ${i}`));
    for (let i = 1; i <= 40; i++) await store.groups.get(child(i));
    for (let i = 1; i <= 40; i++) await store.groups.list(query({ hierarchy: { childrenOf: ORG }, limit: i }));
    assert.ok(store.cacheStats.answers.size.weight <= 4096, `${store.cacheStats.answers.size.weight} bytes`);
    assert.ok(store.cacheStats.counts.size.entries <= 8);
  } finally {
    await store.close();
  }
});

test("after a lost connection the cache starts over: a database whose versions restart lower never serves an entry read before", async () => {
  // The engine stands for the database behind the URL; its versions and connection losses are the test's, as after
  // a failover to a standby that never had the last writes' version moves (a restored backup is the same case).
  const engine = await openEngine({ databaseUrl: "", dataDir: ":memory:" });
  let versions = await engine.readVersions();
  let losses = 0;
  const store = createCachingStore({
    ...decorateStore(engine, (_p, _m, original) => original),
    readVersions: async () => ({ ...versions }),
    connectionLosses: () => losses,
  });
  try {
    const name = async () => ((await store.refresh(), await store.groups.get(ORG)) as { name: string }).name;
    await engine.groups.create(group(ORG, null, "before the switch"));
    versions = { ...versions, groups: 10 };
    assert.equal(await name(), "before the switch");
    // The switch: a connection lost, the new database at a lower version, and its data newer.
    losses++;
    await engine.groups.update(ORG, { name: "on the new primary" }, 1);
    versions = { ...versions, groups: 5 };
    assert.equal(await name(), "on the new primary");
    // Writes on the new database bring its version back to where the old one was: still no entry from before.
    await engine.groups.update(ORG, { name: "written again" }, 2);
    versions = { ...versions, groups: 10 };
    assert.equal(await name(), "written again");
    // And the cache still caches: asked again with nothing written, the engine is not read.
    await engine.groups.update(ORG, { name: "written behind the cache's back" }, 3);
    assert.equal(await name(), "written again");
  } finally {
    await store.close();
  }
});
