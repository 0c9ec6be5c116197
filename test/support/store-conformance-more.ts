import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import { AlreadyExistsError } from "../../src/domain/errors.js";
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
import { assertNotFound, assertPrecondition } from "./store-conformance-iam.js";
import {
  A,
  A1,
  A1X,
  A2,
  B,
  B1,
  C,
  OIDC,
  PROVIDERS,
  association,
  hierarchyFixture,
  identityProvider,
  invite,
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

function assertAlreadyExists(fn: () => unknown, kind: string, uid: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof AlreadyExistsError, `expected AlreadyExistsError, got ${String(err)}`);
    assert.deepEqual(err.metadata, { kind, uid });
    return true;
  });
}

/** Conformance of identity providers, account associations and group invites, and the group and role deletions they block. */
export function moreConformance(getStore: () => Store): void {
  describe("identity providers, account associations and group invites", () => moreContracts(getStore));
}

function moreContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(() => {
    store = getStore();
    for (const g of hierarchyFixture()) store.groups.create(g);
    store.roles.create(role(VIEWER, null, "viewer"));
    store.roles.create(role(RA, A, "editor"));
  });

  /** uids of one whole list, checking it is one page and counted exactly. */
  const uidsOf = (list: () => { items: { uid: string }[]; hasMore: boolean; totalCount: number }) => {
    const r = list();
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((i) => i.uid);
  };
  const idpUids = (hierarchy: HierarchyFilter, filter: IdentityProviderFilter = {}, visibleWithin: readonly string[] | null = null) =>
    uidsOf(() => store.identityProviders.list(query<IdentityProviderFilter, IdentityProviderOrder>({ hierarchy, filter, visibleWithin })));
  const assocUids = (hierarchy: HierarchyFilter, filter: AccountAssociationFilter = {}, visibleWithin: readonly string[] | null = null) =>
    uidsOf(() =>
      store.accountAssociations.list(
        query<AccountAssociationFilter, AccountAssociationOrder>({ hierarchy, filter, visibleWithin, order: { field: "group", desc: false } }),
      ),
    );
  const inviteUids = (hierarchy: HierarchyFilter, filter: GroupInviteFilter = {}, visibleWithin: readonly string[] | null = null) =>
    uidsOf(() => store.groupInvites.list(query<GroupInviteFilter, GroupInviteOrder>({ hierarchy, filter, visibleWithin })));

  describe("identity providers: create, get, update, delete, list", () => {
    test("OIDC settings round-trip exactly, client secret included; get returns null when absent", () => {
      const full = identityProvider(IDP_A, A, "okta", VIEWER, { description: "sign in", createTime: 1_001, updateTime: 1_002 });
      const bare = identityProvider(IDP_A1, A1, "entra", RA, {
        oidc: { issuer: "https://id.example", clientId: "c", clientSecret: "", additionalScopes: [], groupsClaim: "", correlationRule: 0, pkceEnabled: true },
      });
      store.identityProviders.create(full);
      store.identityProviders.create(bare);
      assert.deepEqual(store.identityProviders.get(IDP_A), full);
      assert.equal(store.identityProviders.get(IDP_A)?.oidc.clientSecret, OIDC.clientSecret);
      assert.deepEqual(store.identityProviders.get(IDP_A1), bare);
      // Listed in uid order: IDP_A1 (below A/111…) sorts before IDP_A (A/666…).
      assert.deepEqual(store.identityProviders.list(query<IdentityProviderFilter, IdentityProviderOrder>({})).items, [bare, full]);
      assert.equal(store.identityProviders.get(IDP_B1), null);
    });

    test("a missing group or default role throws NotFoundError naming it; a taken uid throws AlreadyExistsError", () => {
      const missingGroup = below(C, "8");
      const missingRole = below(A, "e");
      assertNotFound(() => store.identityProviders.create(identityProvider(below(missingGroup, "6"), missingGroup, "x", VIEWER)), "group", missingGroup);
      assertNotFound(() => store.identityProviders.create(identityProvider(IDP_A, A, "x", missingRole)), "role", missingRole);
      assert.equal(store.identityProviders.get(IDP_A), null);
      assert.deepEqual(idpUids({}), []);
      store.identityProviders.create(identityProvider(IDP_A, A, "first", VIEWER));
      assertAlreadyExists(() => store.identityProviders.create(identityProvider(IDP_A, A, "second", RA)), "identity provider", IDP_A);
      assert.deepEqual(store.identityProviders.get(IDP_A), identityProvider(IDP_A, A, "first", VIEWER));
    });

    test("update returns the changed provider, moves updateTime, and keeps the rest; missing ones throw NotFoundError", () => {
      const before = identityProvider(IDP_A1, A1, "okta", VIEWER, { description: "kept", createTime: 1_000, updateTime: 1_000 });
      store.identityProviders.create(before);
      const renamed = store.identityProviders.update(IDP_A1, { name: "okta prod", defaultRole: RA }, 5_000);
      assert.deepEqual(renamed, { ...before, name: "okta prod", defaultRole: RA, updateTime: 5_000 });
      assert.deepEqual(store.identityProviders.get(IDP_A1), renamed);
      const oidc = { ...OIDC, clientSecret: "", additionalScopes: ["offline_access"], pkceEnabled: false };
      const reconfigured = store.identityProviders.update(IDP_A1, { oidc, description: "" }, 6_000);
      assert.deepEqual(reconfigured, { ...renamed, oidc, description: "", updateTime: 6_000 });
      assert.deepEqual(store.identityProviders.get(IDP_A1), reconfigured);

      assertNotFound(() => store.identityProviders.update(IDP_A1, { defaultRole: RA1 }, 7_000), "role", RA1);
      assertNotFound(() => store.identityProviders.update(IDP_B1, { name: "x" }, 7_000), "identity provider", IDP_B1);
      assert.deepEqual(store.identityProviders.get(IDP_A1), reconfigured);
    });

    test("delete removes the provider; a missing one throws NotFoundError", () => {
      store.identityProviders.create(identityProvider(IDP_A, A, "okta", VIEWER));
      store.identityProviders.create(identityProvider(IDP_B1, B1, "okta", VIEWER));
      assert.equal(idpUids({}).length, 2);
      store.identityProviders.delete(IDP_A);
      assert.equal(store.identityProviders.get(IDP_A), null);
      assert.deepEqual(idpUids({}), [IDP_B1]);
      assertNotFound(() => store.identityProviders.delete(IDP_A), "identity provider", IDP_A);
    });

    test("list filters by name, hierarchy and visibility", () => {
      store.identityProviders.create(identityProvider(IDP_A, A, "okta", VIEWER));
      store.identityProviders.create(identityProvider(IDP_A1, A1, "okta", RA));
      store.identityProviders.create(identityProvider(IDP_B1, B1, "entra", VIEWER));
      assert.deepEqual(idpUids({}, { name: "okta" }), sorted([IDP_A, IDP_A1]));
      assert.deepEqual(idpUids({ descendantsOf: A }), sorted([IDP_A, IDP_A1]));
      assert.deepEqual(idpUids({ childrenOf: A1 }), [IDP_A1]);
      assert.deepEqual(idpUids({ descendantsOf: B }, { name: "okta" }), []);
      assert.deepEqual(idpUids({ inRoot: true }), []);
      assert.deepEqual(idpUids({ ids: [IDP_B1, below(C, "6")] }), [IDP_B1]);
      assert.deepEqual(idpUids({}, {}, [A1, B]), sorted([IDP_A1, IDP_B1]));
      assert.deepEqual(idpUids({}, {}, []), []);
    });

    test("a role that is a provider's default role cannot be deleted (ROLE_IN_USE naming identity providers)", () => {
      store.identityProviders.create(identityProvider(IDP_A1, A1, "okta", RA));
      assertPrecondition(() => store.roles.delete(RA), "ROLE_IN_USE", RA, /identity providers/);
      assert.equal(store.roles.get(RA)?.name, "editor");
      assert.equal(store.identityProviders.get(IDP_A1)?.defaultRole, RA);
      store.identityProviders.update(IDP_A1, { defaultRole: VIEWER }, 2_000);
      store.roles.delete(RA);
      assert.equal(store.roles.get(RA), null);
    });
  });

  describe("account associations: create, get, update, delete, list", () => {
    test("providers of every kind round-trip exactly; get returns null when absent", () => {
      const full = association(A, "everything", { description: "all clouds", providers: PROVIDERS, createTime: 1_001, updateTime: 1_002 });
      const empty = association(A1X, "none", { providers: {} });
      store.accountAssociations.create(full);
      store.accountAssociations.create(empty);
      assert.deepEqual(store.accountAssociations.get(A), full);
      assert.deepEqual(store.accountAssociations.get(A1X), empty);
      assert.equal(store.accountAssociations.get(A1), null);
      assert.equal(store.accountAssociations.get(below(C, "8")), null);
    });

    test("a missing group throws NotFoundError naming it; a second association on a group throws AlreadyExistsError", () => {
      const missing = below(C, "8");
      assertNotFound(() => store.accountAssociations.create(association(missing, "x")), "group", missing);
      assert.equal(store.accountAssociations.get(missing), null);
      store.accountAssociations.create(association(A1, "first"));
      assertAlreadyExists(() => store.accountAssociations.create(association(A1, "second", { providers: PROVIDERS })), "account association", A1);
      assert.deepEqual(store.accountAssociations.get(A1), association(A1, "first"));
      assert.deepEqual(assocUids({}), [A1]);
    });

    test("update returns the changed association, moves updateTime, and keeps the rest; a missing one throws NotFoundError", () => {
      const before = association(B, "aws", { description: "kept", createTime: 1_000, updateTime: 1_000 });
      store.accountAssociations.create(before);
      const changed = store.accountAssociations.update(B, { providers: PROVIDERS, name: "all" }, 5_000);
      assert.deepEqual(changed, { ...before, providers: PROVIDERS, name: "all", updateTime: 5_000 });
      assert.deepEqual(store.accountAssociations.get(B), changed);
      const cleared = store.accountAssociations.update(B, { providers: {}, description: "" }, 6_000);
      assert.deepEqual(cleared, { ...changed, providers: {}, description: "", updateTime: 6_000 });
      assert.deepEqual(store.accountAssociations.get(B), cleared);
      assertNotFound(() => store.accountAssociations.update(B1, { name: "x" }, 7_000), "account association", B1);
      assert.equal(store.accountAssociations.get(B1), null);
    });

    test("delete returns true once, then false; deleting what never existed is false", () => {
      store.accountAssociations.create(association(A, "org"));
      store.accountAssociations.create(association(A1, "team"));
      assert.equal(assocUids({}).length, 2);
      assert.equal(store.accountAssociations.delete(A), true);
      assert.equal(store.accountAssociations.get(A), null);
      assert.equal(store.accountAssociations.delete(A), false);
      assert.equal(store.accountAssociations.delete(C), false);
      assert.deepEqual(assocUids({}), [A1]);
      assert.equal(store.groups.get(A)?.name, "org", "the group stays");
    });

    test("hierarchy filters and visibility treat the association as its group", () => {
      for (const [uid, name] of [[A, "org"], [A1, "team"], [A1X, "svc"], [A2, "team"], [B, "org"], [B1, "team"]] as const) {
        store.accountAssociations.create(association(uid, name));
      }
      assert.deepEqual(assocUids({}), sorted([A, A1, A1X, A2, B, B1]));
      assert.deepEqual(assocUids({ inRoot: true }), sorted([A, B]));
      assert.deepEqual(assocUids({ childrenOf: A }), sorted([A1, A2]));
      assert.deepEqual(assocUids({ descendantsOf: A }), sorted([A1, A1X, A2]));
      assert.deepEqual(assocUids({ ancestorsOf: A1X }), sorted([A, A1]));
      assert.deepEqual(assocUids({ ids: [A1X, B, C] }), sorted([A1X, B]));
      assert.deepEqual(assocUids({}, { name: "team" }), sorted([A1, A2, B1]));
      assert.deepEqual(assocUids({ descendantsOf: A }, { name: "team" }), sorted([A1, A2]));
      assert.deepEqual(assocUids({}, {}, [A1]), sorted([A1, A1X]), "visible at the group itself and below");
      assert.deepEqual(assocUids({}, {}, [A1X, B]), sorted([A1X, B, B1]));
      assert.deepEqual(assocUids({}, {}, []), []);
    });
  });

  describe("group invites: create, get, findByKeyId, delete, consume, list", () => {
    test("every field round-trips; findByKeyId finds by the key id only; absent ones are null", () => {
      const full = invite(INV_A1, A1, RA, "key-a1", {
        email: "ada@example.com",
        singleUse: true,
        codeHash: "ab".repeat(32),
        expirationTime: 1_800_000_000_123,
        createTime: 1_700_000_000_321,
      });
      const open = invite(INV_B1, B1, VIEWER, "key-b1");
      store.groupInvites.create(full);
      store.groupInvites.create(open);
      assert.deepEqual(store.groupInvites.get(INV_A1), full);
      assert.deepEqual(store.groupInvites.get(INV_B1), open);
      assert.deepEqual(store.groupInvites.findByKeyId("key-a1"), full);
      assert.deepEqual(store.groupInvites.findByKeyId("key-b1"), open);
      assert.equal(store.groupInvites.findByKeyId("key-a"), null);
      assert.equal(store.groupInvites.findByKeyId(INV_A1), null);
      assert.equal(store.groupInvites.get(INV_A), null);
    });

    test("a missing group or role throws NotFoundError naming it; a taken uid or keyId throws AlreadyExistsError", () => {
      const missingGroup = below(C, "8");
      const missingRole = below(A, "e");
      assertNotFound(() => store.groupInvites.create(invite(below(missingGroup, "7"), missingGroup, VIEWER, "k1")), "group", missingGroup);
      assertNotFound(() => store.groupInvites.create(invite(INV_A, A, missingRole, "k1")), "role", missingRole);
      assert.equal(store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(inviteUids({}), []);

      store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      assertAlreadyExists(() => store.groupInvites.create(invite(INV_A, A, RA, "k2")), "group invite", INV_A);
      assertAlreadyExists(() => store.groupInvites.create(invite(INV_A1, A1, RA, "k1")), "group invite key", "k1");
      assert.equal(store.groupInvites.get(INV_A1), null);
      assert.equal(store.groupInvites.findByKeyId("k2"), null);
      assert.deepEqual(store.groupInvites.findByKeyId("k1"), invite(INV_A, A, VIEWER, "k1"));
    });

    test("delete removes the invite; a missing one throws NotFoundError", () => {
      store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k2"));
      assert.equal(inviteUids({}).length, 2);
      store.groupInvites.delete(INV_A);
      assert.equal(store.groupInvites.get(INV_A), null);
      assert.equal(store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(inviteUids({}), [INV_B1]);
      assertNotFound(() => store.groupInvites.delete(INV_A), "group invite", INV_A);
    });

    test("consume returns true once, then false; a rolled-back consume leaves the invite", () => {
      store.groupInvites.create(invite(INV_A1, A1, RA, "k1", { singleUse: true }));
      assert.throws(
        () =>
          store.transaction(() => {
            assert.equal(store.groupInvites.consume(INV_A1), true);
            assert.equal(store.groupInvites.get(INV_A1), null);
            throw new Error("binding failed");
          }),
        /binding failed/,
      );
      assert.equal(store.groupInvites.get(INV_A1)?.keyId, "k1");
      assert.deepEqual(inviteUids({}), [INV_A1]);

      assert.equal(store.groupInvites.consume(INV_A1), true);
      assert.equal(store.groupInvites.consume(INV_A1), false);
      assert.equal(store.groupInvites.get(INV_A1), null);
      assert.equal(store.groupInvites.findByKeyId("k1"), null);
      assert.deepEqual(inviteUids({}), []);
      assert.equal(store.groupInvites.consume(INV_B1), false);
    });

    test("an invite disappears when its role is deleted, from get, findByKeyId, list and totalCount", () => {
      store.groupInvites.create(invite(INV_A, A, RA, "k1"));
      store.groupInvites.create(invite(INV_A1, A1, RA, "k2"));
      store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k3"));
      // Fill any cached counts before the delete, so a stale count would show.
      assert.equal(inviteUids({}).length, 3);
      assert.equal(inviteUids({ descendantsOf: A }).length, 2);
      store.roles.delete(RA);
      assert.equal(store.groupInvites.get(INV_A), null);
      assert.equal(store.groupInvites.get(INV_A1), null);
      assert.equal(store.groupInvites.findByKeyId("k2"), null);
      assert.deepEqual(inviteUids({}), [INV_B1]);
      assert.deepEqual(inviteUids({ descendantsOf: A }), []);
      assert.deepEqual(store.groupInvites.get(INV_B1), invite(INV_B1, B1, VIEWER, "k3"));
    });

    test("list filters by keyId, hierarchy and visibility", () => {
      store.groupInvites.create(invite(INV_A, A, VIEWER, "k1"));
      store.groupInvites.create(invite(INV_A1, A1, RA, "k2"));
      store.groupInvites.create(invite(INV_B1, B1, VIEWER, "k3"));
      assert.deepEqual(inviteUids({}, { keyId: "k2" }), [INV_A1]);
      assert.deepEqual(inviteUids({}, { keyId: "k" }), []);
      assert.deepEqual(inviteUids({ descendantsOf: A }), sorted([INV_A, INV_A1]));
      assert.deepEqual(inviteUids({ childrenOf: A }), [INV_A]);
      assert.deepEqual(inviteUids({ descendantsOf: A }, { keyId: "k3" }), []);
      assert.deepEqual(inviteUids({ inRoot: true }), []);
      assert.deepEqual(inviteUids({}, {}, [A1, B1]), sorted([INV_A1, INV_B1]));
      assert.deepEqual(inviteUids({}, {}, []), []);
    });
  });

  describe("groups: deletion blocked by identity providers, account associations and group invites", () => {
    const blocked = (label: RegExp) => assertPrecondition(() => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, label);
    const deletes = () => {
      store.groups.delete(A1X);
      assert.equal(store.groups.get(A1X), null);
    };

    test("an identity provider in the group blocks it, naming identity providers", () => {
      store.identityProviders.create(identityProvider(below(A1X, "6"), A1X, "okta", VIEWER));
      blocked(/\bidentity providers\b/);
      assert.equal(store.groups.get(A1X)?.name, "svc");
      store.identityProviders.delete(below(A1X, "6"));
      deletes();
    });

    test("the group's account association blocks it, naming account associations", () => {
      store.accountAssociations.create(association(A1X, "aws"));
      blocked(/\baccount associations\b/);
      assert.equal(store.groups.get(A1X)?.name, "svc");
      assert.equal(store.accountAssociations.delete(A1X), true);
      deletes();
    });

    test("a group invite to the group blocks it, naming group invites", () => {
      store.groupInvites.create(invite(below(A1X, "7"), A1X, VIEWER, "k1"));
      blocked(/\bgroup invites\b/);
      assert.equal(store.groups.get(A1X)?.name, "svc");
      store.groupInvites.delete(below(A1X, "7"));
      deletes();
    });
  });
}
