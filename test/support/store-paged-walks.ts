import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type {
  Cursor,
  GroupOrder,
  GroupRecord,
  HierarchyFilter,
  IdentityOrder,
  IdentityRecord,
  ListQuery,
  ListResult,
  RoleBindingOrder,
  RoleBindingRecord,
  RoleOrder,
  RoleRecord,
  Store,
} from "../../src/store/store.js";
import {
  CLAIM_MATCH,
  STATIC_KEYS,
  binding,
  cursorOf,
  expectedOrder,
  group,
  hexSegments,
  identity,
  query,
  role,
  type Orderable,
} from "./store-fixtures.js";

/** What a walk runs over: the records created (as stored after every write) and the root with descendants. */
interface WalkFixture<T> {
  records: T[];
  root: string;
}

/** One narrowing of a list, with the records it must return. */
interface WalkScope<T> {
  label: string;
  narrow(f: WalkFixture<T>): { hierarchy: HierarchyFilter; visibleWithin: readonly string[] | null; expected: T[] };
}

/** How to walk one kind of record. */
interface WalkSpec<T extends Orderable, TOrder extends string> {
  kind: string;
  orders: readonly TOrder[];
  build(store: Store): WalkFixture<T>;
  list(store: Store, q: ListQuery<Record<string, never>, TOrder>): ListResult<T>;
  scopes: readonly WalkScope<T>[];
}

/** Every record of the kind. */
function everything<T extends Orderable>(label = "all"): WalkScope<T> {
  return { label, narrow: (f) => ({ hierarchy: {}, visibleWithin: null, expected: f.records }) };
}

/** The records strictly below the fixture's first root. */
function belowFirstRoot<T extends Orderable>(): WalkScope<T> {
  return {
    label: "descendants of the first root",
    narrow: (f) => ({
      hierarchy: { descendantsOf: f.root },
      visibleWithin: null,
      expected: f.records.filter((r) => r.uid.startsWith(`${f.root}/`)),
    }),
  };
}

/**
 * Registers the paged walks for every kind the store lists: at every page
 * size from 1 to N+1, in every order both ways, the pages concatenate to the
 * full list, which matches an independently computed order (ties by uid).
 */
export function pagedWalkConformance(getStore: () => Store): void {
  describePagedWalks<GroupRecord, GroupOrder>(getStore, {
    kind: "groups",
    orders: ["uid", "name", "created_at", "updated_at"],
    build: (store) => {
      const records = buildPagingTree(store);
      return { records, root: records[0]!.uid };
    },
    list: (store, q) => store.groups.list(q),
    scopes: [everything("all groups"), belowFirstRoot()],
  });
  describePagedWalks<IdentityRecord, IdentityOrder>(getStore, {
    kind: "identities",
    orders: ["uid", "name", "created_at", "updated_at"],
    build: buildIdentityWalk,
    list: (store, q) => store.identities.list(q),
    scopes: [everything(), belowFirstRoot()],
  });
  describePagedWalks<RoleRecord, RoleOrder>(getStore, {
    kind: "roles",
    orders: ["uid", "name", "created_at", "updated_at"],
    build: buildRoleWalk,
    list: (store, q) => store.roles.list(q),
    scopes: [
      everything(),
      belowFirstRoot(),
      {
        label: "visible within the first root (built-in roles included)",
        narrow: (f) => ({
          hierarchy: {},
          visibleWithin: [f.root],
          expected: f.records.filter((r) => r.parentUid === null || r.uid.startsWith(`${f.root}/`)),
        }),
      },
    ],
  });
  describePagedWalks<RoleBindingRecord, RoleBindingOrder>(getStore, {
    kind: "role bindings",
    orders: ["uid", "created_at"],
    build: buildRoleBindingWalk,
    list: (store, q) => store.roleBindings.list(q),
    scopes: [everything(), belowFirstRoot()],
  });
}

