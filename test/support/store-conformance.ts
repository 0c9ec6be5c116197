import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";
import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../src/domain/errors.js";
import type {
  Cursor,
  GroupFilter,
  GroupOrder,
  GroupRecord,
  HierarchyFilter,
  ListQuery,
  ListResult,
  Store,
} from "../../src/store/store.js";

/**
 * The store conformance suite: every Store implementation must pass it. It
 * speaks only the Store interface (never SQL), so a second implementation
 * (e.g. PostgreSQL) runs the very same tests. The factory is called once per
 * test and must return an empty store; the suite closes it afterwards.
 */
export function runStoreConformance(name: string, factory: () => Store | Promise<Store>): void {
  describe(`store conformance: ${name}`, () => {
    let store: Store;
    beforeEach(async () => {
      store = await factory();
    });
    afterEach(() => {
      store.close();
    });

    describe("groups: create, get, update, delete", () => {
      test("get returns exactly what create stored, and null when absent", () => {
        const g = group(A, null, "acme corp", { description: "the org", verified: true, createTime: 1_000, updateTime: 2_000 });
        const limited = { ...g, resourceLimits: { clusters: 2, repositories: 10 } };
        store.groups.create(limited);
        assert.deepEqual(store.groups.get(A), limited);
        assert.equal(store.groups.get(C), null);
        assert.equal(store.groups.get(`${A}/${"0".repeat(16)}`), null);
      });

      test("create under a missing parent throws NotFoundError and stores nothing", () => {
        const orphan = group(`${C}/${"1".repeat(16)}`, C, "orphan");
        assert.throws(() => store.groups.create(orphan), NotFoundError);
        assert.equal(store.groups.get(orphan.uid), null);
      });

      test("create with a taken uid throws AlreadyExistsError and keeps the first", () => {
        store.groups.create(group(A, null, "first"));
        assert.throws(() => store.groups.create(group(A, null, "second")), AlreadyExistsError);
        assert.equal(store.groups.get(A)?.name, "first");
      });

      test("update returns the changed group, moves updateTime, and keeps the rest", () => {
        const g = group(A, null, "before", { description: "kept", createTime: 1_000, updateTime: 1_000 });
        store.groups.create(g);
        const renamed = store.groups.update(A, { name: "after" }, 5_000);
        assert.deepEqual(renamed, { ...g, name: "after", updateTime: 5_000 });
        assert.deepEqual(store.groups.get(A), renamed);

        const described = store.groups.update(A, { description: "new text" }, 6_000);
        assert.deepEqual(described, { ...g, name: "after", description: "new text", updateTime: 6_000 });
        assert.deepEqual(store.groups.get(A), described);
      });

      test("update of a missing group throws NotFoundError", () => {
        assert.throws(() => store.groups.update(A, { name: "x y z" }, 1), NotFoundError);
        assert.equal(store.groups.get(A), null);
      });

      test("delete of a group with child groups fails with RESOURCE_NOT_EMPTY naming groups", () => {
        store.groups.create(group(A, null, "org"));
        store.groups.create(group(A1, A, "team"));
        assert.throws(
          () => store.groups.delete(A),
          (err: unknown) => {
            assert.ok(err instanceof FailedPreconditionError, `expected FailedPreconditionError, got ${String(err)}`);
            assert.equal(err.preconditionViolations.length, 1);
            assert.equal(err.preconditionViolations[0]!.type, "RESOURCE_NOT_EMPTY");
            assert.match(err.preconditionViolations[0]!.description, /groups/);
            return true;
          },
        );
        assert.equal(store.groups.get(A)?.name, "org");
        assert.equal(store.groups.get(A1)?.name, "team");

        store.groups.delete(A1);
        store.groups.delete(A);
        assert.equal(store.groups.get(A), null);
        assert.equal(store.groups.get(A1), null);
      });

      test("delete of a missing group throws NotFoundError", () => {
        assert.throws(() => store.groups.delete(A), NotFoundError);
        store.groups.create(group(A, null, "org"));
        store.groups.delete(A);
        assert.throws(() => store.groups.delete(A), NotFoundError);
      });
    });

    describe("groups: hierarchy filters and visibility", () => {
      beforeEach(() => {
        for (const g of hierarchyFixture()) store.groups.create(g);
      });

      const uidsOf = (hierarchy: HierarchyFilter, filter: GroupFilter = {}, visibleWithin: readonly string[] | null = null) => {
        const r = store.groups.list(query({ hierarchy, filter, visibleWithin }));
        assert.equal(r.hasMore, false);
        assert.equal(r.totalCount, r.items.length);
        return r.items.map((g) => g.uid);
      };

      test("no filter lists every group in uid order", () => {
        assert.deepEqual(uidsOf({}), sorted(hierarchyFixture().map((g) => g.uid)));
      });

      test("descendantsOf is every level below, never the group itself nor a prefix-sharing sibling", () => {
        // B is A with its last character changed; A3 is A1 with its last character changed.
        assert.deepEqual(uidsOf({ descendantsOf: A }), sorted([A1, A1X, A2, A2X, A3, A3X]));
        assert.deepEqual(uidsOf({ descendantsOf: A1 }), [A1X]);
        assert.deepEqual(uidsOf({ descendantsOf: B }), [B1]);
        assert.deepEqual(uidsOf({ descendantsOf: A1X }), []);
        assert.deepEqual(uidsOf({ descendantsOf: `${A}/${"9".repeat(16)}` }), []);
      });

      test("childrenOf is exactly one level below", () => {
        assert.deepEqual(uidsOf({ childrenOf: A }), sorted([A1, A2, A3]));
        assert.deepEqual(uidsOf({ childrenOf: A1 }), [A1X]);
        assert.deepEqual(uidsOf({ childrenOf: C }), []);
      });

      test("ancestorsOf is every proper ancestor", () => {
        assert.deepEqual(uidsOf({ ancestorsOf: A1X }), sorted([A, A1]));
        assert.deepEqual(uidsOf({ ancestorsOf: A3X }), sorted([A, A3]));
        assert.deepEqual(uidsOf({ ancestorsOf: A }), []);
      });

      test("inRoot is the root organizations only", () => {
        assert.deepEqual(uidsOf({ inRoot: true }), sorted([A, B, C]));
      });

      test("ids is exactly the listed groups that exist", () => {
        assert.deepEqual(uidsOf({ ids: [A1, B, `${C}/${"7".repeat(16)}`] }), sorted([A1, B]));
      });

      test("the name filter matches exactly and combines with hierarchy filters", () => {
        assert.deepEqual(uidsOf({}, { name: "team" }), sorted([A1, A2, B1]));
        assert.deepEqual(uidsOf({ descendantsOf: A }, { name: "team" }), sorted([A1, A2]));
        assert.deepEqual(uidsOf({ descendantsOf: A }, { name: "svc" }), sorted([A1X, A2X, A3]));
        assert.deepEqual(uidsOf({ childrenOf: A }, { name: "svc" }), [A3]);
        assert.deepEqual(uidsOf({ descendantsOf: A }, { name: "tea" }), []);
      });

      test("visibleWithin narrows to groups at or below the listed uids", () => {
        assert.deepEqual(uidsOf({}, {}, [A1]), sorted([A1, A1X]));
        assert.deepEqual(uidsOf({}, {}, [A1, C]), sorted([A1, A1X, C]));
        assert.deepEqual(uidsOf({}, {}, [B]), sorted([B, B1]));
        assert.deepEqual(uidsOf({ descendantsOf: A }, {}, [A]), sorted([A1, A1X, A2, A2X, A3, A3X]));
        assert.deepEqual(uidsOf({ descendantsOf: A }, {}, [B]), []);
        assert.deepEqual(uidsOf({ descendantsOf: A }, { name: "svc" }, [A1]), [A1X]);
      });

      test("visibleWithin [] sees nothing and counts nothing", () => {
        const r = store.groups.list(query({ visibleWithin: [] }));
        assert.deepEqual(r, { items: [], hasMore: false, totalCount: 0 });
      });

      test("totalCount counts every match regardless of after, offset and limit", () => {
        const first = store.groups.list(query({ hierarchy: { descendantsOf: A }, limit: 1 }));
        assert.equal(first.totalCount, 6);
        assert.equal(first.items.length, 1);
        assert.equal(first.hasMore, true);
        const later = store.groups.list(
          query({ hierarchy: { descendantsOf: A }, after: cursorOf(first.items[0]!, "uid"), offset: 2, limit: 2 }),
        );
        assert.equal(later.totalCount, 6);
        assert.equal(later.items.length, 2);
        const beyond = store.groups.list(query({ hierarchy: { descendantsOf: A }, offset: 100 }));
        assert.deepEqual(beyond, { items: [], hasMore: false, totalCount: 6 });
      });
    });

    describe("groups: paged walks (every page size, every order)", () => {
      const ORDERS: GroupOrder[] = ["uid", "name", "created_at", "updated_at"];
      let all: GroupRecord[];
      beforeEach(() => {
        all = buildPagingTree(store);
      });

      for (const scope of ["all groups", "descendants of the first root"] as const) {
        for (const field of ORDERS) {
          for (const desc of [false, true]) {
            test(`${scope}, order ${field}${desc ? " desc" : ""}: pages concatenate to the full list`, () => {
              const hierarchy: HierarchyFilter = scope === "all groups" ? {} : { descendantsOf: all[0]!.uid };
              const expected = all.filter((g) => scope === "all groups" || g.uid.startsWith(`${all[0]!.uid}/`));
              const n = expected.length;
              const order = { field, desc };

              const full = store.groups.list(query({ hierarchy, order, limit: 10_000 }));
              assert.equal(full.totalCount, n);
              assert.equal(full.hasMore, false);
              assert.deepEqual(
                full.items.map((g) => g.uid),
                expectedOrder(expected, field, desc).map((g) => g.uid),
                "the full list is sorted by the order field, ties broken by uid",
              );

              for (let pageSize = 1; pageSize <= n + 1; pageSize++) {
                const seen: GroupRecord[] = [];
                let after: Cursor | null = null;
                for (let pages = 1; ; pages++) {
                  assert.ok(pages <= n + 1, `page size ${pageSize}: the walk does not end`);
                  const page: ListResult<GroupRecord> = store.groups.list(query({ hierarchy, order, after, limit: pageSize }));
                  assert.equal(page.totalCount, n, `page size ${pageSize}: totalCount on page ${pages}`);
                  seen.push(...page.items);
                  if (!page.hasMore) {
                    assert.ok(page.items.length >= 1 && page.items.length <= pageSize, `page size ${pageSize}: last page size`);
                    break;
                  }
                  assert.equal(page.items.length, pageSize, `page size ${pageSize}: a page with more to come is full`);
                  after = cursorOf(page.items[page.items.length - 1]!, field);
                }
                assert.deepEqual(
                  seen.map((g) => g.uid),
                  full.items.map((g) => g.uid),
                  `page size ${pageSize}: no gaps, no duplicates`,
                );
                assert.deepEqual(seen, full.items);
              }
            });
          }
        }
      }

      for (const field of ORDERS) {
        for (const desc of [false, true]) {
          test(`order ${field}${desc ? " desc" : ""}: offset skips after the position`, () => {
            const order = { field, desc };
            const full = store.groups.list(query({ order, limit: 10_000 })).items;
            const n = full.length;
            for (const offset of [1, 2, 5]) {
              for (const limit of [1, 4]) {
                const first = store.groups.list(query({ order, offset, limit }));
                assert.deepEqual(first.items, full.slice(offset, offset + limit));
                assert.equal(first.hasMore, offset + limit < n);
                assert.equal(first.totalCount, n);
                for (let i = 0; i < n; i++) {
                  const page = store.groups.list(query({ order, after: cursorOf(full[i]!, field), offset, limit }));
                  const start = i + 1 + offset;
                  assert.deepEqual(
                    page.items.map((g) => g.uid),
                    full.slice(start, start + limit).map((g) => g.uid),
                    `after item ${i}, offset ${offset}, limit ${limit}`,
                  );
                  assert.equal(page.hasMore, start + limit < n, `hasMore after item ${i}, offset ${offset}, limit ${limit}`);
                  assert.equal(page.totalCount, n);
                }
              }
            }
          });
        }
      }
    });

    describe("transactions, keys and lifecycle", () => {
      test("a transaction's writes commit together", () => {
        const out = store.transaction(() => {
          store.groups.create(group(A, null, "org"));
          store.groups.create(group(A1, A, "team"));
          return "done";
        });
        assert.equal(out, "done");
        assert.deepEqual(
          store.groups.list(query({})).items.map((g) => g.uid),
          [A, A1],
        );
      });

      test("a failing transaction leaves no write behind, in get, list or totalCount", () => {
        store.groups.create(group(A, null, "org"));
        assert.equal(store.groups.list(query({})).totalCount, 1);
        assert.throws(
          () =>
            store.transaction(() => {
              store.groups.create(group(A1, A, "team"));
              store.groups.create(group(C, null, "other"));
              // Reads inside the transaction see its own writes.
              assert.equal(store.groups.list(query({})).totalCount, 3);
              throw new Error("abort");
            }),
          /abort/,
        );
        assert.equal(store.groups.get(A1), null);
        assert.equal(store.groups.get(C), null);
        const after = store.groups.list(query({}));
        assert.deepEqual(after.items.map((g) => g.uid), [A]);
        assert.equal(after.totalCount, 1);
      });

      test("KeyStore.secret creates once and returns the same value on later calls", () => {
        let made = 0;
        const make = () => {
          made++;
          return Buffer.from(`secret-${made}-${"x".repeat(24)}`);
        };
        const first = store.keys.secret("page-token-key", make);
        const second = store.keys.secret("page-token-key", make);
        assert.equal(made, 1);
        assert.deepEqual(second, first);
        assert.equal(first.toString(), `secret-1-${"x".repeat(24)}`);
        const other = store.keys.secret("signing-key", make);
        assert.equal(other.toString(), `secret-2-${"x".repeat(24)}`);
        assert.deepEqual(store.keys.secret("page-token-key", make), first);
      });

      test("ready until closed; close is idempotent", () => {
        assert.equal(store.ready(), true);
        store.close();
        assert.equal(store.ready(), false);
        store.close();
      });
    });
  });
}

