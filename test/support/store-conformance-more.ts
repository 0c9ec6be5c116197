import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type {
  AccountAssociationFilter,
  AccountAssociationOrder,
  GroupInviteFilter,
  GroupInviteOrder,
  HierarchyFilter,
  IdentityProviderFilter,
  IdentityProviderOrder,
  Store,
} from "../../src/store/store.js";
import { assertAlreadyExists, assertNotFound, assertPrecondition } from "./store-conformance-iam.js";
import {
  A,
  A1,
  A1X,
  A2,
  association,
  B,
  B1,
  C,
  hierarchyFixture,
  identityProvider,
  invite,
  OIDC,
  PROVIDERS,
  query,
  role,
  sorted,
} from "./store-fixtures.js";

// Built-in and custom roles, and records of each kind at several groups of hierarchyFixture().
const VIEWER = `${"0".repeat(39)}1`;
const RA = `${A}/${"d".repeat(16)}`;
const RA1 = `${A1}/${"d".repeat(16)}`;
const below = (g: string, digit: string) => `${g}/${digit.repeat(16)}`;
const IDP_A = below(A, "6");
const IDP_A1 = below(A1, "6");
const IDP_B1 = below(B1, "6");
const INV_A = below(A, "7");
const INV_A1 = below(A1, "7");
const INV_B1 = below(B1, "7");

/** Conformance of identity providers, account associations and group invites, and the group and role deletions they block. */
export function moreConformance(getStore: () => Store): void {
  describe("identity providers, account associations and group invites", () => moreContracts(getStore));
}

function moreContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
    await store.roles.create(role(VIEWER, null, "viewer"));
    await store.roles.create(role(RA, A, "editor"));
  });

  /** uids of one whole list, checking it is one page and counted exactly. */
  const uidsOf = async (list: () => Promise<{ items: { uid: string }[]; hasMore: boolean; totalCount: number }>) => {
    const r = await list();
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };
  const idpUids = async (hierarchy: HierarchyFilter, filter: IdentityProviderFilter = {}, visibleWithin: readonly string[] | null = null) =>
    uidsOf(() => store.identityProviders.list(query<IdentityProviderFilter, IdentityProviderOrder>({ hierarchy, filter, visibleWithin })));
  const assocUids = async (
    hierarchy: HierarchyFilter,
    filter: AccountAssociationFilter = {},
    visibleWithin: readonly string[] | null = null,
  ) =>
    uidsOf(() =>
      store.accountAssociations.list(
        query<AccountAssociationFilter, AccountAssociationOrder>({
          hierarchy,
          filter,
          visibleWithin,
          order: { field: "group", desc: false },
        }),
      ),
    );
  const inviteUids = async (hierarchy: HierarchyFilter, filter: GroupInviteFilter = {}, visibleWithin: readonly string[] | null = null) =>
    uidsOf(() => store.groupInvites.list(query<GroupInviteFilter, GroupInviteOrder>({ hierarchy, filter, visibleWithin })));

  describe("identity providers: create, get, update, delete, list", () => {
    test("OIDC settings round-trip exactly, client secret included; get returns null when absent", async () => {
      const full = identityProvider(IDP_A, A, "okta", VIEWER, { description: "sign in", createTime: 1_001, updateTime: 1_002 });
      const bare = identityProvider(IDP_A1, A1, "entra", RA, {
        oidc: {
          issuer: "https://id.example",
          clientId: "c",
          clientSecret: "",
          additionalScopes: [],
          groupsClaim: "",
          correlationRule: 0,
          pkceEnabled: true,
        },
      });
      await store.identityProviders.create(full);
      await store.identityProviders.create(bare);
      assert.deepEqual(await store.identityProviders.get(IDP_A), full);
      assert.equal((await store.identityProviders.get(IDP_A))?.oidc.clientSecret, OIDC.clientSecret);
      assert.deepEqual(await store.identityProviders.get(IDP_A1), bare);
      // Listed in uid order: IDP_A1 (below A/111…) sorts before IDP_A (A/666…).
      assert.deepEqual((await store.identityProviders.list(query<IdentityProviderFilter, IdentityProviderOrder>({}))).items, [bare, full]);
      assert.equal(await store.identityProviders.get(IDP_B1), null);
    });

    test("a missing group or default role throws NotFoundError naming it; a taken uid throws AlreadyExistsError", async () => {
      const missingGroup = below(C, "8");
      const missingRole = below(A, "e");
      await assertNotFound(
        async () => store.identityProviders.create(identityProvider(below(missingGroup, "6"), missingGroup, "x", VIEWER)),
        "group",
        missingGroup,
      );
      await assertNotFound(async () => store.identityProviders.create(identityProvider(IDP_A, A, "x", missingRole)), "role", missingRole);
      assert.equal(await store.identityProviders.get(IDP_A), null);
      assert.deepEqual(await idpUids({}), []);
      await store.identityProviders.create(identityProvider(IDP_A, A, "first", VIEWER));
      await assertAlreadyExists(
        async () => store.identityProviders.create(identityProvider(IDP_A, A, "second", RA)),
        "identity provider",
        IDP_A,
      );
      assert.deepEqual(await store.identityProviders.get(IDP_A), identityProvider(IDP_A, A, "first", VIEWER));
    });

    test("update returns the changed provider, moves updateTime, and keeps the rest; missing ones throw NotFoundError", async () => {
      const before = identityProvider(IDP_A1, A1, "okta", VIEWER, { description: "kept", createTime: 1_000, updateTime: 1_000 });
      await store.identityProviders.create(before);
      const renamed = await store.identityProviders.update(IDP_A1, { name: "okta prod", defaultRole: RA }, 5_000);
      assert.deepEqual(renamed, { ...before, name: "okta prod", defaultRole: RA, updateTime: 5_000 });
      assert.deepEqual(await store.identityProviders.get(IDP_A1), renamed);
      const oidc = { ...OIDC, clientSecret: "", additionalScopes: ["offline_access"], pkceEnabled: false };
      const reconfigured = await store.identityProviders.update(IDP_A1, { oidc, description: "" }, 6_000);
      assert.deepEqual(reconfigured, { ...renamed, oidc, description: "", updateTime: 6_000 });
      assert.deepEqual(await store.identityProviders.get(IDP_A1), reconfigured);

      await assertNotFound(async () => store.identityProviders.update(IDP_A1, { defaultRole: RA1 }, 7_000), "role", RA1);
      await assertNotFound(async () => store.identityProviders.update(IDP_B1, { name: "x" }, 7_000), "identity provider", IDP_B1);
      assert.deepEqual(await store.identityProviders.get(IDP_A1), reconfigured);
    });

    test("delete removes the provider; a missing one throws NotFoundError", async () => {
      await store.identityProviders.create(identityProvider(IDP_A, A, "okta", VIEWER));
      await store.identityProviders.create(identityProvider(IDP_B1, B1, "okta", VIEWER));
      assert.equal((await idpUids({})).length, 2);
      await store.identityProviders.delete(IDP_A);
      assert.equal(await store.identityProviders.get(IDP_A), null);
      assert.deepEqual(await idpUids({}), [IDP_B1]);
      await assertNotFound(async () => store.identityProviders.delete(IDP_A), "identity provider", IDP_A);
    });

    test("list filters by name, hierarchy and visibility", async () => {
      await store.identityProviders.create(identityProvider(IDP_A, A, "okta", VIEWER));
      await store.identityProviders.create(identityProvider(IDP_A1, A1, "okta", RA));
      await store.identityProviders.create(identityProvider(IDP_B1, B1, "entra", VIEWER));
      assert.deepEqual(await idpUids({}, { name: "okta" }), sorted([IDP_A, IDP_A1]));
      assert.deepEqual(await idpUids({ descendantsOf: A }), sorted([IDP_A, IDP_A1]));
      assert.deepEqual(await idpUids({ childrenOf: A1 }), [IDP_A1]);
      assert.deepEqual(await idpUids({ descendantsOf: B }, { name: "okta" }), []);
      assert.deepEqual(await idpUids({ inRoot: true }), []);
      assert.deepEqual(await idpUids({ ids: [IDP_B1, below(C, "6")] }), [IDP_B1]);
      assert.deepEqual(await idpUids({}, {}, [A1, B]), sorted([IDP_A1, IDP_B1]));
      assert.deepEqual(await idpUids({}, {}, []), []);
    });

    test("a role that is a provider's default role cannot be deleted (ROLE_IN_USE naming identity providers)", async () => {
      await store.identityProviders.create(identityProvider(IDP_A1, A1, "okta", RA));
      await assertPrecondition(async () => store.roles.delete(RA), "ROLE_IN_USE", RA, /identity providers/);
      assert.equal((await store.roles.get(RA))?.name, "editor");
      assert.equal((await store.identityProviders.get(IDP_A1))?.defaultRole, RA);
      await store.identityProviders.update(IDP_A1, { defaultRole: VIEWER }, 2_000);
      await store.roles.delete(RA);
      assert.equal(await store.roles.get(RA), null);
    });
  });

  describe("account associations: create, get, update, delete, list", () => {
    test("providers of every kind round-trip exactly; get returns null when absent", async () => {
      const full = association(A, "everything", { description: "all clouds", providers: PROVIDERS, createTime: 1_001, updateTime: 1_002 });
      const empty = association(A1X, "none", { providers: {} });
      await store.accountAssociations.create(full);
      await store.accountAssociations.create(empty);
      assert.deepEqual(await store.accountAssociations.get(A), full);
      assert.deepEqual(await store.accountAssociations.get(A1X), empty);
      assert.equal(await store.accountAssociations.get(A1), null);
      assert.equal(await store.accountAssociations.get(below(C, "8")), null);
    });

    test("a missing group throws NotFoundError naming it; a second association on a group throws AlreadyExistsError", async () => {
      const missing = below(C, "8");
      await assertNotFound(async () => store.accountAssociations.create(association(missing, "x")), "group", missing);
      assert.equal(await store.accountAssociations.get(missing), null);
      await store.accountAssociations.create(association(A1, "first"));
      await assertAlreadyExists(
        async () => store.accountAssociations.create(association(A1, "second", { providers: PROVIDERS })),
        "account association",
        A1,
      );
      assert.deepEqual(await store.accountAssociations.get(A1), association(A1, "first"));
      assert.deepEqual(await assocUids({}), [A1]);
    });

    test("update returns the changed association, moves updateTime, and keeps the rest; a missing one throws NotFoundError", async () => {
      const before = association(B, "aws", { description: "kept", createTime: 1_000, updateTime: 1_000 });
      await store.accountAssociations.create(before);
      const changed = await store.accountAssociations.update(B, { providers: PROVIDERS, name: "all" }, 5_000);
      assert.deepEqual(changed, { ...before, providers: PROVIDERS, name: "all", updateTime: 5_000 });
      assert.deepEqual(await store.accountAssociations.get(B), changed);
      const cleared = await store.accountAssociations.update(B, { providers: {}, description: "" }, 6_000);
      assert.deepEqual(cleared, { ...changed, providers: {}, description: "", updateTime: 6_000 });
      assert.deepEqual(await store.accountAssociations.get(B), cleared);
      await assertNotFound(async () => store.accountAssociations.update(B1, { name: "x" }, 7_000), "account association", B1);
      assert.equal(await store.accountAssociations.get(B1), null);
    });

    test("delete returns true once, then false; deleting what never existed is false", async () => {
      await store.accountAssociations.create(association(A, "org"));
      await store.accountAssociations.create(association(A1, "team"));
      assert.equal((await assocUids({})).length, 2);
      assert.equal(await store.accountAssociations.delete(A), true);
      assert.equal(await store.accountAssociations.get(A), null);
      assert.equal(await store.accountAssociations.delete(A), false);
      assert.equal(await store.accountAssociations.delete(C), false);
      assert.deepEqual(await assocUids({}), [A1]);
      assert.equal((await store.groups.get(A))?.name, "org", "the group stays");
    });

    test("hierarchy filters and visibility treat the association as its group", async () => {
      for (const [uid, name] of [
        [A, "org"],
        [A1, "team"],
        [A1X, "svc"],
        [A2, "team"],
        [B, "org"],
        [B1, "team"],
      ] as const) {
        await store.accountAssociations.create(association(uid, name));
      }
      assert.deepEqual(await assocUids({}), sorted([A, A1, A1X, A2, B, B1]));
      assert.deepEqual(await assocUids({ inRoot: true }), sorted([A, B]));
      assert.deepEqual(await assocUids({ childrenOf: A }), sorted([A1, A2]));
      assert.deepEqual(await assocUids({ descendantsOf: A }), sorted([A1, A1X, A2]));
      assert.deepEqual(await assocUids({ ancestorsOf: A1X }), sorted([A, A1]));
      assert.deepEqual(await assocUids({ ids: [A1X, B, C] }), sorted([A1X, B]));
      assert.deepEqual(await assocUids({}, { name: "team" }), sorted([A1, A2, B1]));
      assert.deepEqual(await assocUids({ descendantsOf: A }, { name: "team" }), sorted([A1, A2]));
      assert.deepEqual(await assocUids({}, {}, [A1]), sorted([A1, A1X]), "visible at the group itself and below");
      assert.deepEqual(await assocUids({}, {}, [A1X, B]), sorted([A1X, B, B1]));
      assert.deepEqual(await assocUids({}, {}, []), []);
    });
  });

  describe("group invites: create, get, findByKeyId, delete, consume, list", () => {
    test("every field round-trips; findByKeyId finds by the key id only; absent ones are null", async () => {
      const full = invite(INV_A1, A1, RA, "key-a1", {
        email: "ada@example.com",
        singleUse: true,
        codeHash: "ab".repeat(32),
        expirationTime: 1_800_000_000_123,
        createTime: 1_700_000_000_321,
      });
      const open = invite(INV_B1, B1, VIEWER, "key-b1");
      await store.groupInvites.create(full);
      await store.groupInvites.create(open);
      assert.deepEqual(await store.groupInvites.get(INV_A1), full);
      assert.deepEqual(await store.groupInvites.get(INV_B1), open);
      assert.deepEqual(await store.groupInvites.findByKeyId("key-a1"), full);
      assert.deepEqual(await store.groupInvites.findByKeyId("key-b1"), open);
      assert.equal(await store.groupInvites.findByKeyId("key-a"), null);
      assert.equal(await store.groupInvites.findByKeyId(INV_A1), null);
      assert.equal(await store.groupInvites.get(INV_A), null);
    });

    test("a missing group or role throws NotFoundError naming it; a taken uid or keyId throws AlreadyExistsError", async () => {
      const missingGroup = below(C, "8");
      const missingRole = below(A, "e");
      await assertNotFound(
        async () => store.groupInvites.create(invite(below(missingGroup, "7"), missingGroup, VIEWER, "k1")),
        "group",
        missingGroup,
      );
      await assertNotFound(async () => store.groupInvites.create(invite(INV_A, A, missingRole, "k1")), "role", missingRole);
      assert.equal(await store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(await inviteUids({}), []);

      await store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      await assertAlreadyExists(async () => store.groupInvites.create(invite(INV_A, A, RA, "k2")), "group invite", INV_A);
      await assertAlreadyExists(async () => store.groupInvites.create(invite(INV_A1, A1, RA, "k1")), "group invite key", "k1");
      assert.equal(await store.groupInvites.get(INV_A1), null);
      assert.equal(await store.groupInvites.findByKeyId("k2"), null);
      assert.deepEqual(await store.groupInvites.findByKeyId("k1"), invite(INV_A, A, VIEWER, "k1"));
    });

    test("delete removes the invite; a missing one throws NotFoundError", async () => {
      await store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      await store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k2"));
      assert.equal((await inviteUids({})).length, 2);
      await store.groupInvites.delete(INV_A);
      assert.equal(await store.groupInvites.get(INV_A), null);
      assert.equal(await store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(await inviteUids({}), [INV_B1]);
      await assertNotFound(async () => store.groupInvites.delete(INV_A), "group invite", INV_A);
    });

    test("consume returns true once, then false; a rolled-back consume leaves the invite", async () => {
      await store.groupInvites.create(invite(INV_A1, A1, RA, "k1", { singleUse: true }));
      await assert.rejects(
        async () =>
          store.transaction(async (tx) => {
            assert.equal(await tx.groupInvites.consume(INV_A1), true);
            assert.equal(await tx.groupInvites.get(INV_A1), null);
            throw new Error("binding failed");
          }),
        /binding failed/,
      );
      assert.equal((await store.groupInvites.get(INV_A1))?.keyId, "k1");
      assert.deepEqual(await inviteUids({}), [INV_A1]);

      assert.equal(await store.groupInvites.consume(INV_A1), true);
      assert.equal(await store.groupInvites.consume(INV_A1), false);
      assert.equal(await store.groupInvites.get(INV_A1), null);
      assert.equal(await store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(await inviteUids({}), []);
      assert.equal(await store.groupInvites.consume(INV_B1), false);
    });

    test("an invite disappears when its role is deleted, from get, findByKeyId, list and totalCount", async () => {
      await store.groupInvites.create(invite(INV_A, A, RA, "k1"));
      await store.groupInvites.create(invite(INV_A1, A1, RA, "k2"));
      await store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k3"));
      // Fill any cached counts before the delete, so a stale count would show.
      assert.equal((await inviteUids({})).length, 3);
      assert.equal((await inviteUids({ descendantsOf: A })).length, 2);
      await store.roles.delete(RA);
      assert.equal(await store.groupInvites.get(INV_A), null);
      assert.equal(await store.groupInvites.get(INV_A1), null);
      assert.equal(await store.groupInvites.findByKeyId("k2"), null);
      assert.deepEqual(await inviteUids({}), [INV_B1]);
      assert.deepEqual(await inviteUids({ descendantsOf: A }), []);
      assert.deepEqual(await store.groupInvites.get(INV_B1), invite(INV_B1, B1, VIEWER, "k3"));
    });

    test("list filters by keyId, hierarchy and visibility", async () => {
      await store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      await store.groupInvites.create(invite(INV_A1, A1, RA, "k2"));
      await store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k3"));
      assert.deepEqual(await inviteUids({}, { keyId: "k2" }), [INV_A1]);
      assert.deepEqual(await inviteUids({}, { keyId: "k" }), []);
      assert.deepEqual(await inviteUids({ descendantsOf: A }), sorted([INV_A, INV_A1]));
      assert.deepEqual(await inviteUids({ childrenOf: A }), [INV_A]);
      assert.deepEqual(await inviteUids({ descendantsOf: A }, { keyId: "k3" }), []);
      assert.deepEqual(await inviteUids({ inRoot: true }), []);
      assert.deepEqual(await inviteUids({}, {}, [A1, B1]), sorted([INV_A1, INV_B1]));
      assert.deepEqual(await inviteUids({}, {}, []), []);
    });
  });

  describe("async groups: deletion blocked by identity providers, account associations and group invites", () => {
    const blocked = async (label: RegExp) =>
      await assertPrecondition(async () => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, label);
    const deletes = async () => {
      await store.groups.delete(A1X);
      assert.equal(await store.groups.get(A1X), null);
    };

    test("an identity provider in the group blocks it, naming identity providers", async () => {
      await store.identityProviders.create(identityProvider(below(A1X, "6"), A1X, "okta", VIEWER));
      await blocked(/\bidentity providers\b/);
      assert.equal((await store.groups.get(A1X))?.name, "svc");
      await store.identityProviders.delete(below(A1X, "6"));
      await deletes();
    });

    test("the group's account association blocks it, naming account associations", async () => {
      await store.accountAssociations.create(association(A1X, "aws"));
      await blocked(/\baccount associations\b/);
      assert.equal((await store.groups.get(A1X))?.name, "svc");
      assert.equal(await store.accountAssociations.delete(A1X), true);
      await deletes();
    });

    test("a group invite to the group blocks it, naming group invites", async () => {
      await store.groupInvites.create(invite(below(A1X, "7"), A1X, VIEWER, "k1"));
      await blocked(/\bgroup invites\b/);
      assert.equal((await store.groups.get(A1X))?.name, "svc");
      await store.groupInvites.delete(below(A1X, "7"));
      await deletes();
    });
  });
}
