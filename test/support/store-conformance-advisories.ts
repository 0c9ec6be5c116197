import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type {
  AdvisoryEventRecord,
  AdvisoryFilter,
  AdvisoryOrder,
  AdvisoryRecord,
  Cursor,
  HierarchyFilter,
  ListQuery,
  ListResult,
  Store,
} from "../../src/store/store.js";
import { assertNotFound, assertPrecondition } from "./store-conformance-iam.js";
import { A, A1, A1X, B, B1, C, compareText, hexSegments, hierarchyFixture, query, sorted } from "./store-fixtures.js";

// Advisories over hierarchyFixture(): five with distinct values in every
// filtered field, and a larger set for the paged walks.

const APPROVED = 2;
const PENDING = 1;
const REJECTED = 4;

function event(
  uid: string,
  type: string,
  author: string,
  reviewState: number,
  createTime: number,
  over: Partial<AdvisoryEventRecord> = {},
): AdvisoryEventRecord {
  return { uid, createTime, author, reviewer: "", reviewState, issue: null, type, data: {}, ...over };
}

function advisory(uid: string, parentUid: string, over: Partial<AdvisoryRecord> = {}): AdvisoryRecord {
  return {
    uid,
    parentUid,
    advisoryId: "CGA-0000",
    legacyAdvisoryId: "",
    author: "importer",
    artifactName: "",
    artifactType: "library",
    artifactArchitecture: "",
    componentName: "",
    componentLocation: "",
    componentType: "",
    origin: "",
    aliases: [],
    severities: [],
    events: [],
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    deleteTime: null,
    ...over,
  };
}

const X1 = `${A}/${"1".repeat(15)}a`;
const X2 = `${A}/${"2".repeat(15)}a`;
const X3 = `${A1}/${"3".repeat(15)}a`;
const X4 = `${B1}/${"4".repeat(15)}a`;
const X5 = `${B}/${"5".repeat(15)}a`;
const ev = (advisoryUid: string, n: number) => `${advisoryUid}/${n.toString(16).padStart(16, "0")}`;

function filterFixture(): AdvisoryRecord[] {
  return [
    advisory(X1, A, {
      advisoryId: "CGA-0001",
      legacyAdvisoryId: "LEG-1",
      artifactName: "openssl",
      artifactType: "apk",
      artifactArchitecture: "x86_64",
      componentName: "libssl3",
      componentLocation: "./PKGINFO",
      componentType: "apk",
      origin: "openssl",
      aliases: ["CVE-2024-0001", "GHSA-aaaa-bbbb-cccc"],
      severities: [{ type: 2, score: "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:N/I:N/A:N" }],
      events: [
        event(ev(X1, 1), "detection", "alice", APPROVED, 1_000, { data: { manual: {} } }),
        event(ev(X1, 2), "fixed", "bob", APPROVED, 2_000, {
          reviewer: "rita",
          issue: "https://issues.example/1",
          data: { fixedVersion: "3.0.1" },
        }),
      ],
    }),
    advisory(X2, A, {
      advisoryId: "CGA-0002",
      artifactName: "openssl-dev",
      artifactType: "apk",
      artifactArchitecture: "aarch64",
      componentName: "libcrypto3",
      componentLocation: "./PKGINFO",
      componentType: "apk",
      origin: "openssl",
      aliases: ["CVE-2024-0002"],
      events: [
        event(ev(X2, 1), "detection", "alice", APPROVED, 1_000),
        // Later, but pending: the latest approved event stays the detection.
        event(ev(X2, 2), "falsePositiveDetermination", "carol", PENDING, 3_000, {
          data: { type: "TYPE_COMPONENT_VULNERABILITY_MISMATCH", note: "n/a" },
        }),
      ],
    }),
    advisory(X3, A1, {
      advisoryId: "GO-2024-0003",
      artifactName: "golang.org/x/net",
      componentName: "golang.org/x/net",
      componentType: "go",
      origin: "golang.org/x/net",
      aliases: ["CVE-2024-0001"],
      events: [
        event(ev(X3, 1), "detection", "bob", APPROVED, 5_000),
        // Same time as the detection and later in the history: the latest.
        event(ev(X3, 2), "fixed", "bob", APPROVED, 5_000, { data: { fixedVersion: "0.23.0" } }),
        event(ev(X3, 3), "pendingUpstreamFix", "mallory", REJECTED, 9_000),
      ],
    }),
    // No events; an artifact name full of LIKE wildcards and a backslash.
    advisory(X4, B1, { advisoryId: "CGA-0004", artifactName: "100%_pure\\lib", componentName: "pure", componentType: "pypi" }),
    advisory(X5, B, {
      advisoryId: "CGA-0005",
      artifactName: "100percent-lib",
      componentName: "Pure_Python",
      componentType: "pypi",
      aliases: ["PYSEC-2024-1"],
      events: [
        event(ev(X5, 1), "patched", "alice", APPROVED, 6_000, { data: { patchedVersions: ["1.0.1", "1.1.0"] } }),
        // Later in the history but older: the patch stays the latest.
        event(ev(X5, 2), "analysisNotPlanned", "dave", APPROVED, 4_000),
      ],
    }),
  ];
}

