/**
 * The List contract every collection of the API keeps, written once and
 * driven by a table: each resource is a row naming its REST collection, how
 * its items are made, its order_by fields and default order, its own filters
 * and who may list it. describeListContract(row) declares the tests; what
 * only one resource does stays beside the call, in the callback that
 * receives the seeded items.
 */
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { assertPagedWalks, expectedOrder, walkPages } from "./paged-walk.js";
import { as, builtinRole, createCaller, ok } from "./principals.js";
import { createStranger } from "./resource-suite.js";
import { assertViolations } from "./rest-errors.js";
import { createGroup, rest, type TestServer } from "./server.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/** Where a resource's items are. */
export interface Seeded {
  /** The group every item is at or below, and nothing else of the resource. */
  root: string;
  /** A group below root holding some of the items: where the contract binds its lister. */
  team?: string;
  /** The items as their Create (or last Update) returned them. */
  items: Json[];
}

/**
 * How the contract makes a resource's items itself, under a fresh
 * organization and its team. When updated_at is an order field, it then
 * moves the update times of a few items by PATCHing their description.
 */
export interface Plan {
  /** Creates the i-th item, called name (a resource without names ignores it), under the group parent. */
  create(parent: string, name: string, i: number): Promise<Json>;
  /** The items' names, when NAMES do not suit the resource; at most PLAN.length. */
  names?: readonly string[];
  /** Moves the file's clock. */
  advance(ms: number): void;
}

/**
 * One resource's row of the table. The response field holding the items is
 * the collection's last path segment (roleBindings); a resource ordered by
 * name also filters by it, exactly.
 */
export interface ListContract {
  /** The resource in words, for test and group names. */
  resource: string;
  srv: TestServer;
  /** The REST collection, e.g. /iam/v2beta1/roleBindings. */
  path: string;
  /** The contract's plan, or the resource's own seeding. */
  seed: Plan | (() => Promise<Seeded>);
  /** The order_by fields (default USUAL_ORDERS). */
  orderFields?: readonly string[];
  /** The order without order_by (default uid), e.g. "created_at desc". */
  defaultOrder?: string;
  /** Order fields of other resources that order_by must refuse here. */
  unsortable: readonly string[];
  /** Query parameters every request of the contract carries (tags' include flags). */
  always?: string;
  /** The resource's own filters: a query added to the scope, and which items it keeps. */
  filters?: (listed: Listed) => [query: string, keep: (item: Json) => boolean][];
  /** Malformed values of the resource's own filters, and the fields INVALID_ARGUMENT names. */
  invalid?: readonly [query: string, fields: string[]][];
  /** A built-in role that lists the items: bound at the team, its holder sees only the team's. */
  lister?: string;
  /** Checks or records every item a List of the contract returns (hydrated references, no secret). */
  check?(item: Json): unknown;
}

/** The seeded items and ways to list them, for the resource's own tests beside the contract. */
export interface Listed extends Seeded {
  /** uidp.descendants_of the root: the filter that lists exactly the items. */
  scope: string;
  /** The body of one page of up to 200 items, which must hold every match; each item checked. */
  list(query: string, headers?: Record<string, string>): Promise<Json>;
  /** The sorted uids list() returns. */
  uids(query: string, headers?: Record<string, string>): Promise<string[]>;
}

/**
 * Where the plan puts each item (the organization or its team) and how far
 * the clock moves first: equal times, like the names repeated across the two
 * groups, make the orders rely on their uid tie-break.
 */
const PLAN: ["root" | "team", number][] = [
  ["root", 0],
  ["root", 1],
  ["team", 0],
  ["root", 0],
  ["team", 2],
  ["root", 1],
  ["team", 0],
];
/** Distinct within each group, as some resources require, and repeated across them. */
const NAMES = ["alpha", "beta", "alpha", "gamma", "beta", "delta", "delta"];
/** The items the plan touches after the last create, so that updated_at orders unlike created_at. */
const TOUCHED = [0, 3];
/** The order_by fields of most resources. */
const USUAL_ORDERS = ["uid", "name", "created_at", "updated_at"];

const parentOf = (uid: string) => uid.slice(0, uid.lastIndexOf("/"));
const atOrBelow = (uid: string, group: string) => uid === group || uid.startsWith(`${group}/`);
const uidsOf = (items: readonly Json[]) => items.map((i: Json) => i.uid as string);
const sortedUids = (items: readonly Json[]) => uidsOf(items).sort();

/** Flips one character in the middle of a token (every middle base64url character carries 6 full bits). */
function tamper(token: string): string {
  const i = Math.floor(token.length / 2);
  return token.slice(0, i) + (token[i] === "A" ? "B" : "A") + token.slice(i + 1);
}

