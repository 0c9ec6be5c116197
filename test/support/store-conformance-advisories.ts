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

function event(uid: string, type: string, author: string, reviewState: number, createTime: number, over: Partial<AdvisoryEventRecord> = {}): AdvisoryEventRecord {
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
        event(ev(X1, 2), "fixed", "bob", APPROVED, 2_000, { reviewer: "rita", issue: "https://issues.example/1", data: { fixedVersion: "3.0.1" } }),
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
        event(ev(X2, 2), "falsePositiveDetermination", "carol", PENDING, 3_000, { data: { type: "TYPE_COMPONENT_VULNERABILITY_MISMATCH", note: "n/a" } }),
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
  beforeEach(() => {
    store = getStore();
    for (const g of hierarchyFixture()) store.groups.create(g);
    x1 = filterFixture()[0]!;
  });

  test("a new advisory is created and read back exactly; get returns null when absent", () => {
    assert.deepEqual(store.advisories.upsert([x1]), ["created"]);
    assert.deepEqual(store.advisories.get(X1), x1);
    assert.equal(store.advisories.get(X2), null);
  });

  test("an advisory equal but for its and its events' times is unchanged, and keeps its stored times", () => {
    store.advisories.upsert([x1]);
    const retimed = { ...x1, createTime: 9_000_000, updateTime: 9_000_001, events: x1.events.map((e) => ({ ...e, createTime: 7 })) };
    assert.deepEqual(store.advisories.upsert([retimed]), ["unchanged"]);
    assert.deepEqual(store.advisories.get(X1), x1);
  });

  test("the key order of event data is not a change; a dropped data field is", () => {
    const withData = (data: Record<string, unknown>) => ({ ...x1, events: [x1.events[0]!, { ...x1.events[1]!, data }] });
    store.advisories.upsert([withData({ fixedVersion: "3.0.1", note: "upstream" })]);
    assert.deepEqual(store.advisories.upsert([withData({ note: "upstream", fixedVersion: "3.0.1" })]), ["unchanged"]);
    assert.deepEqual(store.advisories.upsert([withData({ fixedVersion: "3.0.1" })]), ["updated"]);
    assert.deepEqual(store.advisories.get(X1), withData({ fixedVersion: "3.0.1" }));
  });

  test("a change is updated: the new fields and update time, with the first create time", () => {
    store.advisories.upsert([x1]);
    const changed = { ...x1, aliases: [...x1.aliases, "CVE-2025-9999"], createTime: 5, updateTime: 1_800_000_000_000 };
    assert.deepEqual(store.advisories.upsert([changed]), ["updated"]);
    assert.deepEqual(store.advisories.get(X1), { ...changed, createTime: x1.createTime });
  });

  test("every kind of field change counts, withdrawal and its reversal included", () => {
    store.advisories.upsert([x1]);
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
      assert.deepEqual(store.advisories.upsert([current]), ["updated"], what);
      assert.deepEqual(store.advisories.get(X1), current, what);
    }
    current = { ...current, deleteTime: null };
    assert.deepEqual(store.advisories.upsert([current]), ["updated"], "deleteTime cleared");
    assert.equal(store.advisories.get(X1)?.deleteTime, null);
  });

  test("a batch reports one outcome per advisory, in order", () => {
    const [a1, a2, a3] = filterFixture();
    store.advisories.upsert([a1!, a2!]);
    const outcomes = store.advisories.upsert([a3!, a1!, { ...a2!, author: "changed" }, { ...a3!, origin: "" }]);
    assert.deepEqual(outcomes, ["created", "unchanged", "updated", "updated"]);
    assert.equal(store.advisories.get(X3)?.origin, "");
  });

  test("an advisory in a missing group throws NotFoundError and the whole batch stores nothing", () => {
    const orphanGroup = `${C}/${"7".repeat(16)}`;
    const orphan = advisory(`${orphanGroup}/${"1".repeat(16)}`, orphanGroup);
    assertNotFound(() => store.advisories.upsert([x1, orphan]), "group", orphanGroup);
    assert.equal(store.advisories.get(X1), null);
    assert.equal(store.advisories.get(orphan.uid), null);
    assert.equal(store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({})).totalCount, 0);
  });

  test("lists and counts see every upsert", () => {
    const list = () => store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ filter: { aliases: ["CVE-2025-9999"] } }));
    assert.equal(list().totalCount, 0);
    store.advisories.upsert([x1]);
    assert.equal(list().totalCount, 0);
    store.advisories.upsert([{ ...x1, aliases: ["CVE-2025-9999"] }]);
    assert.deepEqual(list().items.map((a) => a.uid), [X1]);
    assert.equal(list().totalCount, 1);
  });

  test("a group holding advisories cannot be deleted (RESOURCE_NOT_EMPTY naming advisories)", () => {
    const leaf = advisory(`${A1X}/${"1".repeat(16)}`, A1X);
    store.advisories.upsert([leaf]);
    assertPrecondition(() => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, /advisories/);
    assert.equal(store.groups.get(A1X)?.uid, A1X);
  });
}

function filterContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(() => {
    store = getStore();
    for (const g of hierarchyFixture()) store.groups.create(g);
    store.advisories.upsert(filterFixture());
  });

  const uidsOf = (filter: AdvisoryFilter, hierarchy: HierarchyFilter = {}, visibleWithin: readonly string[] | null = null) => {
    const r = store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ filter, hierarchy, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((a) => a.uid);
  };
  const ALL = sorted([X1, X2, X3, X4, X5]);

  test("no filter, empty lists and an empty query list everything, exactly as stored", () => {
    assert.deepEqual(uidsOf({}), ALL);
    assert.deepEqual(uidsOf({ advisoryIds: [], aliases: [], eventTypes: [], excludeEventAuthors: [], query: "" }), ALL);
    const listed = store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({})).items;
    assert.deepEqual(listed, [...filterFixture()].sort((x, y) => compareText(x.uid, y.uid)));
  });

  test("exact lists match any of their values, and only whole values", () => {
    assert.deepEqual(uidsOf({ advisoryIds: ["CGA-0001", "GO-2024-0003", "CGA-9999"] }), sorted([X1, X3]));
    assert.deepEqual(uidsOf({ advisoryIds: ["CGA-000"] }), []);
    assert.deepEqual(uidsOf({ legacyAdvisoryIds: ["LEG-1"] }), [X1]);
    assert.deepEqual(uidsOf({ artifactNames: ["openssl-dev", "golang.org/x/net"] }), sorted([X2, X3]));
    assert.deepEqual(uidsOf({ artifactTypes: ["apk"] }), sorted([X1, X2]));
    assert.deepEqual(uidsOf({ artifactArchitectures: ["aarch64"] }), [X2]);
    assert.deepEqual(uidsOf({ componentNames: ["libssl3", "pure"] }), sorted([X1, X4]));
    assert.deepEqual(uidsOf({ componentTypes: ["pypi", "go"] }), sorted([X3, X4, X5]));
    assert.deepEqual(uidsOf({ componentLocations: ["./PKGINFO"] }), sorted([X1, X2]));
  });

  test("aliases match when any alias equals any value", () => {
    assert.deepEqual(uidsOf({ aliases: ["CVE-2024-0001"] }), sorted([X1, X3]));
    assert.deepEqual(uidsOf({ aliases: ["GHSA-aaaa-bbbb-cccc", "PYSEC-2024-1"] }), sorted([X1, X5]));
    assert.deepEqual(uidsOf({ aliases: ["CVE-2024"] }), []);
  });

  test("origin selects its artifacts, replaces artifactNames, and combines with the other filters", () => {
    assert.deepEqual(uidsOf({ origin: "openssl" }), sorted([X1, X2]));
    assert.deepEqual(uidsOf({ origin: "openssl", artifactNames: ["golang.org/x/net"] }), sorted([X1, X2]));
    assert.deepEqual(uidsOf({ artifactNames: ["golang.org/x/net"] }), [X3]);
    assert.deepEqual(uidsOf({ origin: "openssl", componentNames: ["libssl3"] }), [X1]);
    assert.deepEqual(uidsOf({ origin: "nothing" }), []);
  });

  test("event filters match when at least one event matches", () => {
    assert.deepEqual(uidsOf({ eventReviewStates: [PENDING] }), [X2]);
    assert.deepEqual(uidsOf({ eventReviewStates: [REJECTED, PENDING] }), sorted([X2, X3]));
    assert.deepEqual(uidsOf({ eventReviewStates: [APPROVED] }), sorted([X1, X2, X3, X5]));
    assert.deepEqual(uidsOf({ eventAuthors: ["carol", "mallory"] }), sorted([X2, X3]));
    assert.deepEqual(uidsOf({ eventReviewers: ["rita"] }), [X1]);
    assert.deepEqual(uidsOf({ eventTypes: ["fixed"] }), sorted([X1, X3]));
    assert.deepEqual(uidsOf({ eventTypes: ["patched", "falsePositiveDetermination"] }), sorted([X2, X5]));
  });

  test("excludeEventAuthors drops an advisory when any event is by one of them; one without events stays", () => {
    assert.deepEqual(uidsOf({ excludeEventAuthors: ["bob"] }), sorted([X2, X4, X5]));
    assert.deepEqual(uidsOf({ excludeEventAuthors: ["alice", "dave"] }), sorted([X3, X4]));
    assert.deepEqual(uidsOf({ eventAuthors: ["bob"], excludeEventAuthors: ["mallory"] }), [X1]);
  });

  test("latestEventType is the type of the latest approved event: by time, then by position", () => {
    assert.deepEqual(uidsOf({ latestEventType: "fixed" }), sorted([X1, X3]));
    assert.deepEqual(uidsOf({ latestEventType: "detection" }), [X2], "a later pending event does not count");
    assert.deepEqual(uidsOf({ latestEventType: "patched" }), [X5], "an older event later in the history is not the latest");
    assert.deepEqual(uidsOf({ latestEventType: "analysisNotPlanned" }), []);
    assert.deepEqual(uidsOf({ latestEventType: "pendingUpstreamFix" }), [], "a rejected event does not count");
  });

  test("query is a case-insensitive substring of artifact name, component name or an alias", () => {
    assert.deepEqual(uidsOf({ query: "SSL" }), sorted([X1, X2]));
    assert.deepEqual(uidsOf({ query: "LibCrypto" }), [X2]);
    assert.deepEqual(uidsOf({ query: "X/NET" }), [X3]);
    assert.deepEqual(uidsOf({ query: "cve-2024-000" }), sorted([X1, X2, X3]));
    assert.deepEqual(uidsOf({ query: "pysec" }), [X5]);
    assert.deepEqual(uidsOf({ query: "python" }), [X5]);
    assert.deepEqual(uidsOf({ query: "no such text" }), []);
  });

  test("query takes LIKE wildcards and the escape character literally", () => {
    assert.deepEqual(uidsOf({ query: "%" }), [X4]);
    assert.deepEqual(uidsOf({ query: "100%" }), [X4]);
    assert.deepEqual(uidsOf({ query: "_" }), sorted([X4, X5]));
    assert.deepEqual(uidsOf({ query: "%_" }), [X4]);
    assert.deepEqual(uidsOf({ query: "\\" }), [X4]);
    assert.deepEqual(uidsOf({ query: "_pure\\l" }), [X4]);
    assert.deepEqual(uidsOf({ query: "o_e" }), [], "_ is not any character");
  });

  test("filters combine with each other, the hierarchy and visibility", () => {
    assert.deepEqual(uidsOf({ componentTypes: ["apk"], eventTypes: ["fixed"] }), [X1]);
    assert.deepEqual(uidsOf({ query: "lib", componentTypes: ["pypi"] }), sorted([X4, X5]));
    assert.deepEqual(uidsOf({ aliases: ["CVE-2024-0001"] }, { descendantsOf: A1 }), [X3]);
    assert.deepEqual(uidsOf({ aliases: ["CVE-2024-0001"] }, { childrenOf: A }), [X1]);
    assert.deepEqual(uidsOf({}, { descendantsOf: B }), sorted([X4, X5]));
    assert.deepEqual(uidsOf({}, { ids: [X2, X4, `${C}/${"9".repeat(16)}`] }), sorted([X2, X4]));
    assert.deepEqual(uidsOf({ aliases: ["CVE-2024-0001"] }, {}, [A]), sorted([X1, X3]));
    assert.deepEqual(uidsOf({}, {}, [A1]), [X3]);
    assert.deepEqual(uidsOf({}, {}, [B1, A1]), sorted([X3, X4]));
    assert.deepEqual(uidsOf({ latestEventType: "patched" }, {}, [A]), []);
    assert.deepEqual(store.advisories.list(query<AdvisoryFilter, AdvisoryOrder>({ visibleWithin: [] })), { items: [], hasMore: false, totalCount: 0 });
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
  beforeEach(() => {
    const store = getStore();
    for (const g of hierarchyFixture()) store.groups.create(g);
    records = walkFixture();
    store.advisories.upsert(records);
  });

  const list = (q: Partial<ListQuery<AdvisoryFilter, AdvisoryOrder>>): ListResult<AdvisoryRecord> =>
    getStore().advisories.list(query<AdvisoryFilter, AdvisoryOrder>(q));
  const scopes: { label: string; filter: AdvisoryFilter; visibleWithin: readonly string[] | null; keep(a: AdvisoryRecord): boolean }[] = [
    { label: "all", filter: {}, visibleWithin: null, keep: () => true },
    { label: "componentTypes apk, visible within A", filter: { componentTypes: ["apk"] }, visibleWithin: [A], keep: (a) => a.componentType === "apk" && a.uid.startsWith(`${A}/`) },
  ];
  const orders: readonly AdvisoryOrder[] = ["uid", "advisory_id", "created_at", "updated_at"];

  for (const scope of scopes) {
    for (const field of orders) {
      for (const desc of [false, true]) {
        test(`${scope.label}, order ${field}${desc ? " desc" : ""}: pages concatenate to the full list`, () => {
          const want = expected(records.filter(scope.keep), field, desc);
          const n = want.length;
          assert.ok(n >= 5, `enough advisories in scope to page through (${n})`);
          const { filter, visibleWithin } = scope;
          const order = { field, desc };
          const full = list({ filter, visibleWithin, order, limit: 10_000 });
          assert.deepEqual(full, { items: want, hasMore: false, totalCount: n });
          for (let pageSize = 1; pageSize <= n + 1; pageSize++) {
            const seen: AdvisoryRecord[] = [];
            let after: Cursor | null = null;
            for (let pages = 1; ; pages++) {
              assert.ok(pages <= n + 1, `page size ${pageSize}: the walk does not end`);
              const page = list({ filter, visibleWithin, order, after, limit: pageSize });
              assert.equal(page.totalCount, n, `page size ${pageSize}: totalCount on page ${pages}`);
              seen.push(...page.items);
              if (!page.hasMore) break;
              assert.equal(page.items.length, pageSize, `page size ${pageSize}: a page with more to come is full`);
              const last = page.items[page.items.length - 1]!;
              after = { key: keyOf(last, field), uid: last.uid };
            }
            assert.deepEqual(seen.map((a) => a.uid), want.map((a) => a.uid), `page size ${pageSize}: no gaps, no duplicates`);
          }
        });
      }
    }
  }

  test("offset skips after the position", () => {
    const full = expected(records, "advisory_id", false);
    for (let i = 0; i < full.length; i++) {
      const after = { key: full[i]!.advisoryId, uid: full[i]!.uid };
      const page = list({ order: { field: "advisory_id", desc: false }, after, offset: 2, limit: 3 });
      assert.deepEqual(page.items.map((a) => a.uid), full.slice(i + 3, i + 6).map((a) => a.uid), `after item ${i}`);
      assert.equal(page.hasMore, i + 6 < full.length);
    }
  });
}