/** Conformance of advisories: upserts, every filter, and paged walks in every order. */
export function advisoryConformance(getStore: () => Store): void {
  describe("advisories: upsert", () => upsertContracts(getStore));
  describe("advisories: filters", () => filterContracts(getStore));
  describe("advisories: paged walks (every page size, every order)", () => pagedWalks(getStore));
}

function upsertContracts(getStore: () => Store): void {
  let store: Store;
  let x1: AdvisoryRecord;
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
    x1 = filterFixture()[0]!;
  });

  test("a new advisory is created and read back exactly; get returns null when absent", async () => {
    assert.deepEqual(await store.advisories.upsert([x1]), ["created"]);
    assert.deepEqual(await store.advisories.get(X1), x1);
    assert.equal(await store.advisories.get(X2), null);
  });

  test("an advisory equal but for its and its events' times is unchanged, and keeps its stored times", async () => {
    await store.advisories.upsert([x1]);
    const retimed = { ...x1, createTime: 9_000_000, updateTime: 9_000_001, events: x1.events.map((e) => ({ ...e, createTime: 7 })) };
    assert.deepEqual(await store.advisories.upsert([retimed]), ["unchanged"]);
    assert.deepEqual(await store.advisories.get(X1), x1);
  });

  test("the key order of event data is not a change; a dropped data field is", async () => {
    const withData = (data: Record<string, unknown>) => ({ ...x1, events: [x1.events[0]!, { ...x1.events[1]!, data }] });
    await store.advisories.upsert([withData({ fixedVersion: "3.0.1", note: "upstream" })]);
    assert.deepEqual(await store.advisories.upsert([withData({ note: "upstream", fixedVersion: "3.0.1" })]), ["unchanged"]);
    assert.deepEqual(await store.advisories.upsert([withData({ fixedVersion: "3.0.1" })]), ["updated"]);
    assert.deepEqual(await store.advisories.get(X1), withData({ fixedVersion: "3.0.1" }));
  });

  test("a change is updated: the new fields and update time, with the first create time", async () => {
    await store.advisories.upsert([x1]);
    const changed = { ...x1, aliases: [...x1.aliases, "CVE-2025-9999"], createTime: 5, updateTime: 1_800_000_000_000 };
    assert.deepEqual(await store.advisories.upsert([changed]), ["updated"]);
    assert.deepEqual(await store.advisories.get(X1), { ...changed, createTime: x1.createTime });
  });

  test("every kind of field change counts, withdrawal and its reversal included", async () => {
    await store.advisories.upsert([x1]);
    const e1 = x1.events[1]!;
    const changes: [string, Partial<AdvisoryRecord>][] = [
      ["author", { author: "someone else" }],
      ["artifactName", { artifactName: "openssl-3" }],
      ["componentLocation", { componentLocation: "/usr/lib" }],
      ["origin", { origin: "" }],
      ["legacyAdvisoryId", { legacyAdvisoryId: "" }],
      ["severities", { severities: [{ type: 3, score: "CVSS:4.0/AV:N" }] }],
      ["event data", { events: [x1.events[0]!, { ...e1, data: { fixedVersion: "3.0.2" } }] }],
      ["event review state", { events: [x1.events[0]!, { ...e1, reviewState: REJECTED }] }],
      ["event issue", { events: [x1.events[0]!, { ...e1, issue: null }] }],
      ["an event fewer", { events: [x1.events[0]!] }],
      ["deleteTime set", { deleteTime: 1_750_000_000_000 }],
    ];
    let current = x1;
    for (const [what, change] of changes) {
      current = { ...current, ...change };
      assert.deepEqual(await store.advisories.upsert([current]), ["updated"], what);
      assert.deepEqual(await store.advisories.get(X1), current, what);
    }
    current = { ...current, deleteTime: null };
    assert.deepEqual(await store.advisories.upsert([current]), ["updated"], "deleteTime cleared");
    assert.equal((await store.advisories.get(X1))?.deleteTime, null);
  });

  test("a batch reports one outcome per advisory, in order", async () => {
    const [a1, a2, a3] = filterFixture();
    await store.advisories.upsert([a1!, a2!]);
    const outcomes = await store.advisories.upsert([a3!, a1!, { ...a2!, author: "changed" }, { ...a3!, origin: "" }]);
    assert.deepEqual(outcomes, ["created", "unchanged", "updated", "updated"]);
    assert.equal((await store.advisories.get(X3))?.origin, "");
  });

  test("an advisory in a missing group throws NotFoundError and the whole batch stores nothing", async () => {
    const orphanGroup = `${C}/${"7".repeat(16)}`;
    const orphan = advisory(`${orphanGroup}/${"1".repeat(16)}`, orphanGroup);
    await assertNotFound(async () => store.advisories.upsert([x1, orphan]), "group", orphanGroup);
    assert.equal(await store.advisories.get(X1), null);
    assert.equal(await store.advisories.get(orphan.uid), null);
    assert.equal((await store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({}))).totalCount, 0);
  });

  test("lists and counts see every upsert", async () => {
    const list = async () => store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ filter: { aliases: ["CVE-2025-9999"] } }));
    assert.equal((await list()).totalCount, 0);
    await store.advisories.upsert([x1]);
    assert.equal((await list()).totalCount, 0);
    await store.advisories.upsert([{ ...x1, aliases: ["CVE-2025-9999"] }]);
    assert.deepEqual(
      (await list()).items.map((a) => a.uid),
      [X1],
    );
    assert.equal((await list()).totalCount, 1);
  });

  test("a group holding advisories cannot be deleted (RESOURCE_NOT_EMPTY naming advisories)", async () => {
    const leaf = advisory(`${A1X}/${"1".repeat(16)}`, A1X);
    await store.advisories.upsert([leaf]);
    await assertPrecondition(async () => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, /advisories/);
    assert.equal((await store.groups.get(A1X))?.uid, A1X);
  });
}

function filterContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
    await store.advisories.upsert(filterFixture());
  });

  const uidsOf = async (filter: AdvisoryFilter, hierarchy: HierarchyFilter = {}, visibleWithin: readonly string[] | null = null) => {
    const r = await store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ filter, hierarchy, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((a) => a.uid);
  };
  const ALL = sorted([X1, X2, X3, X4, X5]);

  test("no filter, empty lists and an empty query list everything, exactly as stored", async () => {
    assert.deepEqual(await uidsOf({}), ALL);
    assert.deepEqual(await uidsOf({ advisoryIds: [], aliases: [], eventTypes: [], excludeEventAuthors: [], query: "" }), ALL);
    const listed = (await store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({}))).items;
    assert.deepEqual(
      listed,
      [...filterFixture()].sort((x, y) => compareText(x.uid, y.uid)),
    );
  });

  test("exact lists match any of their values, and only whole values", async () => {
    assert.deepEqual(await uidsOf({ advisoryIds: ["CGA-0001", "GO-2024-0003", "CGA-9999"] }), sorted([X1, X3]));
    assert.deepEqual(await uidsOf({ advisoryIds: ["CGA-000"] }), []);
    assert.deepEqual(await uidsOf({ legacyAdvisoryIds: ["LEG-1"] }), [X1]);
    assert.deepEqual(await uidsOf({ artifactNames: ["openssl-dev", "golang.org/x/net"] }), sorted([X2, X3]));
    assert.deepEqual(await uidsOf({ artifactTypes: ["apk"] }), sorted([X1, X2]));
    assert.deepEqual(await uidsOf({ artifactArchitectures: ["aarch64"] }), [X2]);
    assert.deepEqual(await uidsOf({ componentNames: ["libssl3", "pure"] }), sorted([X1, X4]));
    assert.deepEqual(await uidsOf({ componentTypes: ["pypi", "go"] }), sorted([X3, X4, X5]));
    assert.deepEqual(await uidsOf({ componentLocations: ["./PKGINFO"] }), sorted([X1, X2]));
  });

  test("aliases match when any alias equals any value", async () => {
    assert.deepEqual(await uidsOf({ aliases: ["CVE-2024-0001"] }), sorted([X1, X3]));
    assert.deepEqual(await uidsOf({ aliases: ["GHSA-aaaa-bbbb-cccc", "PYSEC-2024-1"] }), sorted([X1, X5]));
    assert.deepEqual(await uidsOf({ aliases: ["CVE-2024"] }), []);
  });

  test("origin selects its artifacts, replaces artifactNames, and combines with the other filters", async () => {
    assert.deepEqual(await uidsOf({ origin: "openssl" }), sorted([X1, X2]));
    assert.deepEqual(await uidsOf({ origin: "openssl", artifactNames: ["golang.org/x/net"] }), sorted([X1, X2]));
    assert.deepEqual(await uidsOf({ artifactNames: ["golang.org/x/net"] }), [X3]);
    assert.deepEqual(await uidsOf({ origin: "openssl", componentNames: ["libssl3"] }), [X1]);
    assert.deepEqual(await uidsOf({ origin: "nothing" }), []);
  });

  test("event filters match when at least one event matches", async () => {
    assert.deepEqual(await uidsOf({ eventReviewStates: [PENDING] }), [X2]);
    assert.deepEqual(await uidsOf({ eventReviewStates: [REJECTED, PENDING] }), sorted([X2, X3]));
    assert.deepEqual(await uidsOf({ eventReviewStates: [APPROVED] }), sorted([X1, X2, X3, X5]));
    assert.deepEqual(await uidsOf({ eventAuthors: ["carol", "mallory"] }), sorted([X2, X3]));
    assert.deepEqual(await uidsOf({ eventReviewers: ["rita"] }), [X1]);
    assert.deepEqual(await uidsOf({ eventTypes: ["fixed"] }), sorted([X1, X3]));
    assert.deepEqual(await uidsOf({ eventTypes: ["patched", "falsePositiveDetermination"] }), sorted([X2, X5]));
  });

  test("excludeEventAuthors drops an advisory when any event is by one of them; one without events stays", async () => {
    assert.deepEqual(await uidsOf({ excludeEventAuthors: ["bob"] }), sorted([X2, X4, X5]));
    assert.deepEqual(await uidsOf({ excludeEventAuthors: ["alice", "dave"] }), sorted([X3, X4]));
    assert.deepEqual(await uidsOf({ eventAuthors: ["bob"], excludeEventAuthors: ["mallory"] }), [X1]);
  });

  test("latestEventType is the type of the latest approved event: by time, then by position", async () => {
    assert.deepEqual(await uidsOf({ latestEventType: "fixed" }), sorted([X1, X3]));
    assert.deepEqual(await uidsOf({ latestEventType: "detection" }), [X2], "a later pending event does not count");
    assert.deepEqual(await uidsOf({ latestEventType: "patched" }), [X5], "an older event later in the history is not the latest");
    assert.deepEqual(await uidsOf({ latestEventType: "analysisNotPlanned" }), []);
    assert.deepEqual(await uidsOf({ latestEventType: "pendingUpstreamFix" }), [], "a rejected event does not count");
  });

  test("query is a case-insensitive substring of artifact name, component name or an alias", async () => {
    assert.deepEqual(await uidsOf({ query: "SSL" }), sorted([X1, X2]));
    assert.deepEqual(await uidsOf({ query: "LibCrypto" }), [X2]);
    assert.deepEqual(await uidsOf({ query: "X/NET" }), [X3]);
    assert.deepEqual(await uidsOf({ query: "cve-2024-000" }), sorted([X1, X2, X3]));
    assert.deepEqual(await uidsOf({ query: "pysec" }), [X5]);
    assert.deepEqual(await uidsOf({ query: "python" }), [X5]);
    assert.deepEqual(await uidsOf({ query: "no such text" }), []);
  });

  test("query takes LIKE wildcards and the escape character literally", async () => {
    assert.deepEqual(await uidsOf({ query: "%" }), [X4]);
    assert.deepEqual(await uidsOf({ query: "100%" }), [X4]);
    assert.deepEqual(await uidsOf({ query: "_" }), sorted([X4, X5]));
    assert.deepEqual(await uidsOf({ query: "%_" }), [X4]);
    assert.deepEqual(await uidsOf({ query: "\\" }), [X4]);
    assert.deepEqual(await uidsOf({ query: "_pure\\l" }), [X4]);
    assert.deepEqual(await uidsOf({ query: "o_e" }), [], "_ is not any character");
  });

  test("filters combine with each other, the hierarchy and visibility", async () => {
    assert.deepEqual(await uidsOf({ componentTypes: ["apk"], eventTypes: ["fixed"] }), [X1]);
    assert.deepEqual(await uidsOf({ query: "lib", componentTypes: ["pypi"] }), sorted([X4, X5]));
    assert.deepEqual(await uidsOf({ aliases: ["CVE-2024-0001"] }, { descendantsOf: A1 }), [X3]);
    assert.deepEqual(await uidsOf({ aliases: ["CVE-2024-0001"] }, { childrenOf: A }), [X1]);
    assert.deepEqual(await uidsOf({}, { descendantsOf: B }), sorted([X4, X5]));
    assert.deepEqual(await uidsOf({}, { ids: [X2, X4, `${C}/${"9".repeat(16)}`] }), sorted([X2, X4]));
    assert.deepEqual(await uidsOf({ aliases: ["CVE-2024-0001"] }, {}, [A]), sorted([X1, X3]));
    assert.deepEqual(await uidsOf({}, {}, [A1]), [X3]);
    assert.deepEqual(await uidsOf({}, {}, [B1, A1]), sorted([X3, X4]));
    assert.deepEqual(await uidsOf({ latestEventType: "patched" }, {}, [A]), []);
    assert.deepEqual(await store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ visibleWithin: [] })), {
      items: [],
      hasMore: false,
      totalCount: 0,
    });
  });
}

