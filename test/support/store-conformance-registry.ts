import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type { HierarchyFilter, RepoFilter, RepoOrder, RepoRecord, Store, TagFilter, TagOrder, TagRecord } from "../../src/store/store.js";
import { assertAlreadyExists, assertNotFound, assertPrecondition } from "./store-conformance-iam.js";
import { A, A1, A1X, A2, B, B1, C, compareText, hexSegments, hierarchyFixture, query, sorted } from "./store-fixtures.js";
import { belowFirstRoot, describePagedWalks, everything } from "./store-paged-walks.js";
import { buildPagingTree, OWNERS, type WalkFixture } from "./store-walk-fixtures.js";

// Repos and tags at groups of hierarchyFixture(): a digit repeated 16 times is one level down.
const below = (parent: string, digit: string) => `${parent}/${digit.repeat(16)}`;
const R_A = below(A, "5");
const R_A1 = below(A1, "5");
const R_A1X = below(A1X, "5");
const R_B1 = below(B1, "5");
const DIGEST_1 = `sha256:${"1".repeat(64)}`;
const DIGEST_2 = `sha256:${"2".repeat(64)}`;
const EVERY_FORM = { includeReferrers: true, includeDates: true, includeEpochs: true } as const;
const NO_FORM = { includeReferrers: false, includeDates: false, includeEpochs: false } as const;

export function repo(uid: string, parentUid: string, name: string, over: Partial<RepoRecord> = {}): RepoRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    catalogTier: 0,
    bundles: [],
    aliases: [],
    activeTags: [],
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

export function tag(uid: string, repoUid: string, name: string, over: Partial<TagRecord> = {}): TagRecord {
  return { uid, repoUid, name, digest: DIGEST_1, deprecated: false, bundles: [], updateTime: 1_700_000_000_000, ...over };
}

/** Conformance of repos and tags: contracts, errors, filters, the deletions they block, and the paged walks. */
export function registryConformance(getStore: () => Store): void {
  describe("repos and tags", () => registryContracts(getStore));
  describePagedWalks<RepoRecord, RepoOrder>(getStore, {
    kind: "repos",
    orders: ["uid", "name", "created_at", "updated_at"],
    build: buildRepoWalk,
    list: (store, q) => store.repos.list(q),
    scopes: [everything(), belowFirstRoot(), visibleWithinFirstRoot()],
  });
  describePagedWalks<TagRecord, TagOrder>(getStore, {
    kind: "tags (every form included)",
    orders: ["uid", "name", "updated_at"],
    build: buildTagWalk,
    list: (store, q) => store.tags.list({ ...q, filter: EVERY_FORM }),
    scopes: [everything(), belowFirstRoot(), visibleWithinFirstRoot()],
  });
  describePagedWalks<TagRecord, TagOrder>(getStore, {
    kind: "tags (referrer, dated and epoch tags left out)",
    orders: ["uid", "name", "updated_at"],
    build: async (store) => {
      const f = await buildTagWalk(store);
      return { ...f, records: f.records.filter((t) => PLAIN_TAG.test(t.name)) };
    },
    list: (store, q) => store.tags.list({ ...q, filter: NO_FORM }),
    scopes: [everything(), belowFirstRoot()],
  });
}

function visibleWithinFirstRoot<T extends { uid: string }>() {
  return {
    label: "visible within the first root",
    narrow: (f: WalkFixture<T>) => ({
      hierarchy: {},
      visibleWithin: [f.root],
      expected: f.records.filter((r) => r.uid.startsWith(`${f.root}/`)),
    }),
  };
}

function registryContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
  });

  const repoUids = async (hierarchy: HierarchyFilter, filter: RepoFilter = {}, visibleWithin: readonly string[] | null = null) => {
    const r = await store.repos.list(query<RepoFilter, RepoOrder>({ hierarchy, filter, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };
  const tagUids = async (hierarchy: HierarchyFilter, filter: Partial<TagFilter> = {}, visibleWithin: readonly string[] | null = null) => {
    const r = await store.tags.list(query<TagFilter, TagOrder>({ hierarchy, filter: { ...NO_FORM, ...filter }, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };

  describe("repos: create, get, update, delete, list", () => {
    test("every field round-trips exactly; get returns null when absent", async () => {
      const full = repo(R_A, A, "chainguard/nginx", {
        description: "web server",
        catalogTier: 2,
        bundles: ["base", "fips"],
        aliases: ["docker.io/library/nginx:latest", "nginx:1.25"],
        activeTags: ["latest", "1.25"],
        createTime: 1_001,
        updateTime: 1_002,
      });
      const bare = repo(R_A1, A1, "python");
      await store.repos.create(full);
      await store.repos.create(bare);
      assert.deepEqual(await store.repos.get(R_A), full);
      assert.deepEqual(await store.repos.get(R_A1), bare);
      assert.deepEqual((await store.repos.list(query<RepoFilter, RepoOrder>({}))).items, [bare, full]);
      assert.equal(await store.repos.get(R_B1), null);
    });

    test("a missing group throws NotFoundError; a taken uid, or a name taken in the group, AlreadyExistsError", async () => {
      const missing = below(C, "8");
      await assertNotFound(async () => store.repos.create(repo(below(missing, "5"), missing, "x")), "group", missing);
      await store.repos.create(repo(R_A, A, "nginx"));
      await assertAlreadyExists(async () => store.repos.create(repo(R_A, A, "other")), "repo", R_A);
      // The clash names the repo holding the name.
      await assertAlreadyExists(async () => store.repos.create(repo(below(A, "6"), A, "nginx", { description: "second" })), "repo", R_A);
      assert.equal(await store.repos.get(below(A, "6")), null);
      // The same name in another group, even a child, is another repo.
      await store.repos.create(repo(R_A1, A1, "nginx"));
      assert.deepEqual(await repoUids({}, { name: "nginx" }), sorted([R_A, R_A1]));
    });

    test("update returns the changed repo, moves updateTime, and keeps the rest", async () => {
      const before = repo(R_A1, A1, "nginx", { description: "kept", bundles: ["base"], createTime: 1_000, updateTime: 1_000 });
      await store.repos.create(before);
      const tiered = await store.repos.update(R_A1, { catalogTier: 3, aliases: ["nginx:latest"] }, 5_000);
      assert.deepEqual(tiered, { ...before, catalogTier: 3, aliases: ["nginx:latest"], updateTime: 5_000 });
      assert.deepEqual(await store.repos.get(R_A1), tiered);
      const renamed = await store.repos.update(R_A1, { name: "nginx-fips", bundles: [], activeTags: ["1"], description: "" }, 6_000);
      assert.deepEqual(renamed, { ...tiered, name: "nginx-fips", bundles: [], activeTags: ["1"], description: "", updateTime: 6_000 });
      assert.deepEqual(await store.repos.get(R_A1), renamed);
      // Keeping its own name is no clash.
      assert.equal((await store.repos.update(R_A1, { name: "nginx-fips" }, 7_000)).updateTime, 7_000);
    });

    test("renaming to a name taken in the group throws AlreadyExistsError and changes nothing; missing repos throw NotFoundError", async () => {
      await store.repos.create(repo(R_A, A, "nginx"));
      const other = repo(below(A, "6"), A, "redis");
      await store.repos.create(other);
      await assertAlreadyExists(async () => store.repos.update(other.uid, { name: "nginx" }, 2_000), "repo", R_A);
      assert.deepEqual(await store.repos.get(other.uid), other);
      await assertNotFound(async () => store.repos.update(R_B1, { name: "x" }, 2_000), "repo", R_B1);
      assert.equal(await store.repos.get(R_B1), null);
    });

    test("delete removes the repo; a missing one throws NotFoundError", async () => {
      await store.repos.create(repo(R_A, A, "nginx"));
      await store.repos.create(repo(R_B1, B1, "nginx"));
      await store.repos.delete(R_A);
      assert.equal(await store.repos.get(R_A), null);
      assert.deepEqual(await repoUids({}), [R_B1]);
      await assertNotFound(async () => store.repos.delete(R_A), "repo", R_A);
      // The name is free again.
      await store.repos.create(repo(below(A, "6"), A, "nginx"));
    });

    test("a repo with tags cannot be async deleted: RESOURCE_NOT_EMPTY naming tags, and nothing is deleted", async () => {
      await store.repos.create(repo(R_A1, A1, "nginx"));
      await store.tags.put(tag(below(R_A1, "7"), R_A1, "latest"));
      await assertPrecondition(async () => store.repos.delete(R_A1), "RESOURCE_NOT_EMPTY", R_A1, /tags/);
      assert.equal((await store.repos.get(R_A1))?.name, "nginx");
      assert.equal((await store.tags.get(below(R_A1, "7")))?.name, "latest");
      await store.tags.delete(below(R_A1, "7"));
      await store.repos.delete(R_A1);
      assert.equal(await store.repos.get(R_A1), null);
    });

    test("a group holding a repo cannot be async deleted: RESOURCE_NOT_EMPTY naming repos", async () => {
      await store.repos.create(repo(R_A1X, A1X, "nginx"));
      await assertPrecondition(async () => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, /repos/);
      assert.equal((await store.groups.get(A1X))?.name, "svc");
      assert.equal((await store.repos.get(R_A1X))?.name, "nginx");
      await store.repos.delete(R_A1X);
      await store.groups.delete(A1X);
      assert.equal(await store.groups.get(A1X), null);
    });

    test("list filters by exact name, hierarchy and visibility", async () => {
      await store.repos.create(repo(R_A, A, "nginx"));
      await store.repos.create(repo(R_A1, A1, "nginx"));
      await store.repos.create(repo(R_A1X, A1X, "go/builder"));
      await store.repos.create(repo(R_B1, B1, "nginx"));
      assert.deepEqual(await repoUids({}, { name: "nginx" }), sorted([R_A, R_A1, R_B1]));
      assert.deepEqual(await repoUids({}, { name: "ngin" }), []);
      assert.deepEqual(await repoUids({ descendantsOf: A }), sorted([R_A, R_A1, R_A1X]));
      assert.deepEqual(await repoUids({ descendantsOf: A1 }, { name: "go/builder" }), [R_A1X]);
      assert.deepEqual(await repoUids({ childrenOf: A1 }), [R_A1]);
      assert.deepEqual(await repoUids({ childrenOf: A2 }), []);
      assert.deepEqual(await repoUids({ inRoot: true }), []);
      assert.deepEqual(await repoUids({ ids: [R_B1, below(C, "5")] }), [R_B1]);
      assert.deepEqual(await repoUids({ ancestorsOf: below(R_A1, "7") }), [R_A1]);
      assert.deepEqual(await repoUids({}, {}, [A1, B]), sorted([R_A1, R_A1X, R_B1]));
      assert.deepEqual(await repoUids({}, {}, []), []);
    });
  });

  describe("tags: put, get, delete, list", () => {
    beforeEach(async () => {
      await store.repos.create(repo(R_A, A, "nginx"));
      await store.repos.create(repo(R_A1, A1, "nginx"));
      await store.repos.create(repo(R_B1, B1, "nginx"));
    });

    test("put creates a tag that round-trips exactly; get returns null when absent", async () => {
      const t = tag(below(R_A, "7"), R_A, "1.25", { digest: DIGEST_2, deprecated: true, bundles: ["base", "fips"], updateTime: 1_234 });
      assert.deepEqual(await store.tags.put(t), { tag: t, created: true });
      assert.deepEqual(await store.tags.get(t.uid), t);
      assert.equal(await store.tags.get(below(R_A, "8")), null);
      assert.equal(await store.tags.get(R_A), null, "a repo is not a tag");
    });

    test("put of a name the repo already has updates that tag, keeping its uid", async () => {
      const first = tag(below(R_A, "7"), R_A, "latest", { bundles: ["base"], updateTime: 1_000 });
      await store.tags.put(first);
      const again = tag(below(R_A, "8"), R_A, "latest", { digest: DIGEST_2, deprecated: true, updateTime: 2_000 });
      const kept = { ...again, uid: first.uid };
      assert.deepEqual(await store.tags.put(again), { tag: kept, created: false });
      assert.deepEqual(await store.tags.get(first.uid), kept);
      assert.equal(await store.tags.get(again.uid), null);
      assert.deepEqual(await tagUids({}), [first.uid]);
      // The same name in another repo is another tag.
      const elsewhere = tag(below(R_A1, "7"), R_A1, "latest");
      assert.equal((await store.tags.put(elsewhere)).created, true);
      assert.deepEqual(await tagUids({}, { name: "latest" }), sorted([first.uid, elsewhere.uid]));
    });

    test("put under a missing repo throws NotFoundError naming it; a uid taken by another tag AlreadyExistsError", async () => {
      const missing = below(A2, "5");
      await assertNotFound(async () => store.tags.put(tag(below(missing, "7"), missing, "latest")), "repo", missing);
      await assertNotFound(async () => store.tags.put(tag(below(A, "7"), A, "latest")), "repo", A);
      assert.deepEqual(await tagUids({}), []);
      await store.tags.put(tag(below(R_A, "7"), R_A, "latest"));
      await assertAlreadyExists(async () => store.tags.put(tag(below(R_A, "7"), R_A, "stable")), "tag", below(R_A, "7"));
      assert.deepEqual(await tagUids({}), [below(R_A, "7")]);
    });

    test("delete removes the tag; a missing one throws NotFoundError", async () => {
      await store.tags.put(tag(below(R_A, "7"), R_A, "latest"));
      await store.tags.delete(below(R_A, "7"));
      assert.equal(await store.tags.get(below(R_A, "7")), null);
      await assertNotFound(async () => store.tags.delete(below(R_A, "7")), "tag", below(R_A, "7"));
    });

    test("referrer, dated and epoch tags are left out unless their include flag is set", async () => {
      const names = [
        "latest",
        "sha256-abc.sig",
        "1.25-20240131",
        "1.25-r3",
        "1.25-20240131-r2",
        "1.25-r3-dev",
        "2024-01-31",
        "v20240131",
        "1.25-19991231",
      ];
      const uids: string[] = [];
      for (const [i, name] of names.entries()) {
        const uid = below(R_A, "abcdef0123"[i]!);
        await store.tags.put(tag(uid, R_A, name));
        uids.push(uid);
      }
      const only = (...picked: string[]) => sorted(picked.map((n) => uids[names.indexOf(n)]!));
      const plain = ["latest", "1.25-r3-dev", "2024-01-31", "v20240131", "1.25-19991231"];
      assert.deepEqual(await tagUids({}), only(...plain));
      assert.deepEqual(await tagUids({}, { includeReferrers: true }), only(...plain, "sha256-abc.sig"));
      assert.deepEqual(await tagUids({}, { includeDates: true }), only(...plain, "1.25-20240131"));
      assert.deepEqual(await tagUids({}, { includeEpochs: true }), only(...plain, "1.25-r3", "1.25-20240131-r2"));
      assert.deepEqual(await tagUids({}, EVERY_FORM), sorted(uids));
    });

    test("name, digest and updatedSince filter exactly; updatedSince is strictly after", async () => {
      const a = tag(below(R_A, "7"), R_A, "latest", { digest: DIGEST_1, updateTime: 1_000 });
      const b = tag(below(R_A, "8"), R_A, "stable", { digest: DIGEST_2, updateTime: 2_000 });
      const c = tag(below(R_A1, "7"), R_A1, "latest", { digest: DIGEST_2, updateTime: 3_000 });
      for (const t of [a, b, c]) await store.tags.put(t);
      assert.deepEqual(await tagUids({}, { name: "latest" }), sorted([a.uid, c.uid]));
      assert.deepEqual(await tagUids({}, { name: "lates" }), []);
      assert.deepEqual(await tagUids({}, { digest: DIGEST_2 }), sorted([b.uid, c.uid]));
      assert.deepEqual(await tagUids({}, { digest: DIGEST_2, name: "latest" }), [c.uid]);
      assert.deepEqual(await tagUids({}, { updatedSince: 1_999 }), sorted([b.uid, c.uid]));
      assert.deepEqual(await tagUids({}, { updatedSince: 2_000 }), [c.uid]);
      assert.deepEqual(await tagUids({}, { updatedSince: 3_000 }), []);
      // A put that updates a tag moves it past the mark.
      await store.tags.put({ ...a, updateTime: 4_000 });
      assert.deepEqual(await tagUids({}, { updatedSince: 3_000 }), [a.uid]);
    });

    test("hierarchy and visibility work on the tag's uid: below a group spans its repos", async () => {
      const ta = tag(below(R_A, "7"), R_A, "latest");
      const ta1 = tag(below(R_A1, "7"), R_A1, "latest");
      const tb1 = tag(below(R_B1, "7"), R_B1, "latest");
      for (const t of [ta, ta1, tb1]) await store.tags.put(t);
      assert.deepEqual(await tagUids({ descendantsOf: A }), sorted([ta.uid, ta1.uid]));
      assert.deepEqual(await tagUids({ descendantsOf: R_A1 }), [ta1.uid]);
      assert.deepEqual(await tagUids({ childrenOf: R_A }), [ta.uid]);
      assert.deepEqual(await tagUids({ childrenOf: A }), []);
      assert.deepEqual(await tagUids({ ids: [tb1.uid, R_B1] }), [tb1.uid]);
      assert.deepEqual(await tagUids({}, {}, [A1, B1]), sorted([ta1.uid, tb1.uid]));
      assert.deepEqual(await tagUids({}, {}, [R_A]), [ta.uid]);
      assert.deepEqual(await tagUids({}, {}, []), []);
    });
  });

  describe("tags: what the registry's notifications leave, read and restored as a copy does", () => {
    const T1 = below(R_A, "1");
    const T2 = below(R_A, "2");
    const T3 = below(R_A, "3");
    const US = 1_700_000_000_000_000;

    test("source times are listed in tag uid order, a page after a uid; a tag an API call set last has none", async () => {
      await store.repos.create(repo(R_A, A, "memory/app"));
      await store.tags.putFromRegistry(tag(T1, R_A, "one"), US + 1);
      await store.tags.put(tag(T2, R_A, "two"));
      await store.tags.putFromRegistry(tag(T3, R_A, "three"), US + 3);
      assert.deepEqual(await store.tags.registrySourceTimes("", 10), [
        { tagUid: T1, timeUs: US + 1 },
        { tagUid: T3, timeUs: US + 3 },
      ]);
      assert.deepEqual(await store.tags.registrySourceTimes("", 1), [{ tagUid: T1, timeUs: US + 1 }]);
      assert.deepEqual(await store.tags.registrySourceTimes(T1, 1), [{ tagUid: T3, timeUs: US + 3 }]);
      assert.deepEqual(await store.tags.registrySourceTimes(T3, 1), []);
    });

    test("deleted digests are listed in (repo, digest) order, a page after a key", async () => {
      await store.repos.create(repo(R_A, A, "memory/a"));
      await store.repos.create(repo(R_B1, B1, "memory/b"));
      await store.tags.deleteFromRegistry(R_B1, { digest: DIGEST_1 }, US + 5);
      await store.tags.deleteFromRegistry(R_A, { digest: DIGEST_2 }, US + 6);
      await store.tags.deleteFromRegistry(R_A, { digest: DIGEST_1 }, US + 7);
      const all = [
        { repoUid: R_A, digest: DIGEST_1, timeUs: US + 7 },
        { repoUid: R_A, digest: DIGEST_2, timeUs: US + 6 },
        { repoUid: R_B1, digest: DIGEST_1, timeUs: US + 5 },
      ].sort((a, b) => compareText(a.repoUid, b.repoUid) || compareText(a.digest, b.digest));
      assert.deepEqual(await store.tags.deletedDigests(null, 10), all);
      assert.deepEqual(await store.tags.deletedDigests(null, 2), all.slice(0, 2));
      assert.deepEqual(await store.tags.deletedDigests(all[1]!, 2), all.slice(2));
      assert.deepEqual(await store.tags.deletedDigests(all[2]!, 2), []);
    });

    test("restored, they decide later notifications as they did where they were read", async () => {
      await store.repos.create(repo(R_A, A, "memory/app"));
      await store.tags.put(tag(T1, R_A, "one", { digest: DIGEST_1, updateTime: 1_700_000_000_000 }));
      await store.tags.restoreRegistryMemory({
        sourceTimes: [{ tagUid: T1, timeUs: US - 1_000_000 }],
        deletedDigests: [{ repoUid: R_A, digest: DIGEST_2, timeUs: US + 10 }],
      });
      assert.deepEqual(await store.tags.registrySourceTimes("", 10), [{ tagUid: T1, timeUs: US - 1_000_000 }]);
      // A push after the tag's registry time (though before its update time) moves it, as it would have before the copy.
      const moved = await store.tags.putFromRegistry(tag(T2, R_A, "one", { digest: `sha256:${"3".repeat(64)}` }), US - 500_000);
      assert.equal(moved?.tag.uid, T1);
      // A push of the deleted digest older than its delete is not applied.
      assert.equal(await store.tags.putFromRegistry(tag(T3, R_A, "other", { digest: DIGEST_2 }), US + 9), null);
      assert.equal(await store.tags.get(T3), null);
      // Restored again with an older delete time: the later one stays.
      await store.tags.restoreRegistryMemory({ sourceTimes: [], deletedDigests: [{ repoUid: R_A, digest: DIGEST_2, timeUs: US }] });
      assert.deepEqual(await store.tags.deletedDigests(null, 10), [{ repoUid: R_A, digest: DIGEST_2, timeUs: US + 10 }]);
      // A digest restored alone is read back at once (behind caches too: the write moved the tags' version).
      await store.tags.restoreRegistryMemory({ sourceTimes: [], deletedDigests: [{ repoUid: R_A, digest: DIGEST_1, timeUs: US + 20 }] });
      assert.deepEqual(await store.tags.deletedDigests(null, 10), [
        { repoUid: R_A, digest: DIGEST_1, timeUs: US + 20 },
        { repoUid: R_A, digest: DIGEST_2, timeUs: US + 10 },
      ]);
    });

    test("a tag or repo the store does not hold is NOT_FOUND, and nothing of the call is written", async () => {
      await store.repos.create(repo(R_A, A, "memory/app"));
      await store.tags.put(tag(T1, R_A, "one"));
      await assertNotFound(
        async () =>
          store.tags.restoreRegistryMemory({
            sourceTimes: [
              { tagUid: T1, timeUs: US },
              { tagUid: T2, timeUs: US },
            ],
            deletedDigests: [],
          }),
        "tag",
        T2,
      );
      await assertNotFound(
        async () =>
          store.tags.restoreRegistryMemory({
            sourceTimes: [{ tagUid: T1, timeUs: US }],
            deletedDigests: [{ repoUid: R_A1, digest: DIGEST_1, timeUs: US }],
          }),
        "repo",
        R_A1,
      );
      assert.deepEqual(await store.tags.registrySourceTimes("", 10), []);
      assert.deepEqual(await store.tags.deletedDigests(null, 10), []);
    });
  });
}

/** The plain tags of the tag walk: not referrer, dated or epoch tags. */
const PLAIN_TAG = /^(?!sha256-)(?!.*-20\d{6}$)(?!.*-r\d+$)/;

/** Groups of the paging tree (see OWNERS) holding the walk's repos; root level moves to group 4. */
const REPO_GROUPS = OWNERS.map((owner) => (owner < 0 ? 4 : owner));

/** Repos in groups across the tree, names repeated across groups (unique within one), with equal times. */
async function buildRepoWalk(store: Store): Promise<WalkFixture<RepoRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(53, 16);
  const names = ["nginx", "python", "nginx", "go/builder", "redis", "nginx"];
  const times = [1_000, 2_000, 1_000, 3_000, 1_000];
  const out: RepoRecord[] = [];
  await store.transaction(async (tx) => {
    for (const [i, g] of REPO_GROUPS.entries()) {
      const parentUid = groups[g]!.uid;
      const t = times[i % times.length]!;
      const rec = repo(`${parentUid}/${seg.next().value!}`, parentUid, names[i % names.length]!, {
        catalogTier: i % 7,
        bundles: i % 2 === 0 ? ["base"] : [],
        createTime: t,
        updateTime: t,
      });
      await tx.repos.create(rec);
      out.push(rec);
    }
    for (const [i, t] of [
      [0, 9_000],
      [3, 8_000],
      [10, 9_000],
      [14, 9_000],
    ] as const) {
      out[i] = await tx.repos.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/**
 * Tags in five repos (three in the first root), names repeated across repos,
 * every tag form, equal update times; some tags are put twice, which updates
 * them in place.
 */
async function buildTagWalk(store: Store): Promise<WalkFixture<TagRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(59, 16);
  const repos: RepoRecord[] = [];
  for (const g of [0, 5, 13, 17, 20]) {
    const r = repo(`${groups[g]!.uid}/${seg.next().value!}`, groups[g]!.uid, "nginx");
    await store.repos.create(r);
    repos.push(r);
  }
  const names = ["latest", "1.25", "sha256-abc.att", "1.25-20240131", "1.25-r3", "stable", "1.25-dev", "latest-dev"];
  const times = [1_000, 2_000, 1_000, 3_000, 1_000, 2_000];
  const placement = [0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 2, 0];
  const byUid = new Map<string, TagRecord>();
  await store.transaction(async (tx) => {
    for (const [i, r] of placement.entries()) {
      const repoUid = repos[r]!.uid;
      const t = tag(`${repoUid}/${seg.next().value!}`, repoUid, names[i % names.length]!, {
        digest: `sha256:${(i % 5).toString().repeat(64)}`,
        updateTime: times[i % times.length]!,
      });
      const { tag: stored } = await tx.tags.put(t);
      byUid.set(stored.uid, stored);
    }
  });
  const records = [...byUid.values()];
  assert.ok(records.length < placement.length, "some puts updated a tag in place");
  return { records, root: groups[0]!.uid };
}
