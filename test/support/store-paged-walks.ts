import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type {
  AccountAssociationOrder,
  AccountAssociationRecord,
  Cursor,
  GroupInviteOrder,
  GroupInviteRecord,
  GroupOrder,
  GroupRecord,
  HierarchyFilter,
  IdentityOrder,
  IdentityProviderOrder,
  IdentityProviderRecord,
  IdentityRecord,
  ListQuery,
  ListResult,
  RoleBindingOrder,
  RoleBindingRecord,
  RoleOrder,
  RoleRecord,
  Store,
} from "../../src/store/store.js";
import { cursorOf, expectedOrder, query, type Orderable } from "./store-fixtures.js";
import {
  buildAccountAssociationWalk,
  buildGroupInviteWalk,
  buildIdentityProviderWalk,
  buildIdentityWalk,
  buildPagingTree,
  buildRoleBindingWalk,
  buildRoleWalk,
  type WalkFixture,
} from "./store-walk-fixtures.js";

/** One narrowing of a list, with the records it must return. */
export interface WalkScope<T> {
  label: string;
  narrow(f: WalkFixture<T>): { hierarchy: HierarchyFilter; visibleWithin: readonly string[] | null; expected: T[] };
}

/** How to walk one kind of record. */
export interface WalkSpec<T extends Orderable, TOrder extends string> {
  kind: string;
  orders: readonly TOrder[];
  build(store: Store): Promise<WalkFixture<T>>;
  list(store: Store, q: ListQuery<Record<string, never>, TOrder>): Promise<ListResult<T>>;
  scopes: readonly WalkScope<T>[];
}

/** Every record of the kind. */
export function everything<T extends Orderable>(label = "all"): WalkScope<T> {
  return { label, narrow: (f) => ({ hierarchy: {}, visibleWithin: null, expected: f.records }) };
}

/** The records strictly below the fixture's first root. */
export function belowFirstRoot<T extends Orderable>(): WalkScope<T> {
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
    build: async (store) => {
      const records = await buildPagingTree(store);
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
  describePagedWalks<IdentityProviderRecord, IdentityProviderOrder>(getStore, {
    kind: "identity providers",
    orders: ["uid", "name", "created_at", "updated_at"],
    build: buildIdentityProviderWalk,
    list: (store, q) => store.identityProviders.list(q),
    scopes: [everything(), belowFirstRoot()],
  });
  describePagedWalks<AccountAssociationRecord, AccountAssociationOrder>(getStore, {
    kind: "account associations",
    orders: ["group", "uid", "name", "created_at", "updated_at"],
    build: buildAccountAssociationWalk,
    list: (store, q) => store.accountAssociations.list(q),
    scopes: [
      everything(),
      belowFirstRoot(),
      {
        label: "visible within the first root (its own association included)",
        narrow: (f) => ({
          hierarchy: {},
          visibleWithin: [f.root],
          expected: f.records.filter((r) => r.uid === f.root || r.uid.startsWith(`${f.root}/`)),
        }),
      },
    ],
  });
  describePagedWalks<GroupInviteRecord, GroupInviteOrder>(getStore, {
    kind: "group invites",
    orders: ["uid", "created_at", "expiration_time"],
    build: buildGroupInviteWalk,
    list: (store, q) => store.groupInvites.list(q),
    scopes: [everything(), belowFirstRoot()],
  });
}

/** Registers the paged walks of one kind (see pagedWalkConformance). */
export function describePagedWalks<T extends Orderable, TOrder extends string>(getStore: () => Store, spec: WalkSpec<T, TOrder>): void {
  const q = (over: Partial<ListQuery<Record<string, never>, TOrder>>) => query<Record<string, never>, TOrder>(over);
  describe(`${spec.kind}: paged walks (every page size, every order)`, () => {
    let fixture: WalkFixture<T>;
    beforeEach(async () => {
      fixture = await spec.build(getStore());
    });

    for (const scope of spec.scopes) {
      for (const field of spec.orders) {
        for (const desc of [false, true]) {
          test(`${scope.label}, order ${field}${desc ? " desc" : ""}: pages concatenate to the full list`, async () => {
            const store = getStore();
            const { hierarchy, visibleWithin, expected } = scope.narrow(fixture);
            const n = expected.length;
            assert.ok(n >= 5, `the fixture puts enough ${spec.kind} in scope to page through (${n})`);
            const order = { field, desc };

            const full = await spec.list(store, q({ hierarchy, visibleWithin, order, limit: 10_000 }));
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
                const page: ListResult<T> = await spec.list(store, q({ hierarchy, visibleWithin, order, after, limit: pageSize }));
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
        test(`order ${field}${desc ? " desc" : ""}: offset skips after the position`, async () => {
          const store = getStore();
          const order = { field, desc };
          const full = (await spec.list(store, q({ order, limit: 10_000 }))).items;
          const n = full.length;
          for (const offset of [1, 2, 5]) {
            for (const limit of [1, 4]) {
              const first = await spec.list(store, q({ order, offset, limit }));
              assert.deepEqual(first.items, full.slice(offset, offset + limit));
              assert.equal(first.hasMore, offset + limit < n);
              assert.equal(first.totalCount, n);
              for (let i = 0; i < n; i++) {
                const page = await spec.list(store, q({ order, after: cursorOf(full[i]!, field), offset, limit }));
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