/** The order field's value of an advisory, as the service builds cursors. */
function keyOf(a: AdvisoryRecord, field: AdvisoryOrder): string | number {
  return field === "advisory_id" ? a.advisoryId : field === "created_at" ? a.createTime : field === "updated_at" ? a.updateTime : a.uid;
}

function expected(records: readonly AdvisoryRecord[], field: AdvisoryOrder, desc: boolean): AdvisoryRecord[] {
  const asc = [...records].sort((x, y) => {
    const kx = keyOf(x, field);
    const ky = keyOf(y, field);
    const byKey = typeof kx === "number" && typeof ky === "number" ? kx - ky : compareText(String(kx), String(ky));
    return byKey !== 0 ? byKey : compareText(x.uid, y.uid);
  });
  return desc ? asc.reverse() : asc;
}

/** 17 advisories across both orgs, with repeated ids and times, and uids unrelated to insertion order. */
function walkFixture(): AdvisoryRecord[] {
  const seg = hexSegments(23, 16);
  const groups = [A, A1, A1X, B, B1, A, A1];
  const ids = ["CGA-b", "CGA-a", "GO-2024-1", "CGA-b", "CGA-c", "CGA-a"];
  const created = [1_000, 3_000, 1_000, 2_000, 3_000];
  const updated = [9_000, 4_000, 9_000, 5_000];
  return Array.from({ length: 17 }, (_, i) => {
    const parent = groups[i % groups.length]!;
    return advisory(`${parent}/${seg.next().value!}`, parent, {
      advisoryId: ids[i % ids.length]!,
      componentType: i % 3 === 0 ? "go" : "apk",
      createTime: created[i % created.length]!,
      updateTime: updated[i % updated.length]!,
    });
  });
}

