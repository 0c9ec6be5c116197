import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../src/domain/errors.js";
import type {
  HierarchyFilter,
  IdentityFilter,
  IdentityOrder,
  RoleBindingFilter,
  RoleBindingOrder,
  RoleFilter,
  RoleOrder,
  Store,
} from "../../src/store/store.js";
import { AUTHZ_TABLES } from "../../src/store/versions.js";
import {
  A,
  A1,
  A1X,
  A2,
  B,
  B1,
  binding,
  C,
  CLAIM_MATCH,
  CLAIM_MATCH_FIELDS,
  group,
  hierarchyFixture,
  identity,
  invite,
  query,
  role,
  sorted,
  STATIC_KEYS,
} from "./store-fixtures.js";

// Root-level (person) identities, identities living in groups, built-in
// (root-level) roles and custom roles in groups, over hierarchyFixture().
const P1 = "9".repeat(40);
const P2 = `${"9".repeat(39)}8`;
const SA = `${A}/${"5".repeat(16)}`;
const SA1 = `${A1}/${"5".repeat(16)}`;
const SB1 = `${B1}/${"5".repeat(16)}`;
const VIEWER = `${"0".repeat(39)}1`;
const OWNER = `${"0".repeat(39)}2`;
const RA = `${A}/${"d".repeat(16)}`;
const RA1 = `${A1}/${"d".repeat(16)}`;
const RB1 = `${B1}/${"d".repeat(16)}`;

/** The uid of the n-th binding at group g: directly below the group. */
function bindingUid(g: string, n: number): string {
  return `${g}/${n.toString(16).padStart(16, "0")}`;
}

/** Asserts a NotFoundError naming exactly this kind and uid. */
export async function assertNotFound(fn: () => Promise<unknown>, kind: string, uid: string): Promise<void> {
  await assert.rejects(fn, (err: unknown) => {
    assert.ok(err instanceof NotFoundError, `expected NotFoundError, got ${String(err)}`);
    assert.deepEqual(err.metadata, { kind, uid }, "the error names the missing kind and uid");
    return true;
  });
}

/** Asserts a FailedPreconditionError with one violation of this type, subject and description. */
export async function assertPrecondition(fn: () => Promise<unknown>, type: string, subject: string, description: RegExp): Promise<void> {
  await assert.rejects(fn, (err: unknown) => {
    assert.ok(err instanceof FailedPreconditionError, `expected FailedPreconditionError, got ${String(err)}`);
    assert.equal(err.preconditionViolations.length, 1);
    const [v] = err.preconditionViolations;
    assert.equal(v!.type, type);
    assert.equal(v!.subject, subject);
    assert.match(v!.description, description);
    return true;
  });
}

/** Asserts an AlreadyExistsError naming exactly this kind and uid. */
export async function assertAlreadyExists(fn: () => Promise<unknown>, kind: string, uid: string): Promise<void> {
  await assert.rejects(fn, (err: unknown) => {
    assert.ok(err instanceof AlreadyExistsError, `expected AlreadyExistsError, got ${String(err)}`);
    assert.deepEqual(err.metadata, { kind, uid });
    return true;
  });
}