function describePagedWalks<T extends Orderable, TOrder extends string>(getStore: () => Store, spec: WalkSpec<T, TOrder>): void {
  const q = (over: Partial<ListQuery<Record<string, never>, TOrder>>) => query<Record<string, never>, TOrder>(over);
  describe(`${spec.kind}: paged walks (every page size, every order)`, () => {
    let fixture: WalkFixture<T>;
    beforeEach(() => {
      fixture = spec.build(getStore());
    });

    for (const scope of spec.scopes) {
      for (const field of spec.orders) {
        for (const desc of [false, true]) {
          test(`${scope.label}, order ${field}${desc ? " desc" : ""}: pages concatenate to the full list`, () => {
            const store = getStore();
            const { hierarchy, visibleWithin, expected } = scope.narrow(fixture);
            const n = expected.length;
            assert.ok(n >= 5, `the fixture puts enough ${spec.kind} in scope to page through (${n})`);
            const order = { field, desc };

            const full = spec.list(store, q({ hierarchy, visibleWithin, order, limit: 10_000 }));
            assert.equal(full.totalCount, n);
            assert.equal(full.hasMore, false);
            assert.deepEqual(
              full.items.map((r) => r.uid),
              expectedOrder(expected, field, desc).map((r) => r.uid),
              "the full list is sorted by the order field, ties broken by uid",
            );
            assert.deepEqual(full.items, expectedOrder(expected, field, desc), "every listed record is as stored");

            for (let pageSize = 1; pageSize <= n + 1; pageSize++) {
              const seen: T[] = [];
              let after: Cursor | null = null;
              for (let pages = 1; ; pages++) {
                assert.ok(pages <= n + 1, `page size ${pageSize}: the walk does not end`);
                const page: ListResult<T> = spec.list(store, q({ hierarchy, visibleWithin, order, after, limit: pageSize }));
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
                seen.map((r) => r.uid),
                full.items.map((r) => r.uid),
                `page size ${pageSize}: no gaps, no duplicates`,
              );
              assert.deepEqual(seen, full.items);
            }
          });
        }
      }
    }

    for (const field of spec.orders) {
      for (const desc of [false, true]) {
        test(`order ${field}${desc ? " desc" : ""}: offset skips after the position`, () => {
          const store = getStore();
          const order = { field, desc };
          const full = spec.list(store, q({ order, limit: 10_000 })).items;
          const n = full.length;
          for (const offset of [1, 2, 5]) {
            for (const limit of [1, 4]) {
              const first = spec.list(store, q({ order, offset, limit }));
              assert.deepEqual(first.items, full.slice(offset, offset + limit));
              assert.equal(first.hasMore, offset + limit < n);
              assert.equal(first.totalCount, n);
              for (let i = 0; i < n; i++) {
                const page = spec.list(store, q({ order, after: cursorOf(full[i]!, field), offset, limit }));
                const start = i + 1 + offset;
                assert.deepEqual(
                  page.items.map((r) => r.uid),
                  full.slice(start, start + limit).map((r) => r.uid),
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
}

/**
 * 23 groups under three roots, with duplicated names and many equal
 * create and update times, so every order needs the uid tie-break.
 * Returns them in creation order; the first is the root with descendants.
 */
export function buildPagingTree(store: Store): GroupRecord[] {
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

/**
 * Where the walks put their records: an index into the paging tree, or -1 for
 * root level. Groups 0..16 and 21 lie in the first root; 17..19 and 22 in the
 * second; 20 is the third.
 */
const OWNERS = [0, 1, -1, 5, 9, 17, 20, 2, 13, -1, 0, 21, 1, -1, 22, 0, 3];

/** Identities in groups across the tree and at root level, both relationship kinds. */
function buildIdentityWalk(store: Store): WalkFixture<IdentityRecord> {
  const groups = buildPagingTree(store);
  const seg = hexSegments(13, 16);
  const rootSeg = hexSegments(17, 40);
  const names = ["ci", "deployer", "ci", "Ada Lovelace", "bot", "ci"];
  const times = [1_000, 2_000, 1_000, 1_000, 3_000];
  const out: IdentityRecord[] = [];
  store.transaction(() => {
    OWNERS.forEach((owner, i) => {
      const parentUid = owner < 0 ? null : groups[owner]!.uid;
      const uid = parentUid === null ? rootSeg.next().value! : `${parentUid}/${seg.next().value!}`;
      const t = times[i % times.length]!;
      const rec = identity(uid, parentUid, names[i % names.length]!, {
        relationship: i % 2 === 0 ? CLAIM_MATCH : STATIC_KEYS,
        email: parentUid === null ? `user${i}@example.com` : "",
        createTime: t,
        updateTime: t,
      });
      store.identities.create(rec);
      out.push(rec);
    });
    for (const [i, t] of [
      [0, 9_000],
      [4, 9_000],
      [7, 8_000],
      [13, 9_000],
    ] as const) {
      out[i] = store.identities.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Custom roles in groups across the tree, and built-in (root-level) roles. */
function buildRoleWalk(store: Store): WalkFixture<RoleRecord> {
  const groups = buildPagingTree(store);
  const seg = hexSegments(19, 16);
  const rootSeg = hexSegments(23, 40);
  const names = ["viewer", "editor", "viewer", "owner", "deployer"];
  const times = [2_000, 1_000, 1_000, 2_000, 3_000, 1_000];
  const out: RoleRecord[] = [];
  store.transaction(() => {
    OWNERS.forEach((owner, i) => {
      const parentUid = owner < 0 ? null : groups[owner]!.uid;
      const uid = parentUid === null ? rootSeg.next().value! : `${parentUid}/${seg.next().value!}`;
      const t = times[i % times.length]!;
      const rec = role(uid, parentUid, names[i % names.length]!, [1 + (i % 3), 10 + i], { createTime: t, updateTime: t });
      store.roles.create(rec);
      out.push(rec);
    });
    for (const [i, t] of [
      [2, 9_000],
      [5, 8_000],
      [10, 9_000],
      [16, 9_000],
    ] as const) {
      out[i] = store.roles.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Bindings at groups across the tree, several per group, with repeated create times. */
function buildRoleBindingWalk(store: Store): WalkFixture<RoleBindingRecord> {
  const groups = buildPagingTree(store);
  const seg = hexSegments(29, 16);
  const rootSeg = hexSegments(31, 40);
  const times = [1_000, 2_000, 1_000, 3_000, 1_000, 2_000];
  const out: RoleBindingRecord[] = [];
  store.transaction(() => {
    const people = [0, 1, 2].map((i) => identity(rootSeg.next().value!, null, `person ${i}`));
    for (const p of people) store.identities.create(p);
    const roles = [role(rootSeg.next().value!, null, "viewer"), role(`${groups[0]!.uid}/${seg.next().value!}`, groups[0]!.uid, "ops")];
    for (const r of roles) store.roles.create(r);
    const at = OWNERS.map((owner) => (owner < 0 ? 4 : owner));
    const bindings = [...at, 0, 4, 17].map((g, i) =>
      binding(`${groups[g]!.uid}/${seg.next().value!}`, groups[g]!.uid, people[i % 3]!.uid, roles[i % 2]!.uid, times[i % times.length]!),
    );
    // One batch and single creates both build the fixture.
    store.roleBindings.create(bindings.slice(0, 10));
    for (const b of bindings.slice(10)) store.roleBindings.create([b]);
    out.push(...bindings);
  });
  return { records: out, root: groups[0]!.uid };
}