function pagedWalks(getStore: () => Store): void {
  let records: AdvisoryRecord[];
  beforeEach(async () => {
    const store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
    records = walkFixture();
    await store.advisories.upsert(records);
  });

  const list = async (q: Partial<ListQuery<AdvisoryFilter, AdvisoryOrder>>): Promise<ListResult<AdvisoryRecord>> =>
    await getStore().advisories.list(query<AdvisoryFilter, AdvisoryOrder>(q));
  const scopes: { label: string; filter: AdvisoryFilter; visibleWithin: readonly string[] | null; keep(a: AdvisoryRecord): boolean }[] = [
    { label: "all", filter: {}, visibleWithin: null, keep: () => true },
    {
      label: "componentTypes apk, visible within A",
      filter: { componentTypes: ["apk"] },
      visibleWithin: [A],
      keep: (a) => a.componentType === "apk" && a.uid.startsWith(`${A}/`),
    },
  ];
  const orders: readonly AdvisoryOrder[] = ["uid", "advisory_id", "created_at", "updated_at"];

  for (const scope of scopes) {
    for (const field of orders) {
      for (const desc of [false, true]) {
        test(`${scope.label}, order ${field}${desc ? " desc" : ""}: pages concatenate to the full list`, async () => {
          const want = expected(records.filter(scope.keep), field, desc);
          const n = want.length;
          assert.ok(n >= 5, `enough advisories in scope to page through (${n})`);
          const { filter, visibleWithin } = scope;
          const order = { field, desc };
          const full = await list({ filter, visibleWithin, order, limit: 10_000 });
          assert.deepEqual(full, { items: want, hasMore: false, totalCount: n });
          for (let pageSize = 1; pageSize <= n + 1; pageSize++) {
            const seen: AdvisoryRecord[] = [];
            let after: Cursor | null = null;
            for (let pages = 1; ; pages++) {
              assert.ok(pages <= n + 1, `page size ${pageSize}: the walk does not end`);
              const page = await list({ filter, visibleWithin, order, after, limit: pageSize });
              assert.equal(page.totalCount, n, `page size ${pageSize}: totalCount on page ${pages}`);
              seen.push(...page.items);
              if (!page.hasMore) break;
              assert.equal(page.items.length, pageSize, `page size ${pageSize}: a page with more to come is full`);
              const last = page.items[page.items.length - 1]!;
              after = { key: keyOf(last, field), uid: last.uid };
            }
            assert.deepEqual(
              seen.map((a) => a.uid),
              want.map((a) => a.uid),
              `page size ${pageSize}: no gaps, no duplicates`,
            );
          }
        });
      }
    }
  }

  test("offset skips after the position", async () => {
    const full = expected(records, "advisory_id", false);
    for (let i = 0; i < full.length; i++) {
      const after = { key: full[i]!.advisoryId, uid: full[i]!.uid };
      const page = await list({ order: { field: "advisory_id", desc: false }, after, offset: 2, limit: 3 });
      assert.deepEqual(
        page.items.map((a) => a.uid),
        full.slice(i + 3, i + 6).map((a) => a.uid),
        `after item ${i}`,
      );
      assert.equal(page.hasMore, i + 6 < full.length);
    }
  });
}