// Hand-built uids for the hierarchy tests. B shares all but the last character
// with A, and A3 all but the last character with A1, so a bare string-prefix
// test would wrongly count them as descendants.
const A = "a".repeat(40);
const B = `${"a".repeat(39)}b`;
const C = "c".repeat(40);
const A1 = `${A}/${"1".repeat(16)}`;
const A1X = `${A1}/${"a".repeat(16)}`;
const A2 = `${A}/${"2".repeat(16)}`;
const A2X = `${A2}/${"b".repeat(16)}`;
const A3 = `${A}/${"1".repeat(15)}2`;
const A3X = `${A3}/${"c".repeat(16)}`;
const B1 = `${B}/${"1".repeat(16)}`;

function hierarchyFixture(): GroupRecord[] {
  return [
    group(A, null, "org"),
    group(A1, A, "team"),
    group(A1X, A1, "svc"),
    group(A2, A, "team"),
    group(A2X, A2, "svc"),
    group(A3, A, "svc"),
    group(A3X, A3, "leaf"),
    group(B, null, "org"),
    group(B1, B, "team"),
    group(C, null, "other org"),
  ];
}

function group(uid: string, parentUid: string | null, name: string, over: Partial<GroupRecord> = {}): GroupRecord {
  return {
    uid,
    parentUid,
    name,
    description: "",
    verified: false,
    resourceLimits: {},
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

function query(
  q: Partial<ListQuery<GroupFilter, GroupOrder>>,
): ListQuery<GroupFilter, GroupOrder> {
  return {
    hierarchy: {},
    filter: {},
    order: { field: "uid", desc: false },
    after: null,
    offset: 0,
    limit: 1_000,
    visibleWithin: null,
    ...q,
  };
}

/** The keyset position of a group, as the service builds it. */
function cursorOf(g: GroupRecord, field: GroupOrder): Cursor {
  const key = field === "name" ? g.name : field === "created_at" ? g.createTime : field === "updated_at" ? g.updateTime : g.uid;
  return { key, uid: g.uid };
}

function sorted(uids: string[]): string[] {
  return [...uids].sort(compareText);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The order the store must produce: the field, ties by uid; desc reverses the whole order. */
function expectedOrder(groups: GroupRecord[], field: GroupOrder, desc: boolean): GroupRecord[] {
  const asc = [...groups].sort((x, y) => {
    const kx = cursorOf(x, field).key;
    const ky = cursorOf(y, field).key;
    const byKey = typeof kx === "number" && typeof ky === "number" ? kx - ky : compareText(String(kx), String(ky));
    return byKey !== 0 ? byKey : compareText(x.uid, y.uid);
  });
  return desc ? asc.reverse() : asc;
}

/** Deterministic 16-hex segments, so the tie-breaking uid order differs from insertion order. */
function* hexSegments(seed: number, length: number): Generator<string> {
  let x = seed;
  for (;;) {
    let out = "";
    while (out.length < length) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      out += (x >>> 8).toString(16).padStart(6, "0");
    }
    yield out.slice(0, length);
  }
}

/**
 * 23 groups under three roots, with duplicated names and many equal
 * create and update times, so every order needs the uid tie-break.
 * Returns them in creation order; the first is the root with descendants.
 */
function buildPagingTree(store: Store): GroupRecord[] {
  const seg = hexSegments(7, 16);
  const rootSeg = hexSegments(11, 40);
  const names = ["ops", "dev", "ops", "web app", "dev", "ops", "data.lake", "ops"];
  const times = [1_000, 1_000, 2_000, 1_000, 3_000, 2_000, 1_000];
  const out: GroupRecord[] = [];
  const add = (parent: GroupRecord | null) => {
    const i = out.length;
    const uid = parent === null ? rootSeg.next().value! : `${parent.uid}/${seg.next().value!}`;
    const t = times[i % times.length]!;
    const g = group(uid, parent?.uid ?? null, names[i % names.length]!, { createTime: t, updateTime: t });
    store.groups.create(g);
    out.push(g);
    return g;
  };
  const root = add(null);
  for (let c = 0; c < 4; c++) {
    const child = add(root);
    for (let gc = 0; gc < 3; gc++) add(child);
  }
  const second = add(null);
  add(second);
  add(second);
  add(null);
  assert.equal(out.length, 21);
  add(out[1]!);
  add(out[17]!);
  assert.equal(out.length, 23);
  // Updates give some groups later, partly equal, update times.
  for (const [i, t] of [
    [0, 9_000],
    [3, 9_000],
    [5, 8_000],
    [8, 9_000],
    [13, 8_000],
    [20, 9_000],
  ] as const) {
    out[i] = store.groups.update(out[i]!.uid, { description: `touched ${i}` }, t);
  }
  return out;
}
