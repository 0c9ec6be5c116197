import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, test } from "node:test";
import { AlreadyExistsError, CancelledError, FailedPreconditionError, NotFoundError } from "../../src/domain/errors.js";
import { PART_NAMES, STORE_PARTS } from "../../src/store/parts.js";
import type { GroupFilter, HierarchyFilter, SigningKeyRecord, Store, StoreParts } from "../../src/store/store.js";
import { VERSIONED_TABLES } from "../../src/store/versions.js";
import { advisoryConformance } from "./store-conformance-advisories.js";
import { iamConformance } from "./store-conformance-iam.js";
import { moreConformance } from "./store-conformance-more.js";
import { registryConformance } from "./store-conformance-registry.js";
import { signInConformance } from "./store-conformance-sign-in.js";
import { subscriptionConformance } from "./store-conformance-subscriptions.js";
import { A, A1, A1X, A2, A2X, A3, A3X, B, B1, C, cursorOf, group, hierarchyFixture, query, sorted } from "./store-fixtures.js";
import { pagedWalkConformance } from "./store-paged-walks.js";

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
    afterEach(async () => {
      await store.close();
    });

    describe("groups: create, get, update, delete", () => {
      test("get returns exactly what create stored, and null when absent", async () => {
        const g = group(A, null, "acme corp", { description: "the org", verified: true, createTime: 1_000, updateTime: 2_000 });
        const limited = { ...g, resourceLimits: { clusters: 2, repositories: 10 } };
        await store.groups.create(limited);
        assert.deepEqual(await store.groups.get(A), limited);
        assert.equal(await store.groups.get(C), null);
        assert.equal(await store.groups.get(`${A}/${"0".repeat(16)}`), null);
      });

      test("create under a missing parent throws NotFoundError and stores nothing", async () => {
        const orphan = group(`${C}/${"1".repeat(16)}`, C, "orphan");
        await assert.rejects(async () => store.groups.create(orphan), NotFoundError);
        assert.equal(await store.groups.get(orphan.uid), null);
      });

      test("create with a taken uid throws AlreadyExistsError and keeps the first", async () => {
        await store.groups.create(group(A, null, "first"));
        await assert.rejects(async () => store.groups.create(group(A, null, "second")), AlreadyExistsError);
        assert.equal((await store.groups.get(A))?.name, "first");
      });

      test("update returns the changed group, moves updateTime, and keeps the rest", async () => {
        const g = group(A, null, "before", { description: "kept", createTime: 1_000, updateTime: 1_000 });
        await store.groups.create(g);
        const renamed = await store.groups.update(A, { name: "after" }, 5_000);
        assert.deepEqual(renamed, { ...g, name: "after", updateTime: 5_000 });
        assert.deepEqual(await store.groups.get(A), renamed);

        const described = await store.groups.update(A, { description: "new text" }, 6_000);
        assert.deepEqual(described, { ...g, name: "after", description: "new text", updateTime: 6_000 });
        assert.deepEqual(await store.groups.get(A), described);
      });

      test("update of a missing group throws NotFoundError", async () => {
        await assert.rejects(async () => store.groups.update(A, { name: "x y z" }, 1), NotFoundError);
        assert.equal(await store.groups.get(A), null);
      });

      test("delete of a group with child groups fails with RESOURCE_NOT_EMPTY naming groups", async () => {
        await store.groups.create(group(A, null, "org"));
        await store.groups.create(group(A1, A, "team"));
        await assert.rejects(
          async () => store.groups.delete(A),
          (err: unknown) => {
            assert.ok(err instanceof FailedPreconditionError, `expected FailedPreconditionError, got ${String(err)}`);
            assert.equal(err.preconditionViolations.length, 1);
            assert.equal(err.preconditionViolations[0]!.type, "RESOURCE_NOT_EMPTY");
            assert.match(err.preconditionViolations[0]!.description, /groups/);
            return true;
          },
        );
        assert.equal((await store.groups.get(A))?.name, "org");
        assert.equal((await store.groups.get(A1))?.name, "team");

        await store.groups.delete(A1);
        await store.groups.delete(A);
        assert.equal(await store.groups.get(A), null);
        assert.equal(await store.groups.get(A1), null);
      });

      test("delete of a missing group throws NotFoundError", async () => {
        await assert.rejects(async () => store.groups.delete(A), NotFoundError);
        await store.groups.create(group(A, null, "org"));
        await store.groups.delete(A);
        await assert.rejects(async () => store.groups.delete(A), NotFoundError);
      });
    });

    describe("groups: hierarchy filters and visibility", () => {
      beforeEach(async () => {
        for (const g of hierarchyFixture()) await store.groups.create(g);
      });

      const uidsOf = async (hierarchy: HierarchyFilter, filter: GroupFilter = {}, visibleWithin: readonly string[] | null = null) => {
        const r = await store.groups.list(query({ hierarchy, filter, visibleWithin }));
        assert.equal(r.hasMore, false);
        assert.equal(r.totalCount, r.items.length);
        return r.items.map((g) => g.uid);
      };

      test("no filter lists every group in uid order", async () => {
        assert.deepEqual(await uidsOf({}), sorted(hierarchyFixture().map((g) => g.uid)));
      });

      test("descendantsOf is every level below, never the group itself nor a prefix-sharing sibling", async () => {
        // B is A with its last character changed; A3 is A1 with its last character changed.
        assert.deepEqual(await uidsOf({ descendantsOf: A }), sorted([A1, A1X, A2, A2X, A3, A3X]));
        assert.deepEqual(await uidsOf({ descendantsOf: A1 }), [A1X]);
        assert.deepEqual(await uidsOf({ descendantsOf: B }), [B1]);
        assert.deepEqual(await uidsOf({ descendantsOf: A1X }), []);
        assert.deepEqual(await uidsOf({ descendantsOf: `${A}/${"9".repeat(16)}` }), []);
      });

      test("childrenOf is exactly one level below", async () => {
        assert.deepEqual(await uidsOf({ childrenOf: A }), sorted([A1, A2, A3]));
        assert.deepEqual(await uidsOf({ childrenOf: A1 }), [A1X]);
        assert.deepEqual(await uidsOf({ childrenOf: C }), []);
      });

      test("ancestorsOf is every proper ancestor", async () => {
        assert.deepEqual(await uidsOf({ ancestorsOf: A1X }), sorted([A, A1]));
        assert.deepEqual(await uidsOf({ ancestorsOf: A3X }), sorted([A, A3]));
        assert.deepEqual(await uidsOf({ ancestorsOf: A }), []);
      });

      test("inRoot is the root organizations only", async () => {
        assert.deepEqual(await uidsOf({ inRoot: true }), sorted([A, B, C]));
      });

      test("ids is exactly the listed groups that exist", async () => {
        assert.deepEqual(await uidsOf({ ids: [A1, B, `${C}/${"7".repeat(16)}`] }), sorted([A1, B]));
      });

      test("the name filter matches exactly and combines with hierarchy filters", async () => {
        assert.deepEqual(await uidsOf({}, { name: "team" }), sorted([A1, A2, B1]));
        assert.deepEqual(await uidsOf({ descendantsOf: A }, { name: "team" }), sorted([A1, A2]));
        assert.deepEqual(await uidsOf({ descendantsOf: A }, { name: "svc" }), sorted([A1X, A2X, A3]));
        assert.deepEqual(await uidsOf({ childrenOf: A }, { name: "svc" }), [A3]);
        assert.deepEqual(await uidsOf({ descendantsOf: A }, { name: "tea" }), []);
      });

      test("visibleWithin narrows to groups at or below the listed uids", async () => {
        assert.deepEqual(await uidsOf({}, {}, [A1]), sorted([A1, A1X]));
        assert.deepEqual(await uidsOf({}, {}, [A1, C]), sorted([A1, A1X, C]));
        assert.deepEqual(await uidsOf({}, {}, [B]), sorted([B, B1]));
        assert.deepEqual(await uidsOf({ descendantsOf: A }, {}, [A]), sorted([A1, A1X, A2, A2X, A3, A3X]));
        assert.deepEqual(await uidsOf({ descendantsOf: A }, {}, [B]), []);
        assert.deepEqual(await uidsOf({ descendantsOf: A }, { name: "svc" }, [A1]), [A1X]);
      });

      test("visibleWithin [] sees nothing and counts nothing", async () => {
        const r = await store.groups.list(query({ visibleWithin: [] }));
        assert.deepEqual(r, { items: [], hasMore: false, totalCount: 0 });
      });

      test("totalCount counts every match regardless of after, offset and limit", async () => {
        const first = await store.groups.list(query({ hierarchy: { descendantsOf: A }, limit: 1 }));
        assert.equal(first.totalCount, 6);
        assert.equal(first.items.length, 1);
        assert.equal(first.hasMore, true);
        const later = await store.groups.list(
          query({ hierarchy: { descendantsOf: A }, after: cursorOf(first.items[0]!, "uid"), offset: 2, limit: 2 }),
        );
        assert.equal(later.totalCount, 6);
        assert.equal(later.items.length, 2);
        const beyond = await store.groups.list(query({ hierarchy: { descendantsOf: A }, offset: 100 }));
        assert.deepEqual(beyond, { items: [], hasMore: false, totalCount: 6 });
      });
    });

    iamConformance(() => store);
    moreConformance(() => store);
    registryConformance(() => store);
    pagedWalkConformance(() => store);
    advisoryConformance(() => store);
    signInConformance(() => store);
    subscriptionConformance(() => store);

    describe("parts", () => {
      test("every part STORE_PARTS declares answers each of its declared methods, outside and inside a transaction", async () => {
        const missing = (parts: StoreParts) =>
          PART_NAMES.flatMap((name) =>
            Object.keys(STORE_PARTS[name].methods)
              .filter((method) => typeof Reflect.get(parts[name], method) !== "function")
              .map((method) => `${name}.${method}`),
          );
        assert.deepEqual(missing(store), []);
        assert.deepEqual(await store.transaction(async (tx) => missing(tx)), []);
        assert.deepEqual(Object.keys(await store.readVersions()).sort(), [...VERSIONED_TABLES].sort());
        for (const name of PART_NAMES) {
          const { table, cached } = STORE_PARTS[name];
          assert.ok(table === null ? !cached : VERSIONED_TABLES.includes(table), `${name}'s table is versioned, or the part is not cached`);
        }
      });
    });

    describe("transactions, keys and lifecycle", () => {
      test("a call whose signal has aborted does nothing and rejects: DEADLINE_EXCEEDED for a timeout, CANCELLED otherwise", async () => {
        const cancelled = new AbortController();
        cancelled.abort();
        await assert.rejects(
          async () => store.groups.create(group(A, null, "org"), cancelled.signal),
          (err: unknown) => err instanceof CancelledError && err.reason === "CANCELLED",
        );
        assert.equal(await store.groups.get(A), null, "nothing was written");
        const timedOut = AbortSignal.timeout(0);
        await new Promise((resolve) => setTimeout(resolve, 5));
        let ran = false;
        await assert.rejects(
          async () =>
            store.transaction(async (tx) => {
              ran = true;
              await tx.groups.create(group(A, null, "org"));
            }, timedOut),
          (err: unknown) => err instanceof CancelledError && err.reason === "DEADLINE_EXCEEDED",
        );
        assert.equal(ran, false, "the transaction function never ran");
        assert.equal(await store.groups.get(A), null);
        const live = new AbortController();
        await store.groups.create(group(A, null, "org"), live.signal);
        assert.equal((await store.groups.list(query({}), live.signal)).totalCount, 1, "a live signal changes nothing");
      });

      test("a transaction's writes commit together", async () => {
        const out = await store.transaction(async (tx) => {
          await tx.groups.create(group(A, null, "org"));
          await tx.groups.create(group(A1, A, "team"));
          return "done";
        });
        assert.equal(out, "done");
        assert.deepEqual(
          (await store.groups.list(query({}))).items.map((g) => g.uid),
          [A, A1],
        );
      });

      test("a read outside an open transaction never sees its uncommitted writes", async () => {
        let release!: () => void;
        const held = new Promise<void>((resolve) => (release = resolve));
        let wrote!: () => void;
        const written = new Promise<void>((resolve) => (wrote = resolve));
        let released = false;
        const tx = store.transaction(async (t) => {
          await t.groups.create(group(A, null, "org"));
          wrote();
          await held;
        });
        await written;
        // An engine may make the read wait for the commit, or answer from before it; never from inside it.
        const outside = store.groups.get(A).then((g) => ({ g, released }));
        await new Promise((resolve) => setTimeout(resolve, 50));
        released = true;
        release();
        await tx;
        const seen = await outside;
        if (!seen.released) assert.equal(seen.g, null, "a read answered before the commit must not see the row");
        assert.equal((await store.groups.get(A))?.name, "org");
      });

      test("concurrent transactions each commit their own writes", async () => {
        await store.groups.create(group(A, null, "org"));
        const children = [A1, A2, A3];
        await Promise.all(
          children.map((uid, i) =>
            store.transaction(async (tx) => {
              await tx.groups.create(group(uid, A, `team ${i}`));
              assert.equal((await tx.groups.get(uid))?.name, `team ${i}`);
            }),
          ),
        );
        assert.deepEqual(
          (await store.groups.list(query({ hierarchy: { childrenOf: A } }))).items.map((g) => g.uid),
          sorted(children),
        );
      });

      test("a failing transaction leaves no write behind, in get, list or totalCount", async () => {
        await store.groups.create(group(A, null, "org"));
        assert.equal((await store.groups.list(query({}))).totalCount, 1);
        await assert.rejects(
          async () =>
            store.transaction(async (tx) => {
              await tx.groups.create(group(A1, A, "team"));
              await tx.groups.create(group(C, null, "other"));
              // Reads inside the transaction see its own writes.
              assert.equal((await tx.groups.list(query({}))).totalCount, 3);
              throw new Error("abort");
            }),
          /abort/,
        );
        assert.equal(await store.groups.get(A1), null);
        assert.equal(await store.groups.get(C), null);
        const after = await store.groups.list(query({}));
        assert.deepEqual(
          after.items.map((g) => g.uid),
          [A],
        );
        assert.equal(after.totalCount, 1);
      });

      test("KeyStore.secret creates once and returns the same value on later calls", async () => {
        let made = 0;
        const make = () => {
          made++;
          return Buffer.from(`secret-${made}-${"x".repeat(24)}`);
        };
        const first = await store.keys.secret("page-token-key", make);
        const second = await store.keys.secret("page-token-key", make);
        assert.equal(made, 1);
        assert.deepEqual(second, first);
        assert.equal(first.toString(), `secret-1-${"x".repeat(24)}`);
        const other = await store.keys.secret("signing-key", make);
        assert.equal(other.toString(), `secret-2-${"x".repeat(24)}`);
        assert.deepEqual(await store.keys.secret("page-token-key", make), first);
      });

      test("signing keys come back exactly as added, oldest first; a taken kid throws AlreadyExistsError", async () => {
        assert.deepEqual(await store.keys.signingKeys(), []);
        const key = (kid: string, createTime: number): SigningKeyRecord => ({
          kid,
          privateJwk: JSON.stringify({ kty: "EC", crv: "P-256", kid, x: `x-${kid}`, y: `y-${kid}`, d: `d-${kid}` }),
          publicJwk: JSON.stringify({ kty: "EC", crv: "P-256", kid, x: `x-${kid}`, y: `y-${kid}` }),
          createTime,
        });
        // Kids in reverse alphabetical order, and two keys in one millisecond: insertion order decides.
        const added = [key("zz-first", 1_000), key("mm-second", 2_000), key("aa-third", 2_000)];
        for (const k of added) await store.keys.addSigningKey(k);
        assert.deepEqual(await store.keys.signingKeys(), added);
        await assert.rejects(async () => store.keys.addSigningKey(key("mm-second", 3_000)), AlreadyExistsError);
        assert.deepEqual(await store.keys.signingKeys(), added);

        // Retiring keeps the key's place and public half, erases its private half; the newest (signing) key cannot go.
        assert.equal(await store.keys.retireSigningKey("mm-second", 5_000), "retired");
        assert.equal(await store.keys.retireSigningKey("mm-second", 6_000), "already-retired");
        await assert.rejects(async () => store.keys.retireSigningKey("aa-third", 5_000), FailedPreconditionError);
        await assert.rejects(async () => store.keys.retireSigningKey("no-such-kid", 5_000), NotFoundError);
        const retired = { ...added[1]!, privateJwk: "", retireTime: 5_000 };
        assert.deepEqual(await store.keys.signingKeys(), [added[0], retired, added[2]]);
        // In one transaction with its successor, the newest key can be retired.
        await store.transaction(async (tx) => {
          await tx.keys.addSigningKey(key("fourth", 7_000));
          await tx.keys.retireSigningKey("aa-third", 7_000);
        });
        assert.deepEqual(
          (await store.keys.signingKeys()).map((k) => [k.kid, k.retireTime]),
          [
            ["zz-first", undefined],
            ["mm-second", 5_000],
            ["aa-third", 7_000],
            ["fourth", undefined],
          ],
        );
      });

      test("ready until closed; close is idempotent", async () => {
        assert.equal(store.ready(), true);
        await store.close();
        assert.equal(store.ready(), false);
        await store.close();
      });
    });
  });
}