async function seedPlan(row: ListContract, plan: Plan, orderFields: readonly string[]): Promise<Seeded> {
  const root = (await createGroup(row.srv.url, null, `${row.resource} list org`)).uid;
  const team = (await createGroup(row.srv.url, root, `${row.resource} list team`)).uid;
  const names = plan.names ?? NAMES;
  assert.ok(names.length <= PLAN.length, "the plan places every name");
  const items: Json[] = [];
  for (const [i, name] of names.entries()) {
    const [where, step] = PLAN[i]!;
    plan.advance(step);
    items.push(await plan.create(where === "root" ? root : team, name, i));
  }
  if (orderFields.includes("updated_at")) {
    plan.advance(10);
    for (const i of TOUCHED) items[i] = await ok(rest(row.srv.url, "PATCH", `${row.path}/${items[i].uid}`, { description: "touched" }));
  }
  return { root, team, items };
}

/** Declares the List contract of one resource, then the resource's own list tests given by more. */
export function describeListContract(row: ListContract, more?: (listed: Listed) => void): void {
  const { srv, path, orderFields = USUAL_ORDERS, defaultOrder = "uid" } = row;
  const itemsKey = path.slice(path.lastIndexOf("/") + 1);
  /** A query with the parameters every request carries. */
  const q = (query: string) => (row.always ? `${query}&${row.always}` : query);
  const get = (query: string, headers?: Record<string, string>) => rest(srv.url, "GET", `${path}?${q(query)}`, undefined, headers);

  describe("list: the List contract", () => {
    const listed = {} as Listed;
    before(async () => {
      const seeded = typeof row.seed === "function" ? await row.seed() : await seedPlan(row, row.seed, orderFields);
      assert.ok(seeded.items.length >= 6, "enough items for pages, skips and ties");
      const list = async (query: string, headers?: Record<string, string>) => {
        const body = await ok(rest(srv.url, "GET", `${path}?${query}&page_size=200`, undefined, headers));
        assert.equal(body.totalCount, String(body[itemsKey].length), `${query}: totalCount`);
        assert.equal(body.skipped, 0);
        assert.equal("nextPageToken" in body, false, `${query}: one page`);
        for (const item of body[itemsKey]) row.check?.(item);
        return body;
      };
      Object.assign(listed, seeded, {
        scope: `uidp.descendants_of=${seeded.root}`,
        list,
        uids: async (query: string, headers?: Record<string, string>) => sortedUids((await list(query, headers))[itemsKey]),
      });
    });
    /** The sorted uids of a query with the parameters every request carries. */
    const uids = (query: string, headers?: Record<string, string>) => listed.uids(q(query), headers);

    test(`the default order is ${defaultOrder}, on one page and page by page`, async () => {
      const [field, direction] = defaultOrder.split(" ");
      const want = expectedOrder(listed.items, field!, direction === "desc");
      assert.deepEqual(uidsOf((await listed.list(q(listed.scope)))[itemsKey]), want);
      assert.deepEqual(await walkPages(srv.url, path, itemsKey, q(listed.scope), 2, listed.items.length), want);
    });

    test("uidp: descendants_of the organization, children_of each parent, ids", async () => {
      const { items } = listed;
      assert.deepEqual(await uids(listed.scope), sortedUids(items));
      for (const parent of new Set(items.map((i) => parentOf(i.uid)))) {
        assert.deepEqual(await uids(`uidp.children_of=${parent}`), sortedUids(items.filter((i) => parentOf(i.uid) === parent)), parent);
      }
      const ends = [items[0], items.at(-1)];
      assert.deepEqual(await uids(`uidp.ids=${ends[0].uid}&uidp.ids=${ends[1].uid}`), sortedUids(ends));
    });

    if (orderFields.includes("name")) {
      test("name matches exactly, alone and with another filter; a prefix of a name matches nothing", async () => {
        const { items, scope } = listed;
        const { name, uid } = items[0];
        const namesakes = items.filter((i) => i.name === name);
        assert.ok(namesakes.length > 1, "the name repeats");
        assert.deepEqual(await uids(`${scope}&name=${encodeURIComponent(name)}`), sortedUids(namesakes));
        const parent = parentOf(uid);
        const sameParent = namesakes.filter((i) => parentOf(i.uid) === parent);
        assert.deepEqual(await uids(`uidp.children_of=${parent}&name=${encodeURIComponent(name)}`), sortedUids(sameParent));
        assert.deepEqual(await uids(`${scope}&name=${encodeURIComponent(name.slice(0, -1))}`), []);
      });
    }

    const { filters } = row;
    if (filters) {
      test("the resource's own filters list exactly the items they keep", async () => {
        for (const [query, keep] of filters(listed)) {
          assert.deepEqual(await uids(`${listed.scope}&${query}`), sortedUids(listed.items.filter(keep)), query);
        }
      });
    }

    test("skip omits the first results and is echoed; totalCount ignores page_size and skip", async () => {
      const { items, scope } = listed;
      for (const field of orderFields) {
        const body = await ok(get(`${scope}&order_by=${field}&skip=2&page_size=3`));
        assert.deepEqual(uidsOf(body[itemsKey]), expectedOrder(items, field, false).slice(2, 5), field);
        assert.equal(body.skipped, 2);
        assert.equal(body.totalCount, String(items.length));
        assert.equal("nextPageToken" in body, items.length > 5);
      }
    });

    test("malformed filters, orders, page sizes, skips and page tokens are INVALID_ARGUMENT naming the parameter", async () => {
      const [first] = orderFields;
      const orders = ["bogus", `${first} sideways`, `${first} desc asc`, `${first},${orderFields[1]}`, ...row.unsortable];
      const cases: (readonly [string, string[]])[] = [
        ["uidp.descendants_of=nope", ["uidp.descendants_of"]],
        ["uidp.children_of=x", ["uidp.children_of"]],
        ["uidp.ids=X", ["uidp.ids"]],
        ["page_size=-1", ["page_size"]],
        ["skip=-1", ["skip"]],
        ["page_token=not-a-token", ["page_token"]],
        ...orders.map((order): [string, string[]] => [`order_by=${encodeURIComponent(order)}`, ["order_by"]]),
        ...(row.invalid ?? []),
      ];
      for (const [query, fields] of cases) assertViolations(await get(query), fields);
    });

    test("a page token is bound to its query: with another order or filter, or tampered, it is INVALID_ARGUMENT", async () => {
      const { items, scope, root } = listed;
      const [first] = orderFields;
      const token = (await ok(get(`${scope}&order_by=${first}&page_size=1`))).nextPageToken;
      assert.ok(token);
      const next = await ok(get(`${scope}&order_by=${first}&page_size=1&page_token=${encodeURIComponent(token)}`));
      assert.deepEqual(uidsOf(next[itemsKey]), expectedOrder(items, first!, false).slice(1, 2));
      for (const query of [`${scope}&order_by=${first}%20desc`, `uidp.children_of=${root}&order_by=${first}`, `order_by=${first}`]) {
        assertViolations(await get(`${query}&page_size=1&page_token=${encodeURIComponent(token)}`), ["page_token"]);
      }
      assertViolations(await get(`${scope}&order_by=${first}&page_size=1&page_token=${encodeURIComponent(tamper(token))}`), ["page_token"]);
    });

    for (const field of orderFields) {
      test(`order_by=${field}, ascending and descending: every page size from 1 to N+1 walks the full list`, async () => {
        await assertPagedWalks(srv.url, path, itemsKey, q(listed.scope), listed.items, [field]);
      });
    }

    more?.(listed);

    // Last: the callers these tests make (identities, and their role bindings) are items of some resources.
    const { lister } = row;
    if (lister) {
      test(`the list is narrowed to where the caller may list: a ${lister} at the team sees the team's items, a caller bound nowhere none`, async () => {
        const { items, root, team, scope } = listed;
        assert.ok(team, "a seed with a lister names its team");
        // Root-level items (the built-in roles) are everyone's; the rest must be exactly what the caller may see.
        const below = async (query: string, headers: Record<string, string>) => (await uids(query, headers)).filter((u) => u.includes("/"));
        const teamLister = await createCaller(srv, root, `${row.resource} team lister`, await builtinRole(srv, lister), team);
        const teams = sortedUids(items.filter((i) => atOrBelow(i.uid, team)));
        assert.ok(teams.length > 0 && teams.length < items.length);
        assert.deepEqual(await uids(scope, as(teamLister)), teams);
        assert.deepEqual(await below("", as(teamLister)), teams);
        const nobody = await createCaller(srv, root, `${row.resource} nobody`, null);
        assert.deepEqual(await uids(scope, as(nobody)), []);
        assert.deepEqual(await below("", as(nobody)), []);
      });
    }

    test("a caller of another organization lists none of them", async () => {
      const { root, scope } = listed;
      const stranger = await createStranger(srv, row.resource);
      assert.deepEqual(await uids(scope, as(stranger)), []);
      assert.deepEqual(
        (await uids("", as(stranger))).filter((u) => atOrBelow(u, root)),
        [],
      );
    });
  });
}