/** Conformance of identities, roles, role bindings, the group children they are, and table versions. */
export function iamConformance(getStore: () => Store): void {
  const identityUids = async (hierarchy: HierarchyFilter, filter: IdentityFilter = {}, visibleWithin: readonly string[] | null = null) => {
    const r = await getStore().identities.list(query<IdentityFilter, IdentityOrder>({ hierarchy, filter, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };
  const roleUids = async (hierarchy: HierarchyFilter, filter: RoleFilter = {}, visibleWithin: readonly string[] | null = null) => {
    const r = await getStore().roles.list(query<RoleFilter, RoleOrder>({ hierarchy, filter, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length, "totalCount counts exactly the visible roles");
    return r.items.map((i) => i.uid);
  };
  const bindingUids = async (
    hierarchy: HierarchyFilter,
    filter: RoleBindingFilter = {},
    visibleWithin: readonly string[] | null = null,
  ) => {
    const r = await getStore().roleBindings.list(query<RoleBindingFilter, RoleBindingOrder>({ hierarchy, filter, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };

  describe("identities: create, get, update, delete, list", () => {
    let store: Store;
    beforeEach(async () => {
      store = getStore();
      for (const g of hierarchyFixture()) await store.groups.create(g);
    });

    test("both relationship kinds round-trip exactly; get returns null when absent", async () => {
      const person = identity(P1, null, "Ada Lovelace", {
        description: "a person",
        email: "ada@example.com",
        emailUnverified: "ada@unverified.example",
        company: "Analytical Engines",
        relationship: CLAIM_MATCH,
        lastSeenTime: 1_700_000_000_999,
        createTime: 1_700_000_000_001,
        updateTime: 1_700_000_000_002,
      });
      const robot = identity(SA1, A1, "deployer", { relationship: STATIC_KEYS, description: "CI" });
      const bare = identity(SA, A, "bare", {
        relationship: {
          kind: "claimMatch",
          claimMatch: { ...CLAIM_MATCH_FIELDS, claims: {}, claimPatterns: {} },
        },
      });
      await store.identities.create(person);
      await store.identities.create(robot);
      await store.identities.create(bare);
      assert.deepEqual(await store.identities.get(P1), person);
      assert.deepEqual(await store.identities.get(SA1), robot);
      assert.deepEqual(await store.identities.get(SA), bare);
      assert.equal(await store.identities.get(P2), null);
      assert.equal(await store.identities.get(`${A1}/${"6".repeat(16)}`), null);
    });

    test("create in a missing group throws NotFoundError naming the group, and stores nothing", async () => {
      const orphan = identity(`${C}/${"7".repeat(16)}/${"5".repeat(16)}`, `${C}/${"7".repeat(16)}`, "orphan");
      await assertNotFound(async () => store.identities.create(orphan), "group", orphan.parentUid!);
      assert.equal(await store.identities.get(orphan.uid), null);
      assert.equal((await store.identities.list(query<IdentityFilter, IdentityOrder>({}))).totalCount, 0);
    });

    test("create with a taken uid throws AlreadyExistsError and keeps the first", async () => {
      await store.identities.create(identity(P1, null, "first"));
      await assert.rejects(
        async () => store.identities.create(identity(P1, null, "second", { relationship: STATIC_KEYS })),
        AlreadyExistsError,
      );
      assert.deepEqual(await store.identities.get(P1), identity(P1, null, "first"));
    });

    test("update returns the changed identity, moves updateTime, and keeps the rest", async () => {
      const before = identity(SA1, A1, "before", {
        email: "kept@example.com",
        description: "kept",
        lastSeenTime: 1_500,
        createTime: 1_000,
        updateTime: 1_000,
      });
      await store.identities.create(before);
      const renamed = await store.identities.update(SA1, { name: "after", company: "Acme" }, 5_000);
      assert.deepEqual(renamed, { ...before, name: "after", company: "Acme", updateTime: 5_000 });
      assert.deepEqual(await store.identities.get(SA1), renamed);

      const switched = await store.identities.update(SA1, { relationship: STATIC_KEYS, description: "now static" }, 6_000);
      assert.deepEqual(switched, { ...renamed, relationship: STATIC_KEYS, description: "now static", updateTime: 6_000 });
      assert.deepEqual(await store.identities.get(SA1), switched);
      assert.deepEqual(await identityUids({}, { relationshipKind: "staticKeys" }), [SA1]);
      assert.deepEqual(await identityUids({}, { relationshipKind: "claimMatch" }), []);
    });

    test("update of a missing identity throws NotFoundError", async () => {
      await assertNotFound(async () => store.identities.update(P1, { name: "x" }, 1), "identity", P1);
      assert.equal(await store.identities.get(P1), null);
    });

    test("touchLastSeen records the time and nothing else; a missing identity is ignored", async () => {
      const person = identity(P1, null, "Ada", { lastSeenTime: 0, updateTime: 1_000 });
      await store.identities.create(person);
      await store.identities.touchLastSeen(P1, 7_777);
      assert.deepEqual(await store.identities.get(P1), { ...person, lastSeenTime: 7_777 });
      await store.identities.touchLastSeen(P2, 8_888);
      assert.equal(await store.identities.get(P2), null);
    });

    test("delete removes the identity and its role bindings only; a missing identity throws NotFoundError", async () => {
      await store.identities.create(identity(P1, null, "one"));
      await store.identities.create(identity(P2, null, "two"));
      await store.roles.create(role(VIEWER, null, "viewer"));
      await store.roleBindings.create([
        binding(bindingUid(A, 1), A, P1, VIEWER),
        binding(bindingUid(B, 1), B, P1, VIEWER),
        binding(bindingUid(A, 2), A, P2, VIEWER),
      ]);
      // Fill any cached counts before the delete, so a stale count would show.
      assert.equal((await store.roleBindings.list(query<RoleBindingFilter, RoleBindingOrder>({}))).totalCount, 3);
      assert.equal(
        (await store.roleBindings.list(query<RoleBindingFilter, RoleBindingOrder>({ filter: { identityUid: P1 } }))).totalCount,
        2,
      );

      await store.identities.delete(P1);
      assert.equal(await store.identities.get(P1), null);
      assert.deepEqual(await store.roleBindings.forIdentity(P1), []);
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
      assert.equal(await store.roleBindings.get(bindingUid(B, 1)), null);
      assert.deepEqual(await bindingUids({}), [bindingUid(A, 2)]);
      assert.deepEqual(await bindingUids({}, { identityUid: P1 }), []);
      assert.deepEqual(await store.roleBindings.forIdentity(P2), [binding(bindingUid(A, 2), A, P2, VIEWER)]);
      assert.equal((await store.roles.get(VIEWER))?.name, "viewer");

      await assertNotFound(async () => store.identities.delete(P1), "identity", P1);
      assert.equal((await store.identities.get(P2))?.name, "two");
    });

    test("list filters by name, relationship kind and hierarchy; visibility never adds root identities", async () => {
      await store.identities.create(identity(P1, null, "Ada", { relationship: STATIC_KEYS }));
      await store.identities.create(identity(P2, null, "ci"));
      await store.identities.create(identity(SA, A, "ci", { relationship: STATIC_KEYS }));
      await store.identities.create(identity(SA1, A1, "ci"));
      await store.identities.create(identity(SB1, B1, "deployer"));

      assert.deepEqual(await identityUids({}), sorted([P1, P2, SA, SA1, SB1]));
      assert.deepEqual(await identityUids({}, { name: "ci" }), sorted([P2, SA, SA1]));
      assert.deepEqual(await identityUids({}, { relationshipKind: "staticKeys" }), sorted([P1, SA]));
      assert.deepEqual(await identityUids({}, { name: "ci", relationshipKind: "claimMatch" }), sorted([P2, SA1]));
      assert.deepEqual(await identityUids({ inRoot: true }), sorted([P1, P2]));
      assert.deepEqual(await identityUids({ childrenOf: A }), [SA]);
      assert.deepEqual(await identityUids({ descendantsOf: A }), sorted([SA, SA1]));
      assert.deepEqual(await identityUids({ descendantsOf: B }), [SB1]);
      assert.deepEqual(await identityUids({ ids: [SA1, P2, SB1.replace(/5$/, "6")] }), sorted([SA1, P2]));
      assert.deepEqual(await identityUids({}, {}, [A]), sorted([SA, SA1]));
      assert.deepEqual(await identityUids({}, {}, [A1, B]), sorted([SA1, SB1]));
      assert.deepEqual(await identityUids({}, { name: "ci" }, [A1]), [SA1]);
      assert.deepEqual(await identityUids({}, {}, []), []);
    });
  });

  describe("roles: create, get, update, delete, list", () => {
    let store: Store;
    beforeEach(async () => {
      store = getStore();
      for (const g of hierarchyFixture()) await store.groups.create(g);
    });

    test("capabilities and every field round-trip; get returns null when absent", async () => {
      const builtIn = role(VIEWER, null, "viewer", [1, 5, 100, 1_000], { description: "read everything", createTime: 10, updateTime: 20 });
      const custom = role(RA1, A1, "deployer", [3, 4]);
      const empty = role(RA, A, "nothing", []);
      await store.roles.create(builtIn);
      await store.roles.create(custom);
      await store.roles.create(empty);
      assert.deepEqual(await store.roles.get(VIEWER), builtIn);
      assert.deepEqual(await store.roles.get(RA1), custom);
      assert.deepEqual(await store.roles.get(RA), empty);
      assert.equal(await store.roles.get(OWNER), null);
    });

    test("create in a missing group throws NotFoundError; a taken uid throws AlreadyExistsError", async () => {
      const missing = `${C}/${"7".repeat(16)}`;
      await assertNotFound(async () => store.roles.create(role(`${missing}/${"d".repeat(16)}`, missing, "x")), "group", missing);
      assert.equal(await store.roles.get(`${missing}/${"d".repeat(16)}`), null);
      await store.roles.create(role(RA, A, "first"));
      await assert.rejects(async () => store.roles.create(role(RA, A, "second")), AlreadyExistsError);
      assert.equal((await store.roles.get(RA))?.name, "first");
    });

    test("update returns the changed role, moves updateTime, and keeps the rest", async () => {
      const before = role(RA, A, "editor", [1, 2], { description: "kept", createTime: 1_000, updateTime: 1_000 });
      await store.roles.create(before);
      const changed = await store.roles.update(RA, { capabilities: [2, 7, 9] }, 4_000);
      assert.deepEqual(changed, { ...before, capabilities: [2, 7, 9], updateTime: 4_000 });
      assert.deepEqual(await store.roles.get(RA), changed);
      const renamed = await store.roles.update(RA, { name: "writer", description: "new" }, 5_000);
      assert.deepEqual(renamed, { ...changed, name: "writer", description: "new", updateTime: 5_000 });
      assert.deepEqual(await store.roles.get(RA), renamed);
      await assertNotFound(async () => store.roles.update(RA1, { name: "x" }, 1), "role", RA1);
    });

    test("delete while bound fails with ROLE_IN_USE naming role bindings; unbound it succeeds", async () => {
      await store.identities.create(identity(P1, null, "Ada"));
      await store.roles.create(role(RA, A, "editor"));
      await store.roleBindings.create([binding(bindingUid(A1, 1), A1, P1, RA)]);
      await assertPrecondition(async () => store.roles.delete(RA), "ROLE_IN_USE", RA, /role bindings/);
      assert.equal((await store.roles.get(RA))?.name, "editor");
      assert.equal((await store.roleBindings.get(bindingUid(A1, 1)))?.roleUid, RA);

      assert.equal(await store.roleBindings.delete(bindingUid(A1, 1)), true);
      await store.roles.delete(RA);
      assert.equal(await store.roles.get(RA), null);
      await assertNotFound(async () => store.roles.delete(RA), "role", RA);
    });

    test("built-in roles are visible to every non-empty visibleWithin, and counted", async () => {
      await store.roles.create(role(VIEWER, null, "viewer"));
      await store.roles.create(role(OWNER, null, "owner"));
      await store.roles.create(role(RA, A, "viewer"));
      await store.roles.create(role(RA1, A1, "deployer"));
      await store.roles.create(role(RB1, B1, "deployer"));

      assert.deepEqual(await roleUids({}), sorted([VIEWER, OWNER, RA, RA1, RB1]));
      assert.deepEqual(await roleUids({}, {}, []), [], "an empty visibleWithin sees not even built-in roles");
      assert.deepEqual(await roleUids({}, {}, [A1]), sorted([VIEWER, OWNER, RA1]));
      assert.deepEqual(await roleUids({}, {}, [A]), sorted([VIEWER, OWNER, RA, RA1]));
      assert.deepEqual(await roleUids({}, {}, [A1X, B1]), sorted([VIEWER, OWNER, RB1]));
      assert.deepEqual(await roleUids({}, {}, [C]), sorted([VIEWER, OWNER]));
      assert.deepEqual(await roleUids({ inRoot: true }, {}, [A1]), sorted([VIEWER, OWNER]));
      assert.deepEqual(await roleUids({ descendantsOf: A }, {}, [A1]), [RA1], "hierarchy filters still apply to built-in roles");
      assert.deepEqual(await roleUids({ descendantsOf: A }), sorted([RA, RA1]));
      assert.deepEqual(await roleUids({ childrenOf: B1 }), [RB1]);
      assert.deepEqual(await roleUids({}, { name: "viewer" }, [B]), [VIEWER]);
      assert.deepEqual(await roleUids({}, { name: "viewer" }, [A]), sorted([VIEWER, RA]));

      const page = await store.roles.list(query<RoleFilter, RoleOrder>({ visibleWithin: [A1], limit: 1 }));
      assert.equal(page.totalCount, 3);
      assert.equal(page.items.length, 1);
      assert.equal(page.hasMore, true);
      const none = await store.roles.list(query<RoleFilter, RoleOrder>({ visibleWithin: [] }));
      assert.deepEqual(none, { items: [], hasMore: false, totalCount: 0 });
    });
  });

  describe("role bindings: create, get, update, delete, list", () => {
    let store: Store;
    beforeEach(async () => {
      store = getStore();
      for (const g of hierarchyFixture()) await store.groups.create(g);
      await store.identities.create(identity(P1, null, "Ada"));
      await store.identities.create(identity(P2, null, "Grace"));
      await store.identities.create(identity(SA, A, "ci"));
      await store.roles.create(role(VIEWER, null, "viewer"));
      await store.roles.create(role(RA, A, "editor"));
    });

    test("a batch creates every binding, each exactly as given; get returns null when absent", async () => {
      const batch = [
        binding(bindingUid(A, 1), A, P1, VIEWER, 1_000),
        binding(bindingUid(A1X, 1), A1X, SA, RA, 2_000),
        binding(bindingUid(B, 1), B, P2, VIEWER, 3_000),
      ];
      await store.roleBindings.create(batch);
      for (const b of batch) assert.deepEqual(await store.roleBindings.get(b.uid), b);
      assert.equal(await store.roleBindings.get(bindingUid(A, 2)), null);
      assert.deepEqual(await bindingUids({}), sorted(batch.map((b) => b.uid)));
    });

    test("a missing group, group identity or role throws NotFoundError naming its kind, and creates nothing", async () => {
      const missingGroup = `${C}/${"7".repeat(16)}`;
      const missingIdentity = `${A}/${"8".repeat(16)}`;
      const missingRole = `${A}/${"e".repeat(16)}`;
      await assertNotFound(
        async () => store.roleBindings.create([binding(bindingUid(missingGroup, 1), missingGroup, P1, VIEWER)]),
        "group",
        missingGroup,
      );
      await assertNotFound(
        async () => store.roleBindings.create([binding(bindingUid(A, 1), A, missingIdentity, VIEWER)]),
        "identity",
        missingIdentity,
      );
      await assertNotFound(async () => store.roleBindings.create([binding(bindingUid(A, 1), A, P1, missingRole)]), "role", missingRole);
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
      assert.deepEqual(await bindingUids({}), []);
    });

    test("a person's root-level uid need not exist: the binding waits for sign-up, and goes when the person is deleted", async () => {
      const person = "8".repeat(40);
      const waiting = binding(bindingUid(A, 1), A, person, VIEWER);
      await store.roleBindings.create([waiting]);
      assert.deepEqual(await store.roleBindings.forIdentity(person), [waiting]);
      assert.deepEqual(await store.roleBindings.update(waiting.uid, { identityUid: "6".repeat(40) }), {
        ...waiting,
        identityUid: "6".repeat(40),
      });
      await store.roleBindings.update(waiting.uid, { identityUid: person });
      await store.identities.create(identity(person, null, "late comer"));
      assert.deepEqual(await store.roleBindings.forIdentity(person), [waiting]);
      await store.identities.delete(person);
      assert.deepEqual(await store.roleBindings.forIdentity(person), []);
      assert.deepEqual(await bindingUids({}), []);
    });

    test("a batch with one missing group identity creates none of its bindings", async () => {
      const missing = `${A}/${"8".repeat(16)}`;
      await assertNotFound(
        async () =>
          store.roleBindings.create([
            binding(bindingUid(A, 1), A, P1, VIEWER),
            binding(bindingUid(A, 2), A, missing, VIEWER),
            binding(bindingUid(B, 1), B, P2, VIEWER),
          ]),
        "identity",
        missing,
      );
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
      assert.equal(await store.roleBindings.get(bindingUid(B, 1)), null);
      assert.deepEqual(await store.roleBindings.forIdentity(P1), []);
      assert.deepEqual(await store.roleBindings.list(query<RoleBindingFilter, RoleBindingOrder>({})), {
        items: [],
        hasMore: false,
        totalCount: 0,
      });
    });

    test("a taken uid, in the store or earlier in the batch, throws AlreadyExistsError and creates none", async () => {
      await store.roleBindings.create([binding(bindingUid(A, 1), A, P1, VIEWER)]);
      await assert.rejects(
        async () => store.roleBindings.create([binding(bindingUid(B, 1), B, P2, VIEWER), binding(bindingUid(A, 1), A, P2, RA)]),
        AlreadyExistsError,
      );
      await assert.rejects(
        async () => store.roleBindings.create([binding(bindingUid(B, 2), B, P2, VIEWER), binding(bindingUid(B, 2), B, P1, VIEWER)]),
        AlreadyExistsError,
      );
      assert.deepEqual(await store.roleBindings.get(bindingUid(A, 1)), binding(bindingUid(A, 1), A, P1, VIEWER));
      assert.deepEqual(await bindingUids({}), [bindingUid(A, 1)]);
    });

    test("update changes identity and role, and checks both exist", async () => {
      const b = binding(bindingUid(A1, 1), A1, P1, VIEWER, 1_234);
      await store.roleBindings.create([b]);
      const withRole = await store.roleBindings.update(b.uid, { roleUid: RA });
      assert.deepEqual(withRole, { ...b, roleUid: RA });
      assert.deepEqual(await store.roleBindings.get(b.uid), withRole);
      const withBoth = await store.roleBindings.update(b.uid, { identityUid: SA, roleUid: VIEWER });
      assert.deepEqual(withBoth, { ...b, identityUid: SA, roleUid: VIEWER });
      assert.deepEqual(await store.roleBindings.forIdentity(P1), []);
      assert.deepEqual(await store.roleBindings.forIdentity(SA), [withBoth]);

      await assertNotFound(
        async () => store.roleBindings.update(b.uid, { identityUid: `${A1}/${"7".repeat(16)}` }),
        "identity",
        `${A1}/${"7".repeat(16)}`,
      );
      await assertNotFound(async () => store.roleBindings.update(b.uid, { roleUid: OWNER }), "role", OWNER);
      await assert.rejects(async () => store.roleBindings.update(bindingUid(A1, 2), { roleUid: RA }), NotFoundError);
      assert.deepEqual(await store.roleBindings.get(b.uid), withBoth);
    });

    test("delete returns true once, then false; deleting what never existed is false", async () => {
      await store.roleBindings.create([binding(bindingUid(A, 1), A, P1, VIEWER), binding(bindingUid(A, 2), A, P2, VIEWER)]);
      assert.equal(await store.roleBindings.delete(bindingUid(A, 1)), true);
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
      assert.equal(await store.roleBindings.delete(bindingUid(A, 1)), false);
      assert.equal(await store.roleBindings.delete(bindingUid(C, 9)), false);
      assert.deepEqual(await bindingUids({}), [bindingUid(A, 2)]);
    });

    test("forIdentity returns every binding of the identity, at every group", async () => {
      const p1 = [
        binding(bindingUid(A, 1), A, P1, VIEWER),
        binding(bindingUid(A1X, 1), A1X, P1, RA),
        binding(bindingUid(C, 1), C, P1, VIEWER),
      ];
      await store.roleBindings.create([...p1, binding(bindingUid(A, 2), A, P2, VIEWER)]);
      const got = await store.roleBindings.forIdentity(P1);
      assert.deepEqual(
        [...got].sort((x, y) => (x.uid < y.uid ? -1 : 1)),
        [...p1].sort((x, y) => (x.uid < y.uid ? -1 : 1)),
      );
      assert.deepEqual(await store.roleBindings.forIdentity(SA), []);
      assert.deepEqual(await store.roleBindings.forIdentity("8".repeat(40)), []);
    });

    test("list filters by identity, group and role, and hierarchy filters work on the binding uid", async () => {
      await store.roleBindings.create([
        binding(bindingUid(A, 1), A, P1, VIEWER),
        binding(bindingUid(A, 2), A, SA, RA),
        binding(bindingUid(A1, 1), A1, P1, RA),
        binding(bindingUid(A1X, 1), A1X, P2, VIEWER),
        binding(bindingUid(A2, 1), A2, P2, RA),
        binding(bindingUid(B1, 1), B1, P1, VIEWER),
      ]);
      assert.deepEqual(await bindingUids({}, { identityUid: P1 }), sorted([bindingUid(A, 1), bindingUid(A1, 1), bindingUid(B1, 1)]));
      assert.deepEqual(await bindingUids({}, { groupUid: A }), sorted([bindingUid(A, 1), bindingUid(A, 2)]));
      assert.deepEqual(await bindingUids({}, { roleUid: RA }), sorted([bindingUid(A, 2), bindingUid(A1, 1), bindingUid(A2, 1)]));
      assert.deepEqual(await bindingUids({}, { identityUid: P1, roleUid: VIEWER }), sorted([bindingUid(A, 1), bindingUid(B1, 1)]));
      assert.deepEqual(await bindingUids({}, { identityUid: P2, groupUid: A1X, roleUid: VIEWER }), [bindingUid(A1X, 1)]);
      assert.deepEqual(await bindingUids({}, { identityUid: SA, groupUid: B1 }), []);

      assert.deepEqual(
        await bindingUids({ descendantsOf: A }),
        sorted([bindingUid(A, 1), bindingUid(A, 2), bindingUid(A1, 1), bindingUid(A1X, 1), bindingUid(A2, 1)]),
        "a binding at A lies below A",
      );
      assert.deepEqual(await bindingUids({ descendantsOf: A1 }), sorted([bindingUid(A1, 1), bindingUid(A1X, 1)]));
      assert.deepEqual(await bindingUids({ childrenOf: A1 }), [bindingUid(A1, 1)]);
      assert.deepEqual(await bindingUids({ descendantsOf: B }), [bindingUid(B1, 1)]);
      assert.deepEqual(await bindingUids({ inRoot: true }), []);
      assert.deepEqual(await bindingUids({ ids: [bindingUid(A2, 1), bindingUid(A2, 2)] }), [bindingUid(A2, 1)]);
      assert.deepEqual(await bindingUids({ descendantsOf: A }, { identityUid: P2 }), sorted([bindingUid(A1X, 1), bindingUid(A2, 1)]));
      assert.deepEqual(await bindingUids({}, {}, [A1]), sorted([bindingUid(A1, 1), bindingUid(A1X, 1)]));
      assert.deepEqual(await bindingUids({}, { identityUid: P1 }, [A1, B]), sorted([bindingUid(A1, 1), bindingUid(B1, 1)]));
      assert.deepEqual(await bindingUids({}, {}, []), []);
    });
  });

  describe("async groups: deletion blocked by every kind that lives in a group", () => {
    let store: Store;
    beforeEach(async () => {
      store = getStore();
      await store.groups.create(group(A, null, "org"));
      await store.groups.create(group(A1, A, "team"));
    });

    const blocked = async (label: RegExp) => await assertPrecondition(async () => store.groups.delete(A1), "RESOURCE_NOT_EMPTY", A1, label);
    const deletes = async () => {
      await store.groups.delete(A1);
      assert.equal(await store.groups.get(A1), null);
    };

    test("an identity in the group blocks it, naming identities", async () => {
      await store.identities.create(identity(SA1, A1, "ci"));
      await blocked(/\bidentities\b/);
      assert.equal((await store.groups.get(A1))?.name, "team");
      await store.identities.delete(SA1);
      await deletes();
    });

    test("a role in the group blocks it, naming roles", async () => {
      await store.roles.create(role(RA1, A1, "deployer"));
      await blocked(/\broles\b/);
      assert.equal((await store.groups.get(A1))?.name, "team");
      await store.roles.delete(RA1);
      await deletes();
    });

    test("a role binding at the group blocks it, naming role bindings", async () => {
      await store.identities.create(identity(P1, null, "Ada"));
      await store.roles.create(role(VIEWER, null, "viewer"));
      await store.roleBindings.create([binding(bindingUid(A1, 1), A1, P1, VIEWER)]);
      await blocked(/\brole bindings\b/);
      assert.equal((await store.groups.get(A1))?.name, "team");
      assert.equal(await store.roleBindings.delete(bindingUid(A1, 1)), true);
      await deletes();
    });
  });

  describe("versions", () => {
    test("authorization's version changes after every write to identities, roles and role bindings, and not on reads", async (t) => {
      const store = getStore();
      if (store.version([]) !== store.version([])) return t.skip("a bare engine keeps no view of versions");
      await store.groups.create(group(A, null, "org"));
      let version = store.version(AUTHZ_TABLES);
      const changes = async (what: string, write: () => Promise<unknown>) => {
        await write();
        const next = store.version(AUTHZ_TABLES);
        assert.notEqual(next, version, `the version changes after ${what}`);
        version = next;
      };
      const unchanged = async (what: string, read: () => Promise<unknown>) => {
        await read();
        assert.equal(store.version(AUTHZ_TABLES), version, `the version stays after ${what}`);
      };

      await changes("identities.create", async () => store.identities.create(identity(P1, null, "Ada")));
      await changes("roles.create", async () => store.roles.create(role(VIEWER, null, "viewer")));
      await changes("roles.create in a group", async () => store.roles.create(role(RA, A, "editor")));
      await changes("roleBindings.create", async () => store.roleBindings.create([binding(bindingUid(A, 1), A, P1, VIEWER)]));
      await unchanged("reads", async () => {
        await store.identities.get(P1);
        await store.roles.list(query<RoleFilter, RoleOrder>({}));
        await store.roleBindings.forIdentity(P1);
        await store.roleBindings.list(query<RoleBindingFilter, RoleBindingOrder>({}));
      });
      await unchanged("a group write", async () => store.groups.update(A, { description: "x" }, 2));
      await changes("roleBindings.update", async () => store.roleBindings.update(bindingUid(A, 1), { roleUid: RA }));
      await changes("roles.update", async () => store.roles.update(RA, { capabilities: [9] }, 2));
      await changes("identities.update", async () => store.identities.update(P1, { name: "Ada L." }, 2));
      await changes("roleBindings.delete", async () => store.roleBindings.delete(bindingUid(A, 1)));
      await changes("a transaction writing a binding", async () =>
        store.transaction(async (tx) => tx.roleBindings.create([binding(bindingUid(A, 2), A, P1, RA)])),
      );
      const bindings = store.version(["role_bindings"]);
      await changes("identities.delete (removing its bindings)", async () => store.identities.delete(P1));
      assert.notEqual(store.version(["role_bindings"]), bindings, "the cascade to role bindings moves their version");
      await changes("roles.delete", async () => store.roles.delete(RA));
    });

    test("reads inside a rolled-back transaction leave nothing behind", async () => {
      const store = getStore();
      await store.groups.create(group(A, null, "org"));
      await store.identities.create(identity(P1, null, "Ada"));
      await store.roles.create(role(VIEWER, null, "viewer"));
      assert.deepEqual(await store.roleBindings.forIdentity(P1), []);
      await assert.rejects(
        async () =>
          store.transaction(async (tx) => {
            await tx.roleBindings.create([binding(bindingUid(A, 1), A, P1, VIEWER)]);
            assert.equal((await tx.roleBindings.forIdentity(P1)).length, 1);
            throw new Error("abort");
          }),
        /abort/,
      );
      assert.deepEqual(await store.roleBindings.forIdentity(P1), []);
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
    });

    test("readVersions moves exactly the tables a write touched", async () => {
      const store = getStore();
      const before = await store.readVersions();
      await store.groups.create(group(A, null, "org"));
      await store.roles.create(role(RA, A, "editor"));
      const after = await store.readVersions();
      assert.ok(after.groups > before.groups, "groups moved");
      assert.ok(after.roles > before.roles, "roles moved");
      assert.equal(after.identities, before.identities, "identities did not");
      assert.equal(after.role_bindings, before.role_bindings, "role bindings did not");
    });

    test("a refused write moves no version, alone or in a transaction that wrote before it failed", async () => {
      const store = getStore();
      await store.groups.create(group(A, null, "org"));
      const before = await store.readVersions();
      await assert.rejects(store.groups.create(group(`${B}/${"1".repeat(16)}`, B, "orphan")));
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.roles.create(role(RA, A, "editor"));
          throw new Error("refused after writing");
        }),
        /refused after writing/,
      );
      assert.equal(await store.roles.get(RA), null);
      assert.deepEqual(await store.readVersions(), before);
    });

    test("readVersions moves the tables a cascade changed: an identity's delete, its bindings'; a role's, its invites'", async () => {
      const store = getStore();
      await store.groups.create(group(A, null, "org"));
      await store.identities.create(identity(SA, A, "robot"));
      await store.roles.create(role(RA, A, "editor"));
      await store.roleBindings.create([binding(bindingUid(A, 1), A, SA, RA)]);
      await store.groupInvites.create(invite(`${A}/${"7".repeat(16)}`, A, RA, "key-cascade"));
      let before = await store.readVersions();
      await store.identities.delete(SA);
      let after = await store.readVersions();
      assert.ok(after.identities > before.identities, "identities moved");
      assert.ok(after.role_bindings > before.role_bindings, "role bindings moved with the identity's delete");
      assert.equal(await store.roleBindings.get(bindingUid(A, 1)), null);
      before = after;
      await store.roles.delete(RA);
      after = await store.readVersions();
      assert.ok(after.roles > before.roles, "roles moved");
      assert.ok(after.group_invites > before.group_invites, "invites moved with the role's delete");
      assert.equal(await store.groupInvites.get(`${A}/${"7".repeat(16)}`), null);
    });
  });
}
