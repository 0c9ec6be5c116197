import assert from "node:assert/strict";
import type {
  AccountAssociationRecord,
  GroupInviteRecord,
  GroupRecord,
  IdentityProviderRecord,
  IdentityRecord,
  RoleBindingRecord,
  RoleRecord,
  Store,
} from "../../src/store/store.js";
import {
  association,
  binding,
  CLAIM_MATCH,
  group,
  hexSegments,
  identity,
  identityProvider,
  invite,
  OIDC,
  PROVIDERS,
  role,
  STATIC_KEYS,
} from "./store-fixtures.js";

// The records the paged walks run over: for each kind, many records across a
// tree of groups, with repeated names and times so every order needs the uid
// tie-break, and tie-breaking uids that differ from insertion order.

/** What a walk runs over: the records created (as stored after every write) and the root with descendants. */
export interface WalkFixture<T> {
  records: T[];
  root: string;
}

/**
 * 23 groups under three roots, with duplicated names and many equal
 * create and update times, so every order needs the uid tie-break.
 * Returns them in creation order; the first is the root with descendants.
 */
export async function buildPagingTree(store: Store): Promise<GroupRecord[]> {
  const seg = hexSegments(7, 16);
  const rootSeg = hexSegments(11, 40);
  const names = ["ops", "dev", "ops", "web app", "dev", "ops", "data.lake", "ops"];
  const times = [1_000, 1_000, 2_000, 1_000, 3_000, 2_000, 1_000];
  const out: GroupRecord[] = [];
  const add = async (parent: GroupRecord | null) => {
    const i = out.length;
    const uid = parent === null ? rootSeg.next().value! : `${parent.uid}/${seg.next().value!}`;
    const t = times[i % times.length]!;
    const g = group(uid, parent?.uid ?? null, names[i % names.length]!, { createTime: t, updateTime: t });
    await store.groups.create(g);
    out.push(g);
    return g;
  };
  const root = await add(null);
  for (let c = 0; c < 4; c++) {
    const child = await add(root);
    for (let gc = 0; gc < 3; gc++) await add(child);
  }
  const second = await add(null);
  await add(second);
  await add(second);
  await add(null);
  assert.equal(out.length, 21);
  await add(out[1]!);
  await add(out[17]!);
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
    out[i] = await store.groups.update(out[i]!.uid, { description: `touched ${i}` }, t);
  }
  return out;
}

/**
 * Where the walks put their records: an index into the paging tree, or -1 for
 * root level. Groups 0..16 and 21 lie in the first root; 17..19 and 22 in the
 * second; 20 is the third.
 */
export const OWNERS = [0, 1, -1, 5, 9, 17, 20, 2, 13, -1, 0, 21, 1, -1, 22, 0, 3];

/** Identities in groups across the tree and at root level, both relationship kinds. */
export async function buildIdentityWalk(store: Store): Promise<WalkFixture<IdentityRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(13, 16);
  const rootSeg = hexSegments(17, 40);
  const names = ["ci", "deployer", "ci", "Ada Lovelace", "bot", "ci"];
  const times = [1_000, 2_000, 1_000, 1_000, 3_000];
  const out: IdentityRecord[] = [];
  await store.transaction(async (tx) => {
    for (const [i, owner] of OWNERS.entries()) {
      const parentUid = owner < 0 ? null : groups[owner]!.uid;
      const uid = parentUid === null ? rootSeg.next().value! : `${parentUid}/${seg.next().value!}`;
      const t = times[i % times.length]!;
      const rec = identity(uid, parentUid, names[i % names.length]!, {
        relationship: i % 2 === 0 ? CLAIM_MATCH : STATIC_KEYS,
        email: parentUid === null ? `user${i}@example.com` : "",
        createTime: t,
        updateTime: t,
      });
      await tx.identities.create(rec);
      out.push(rec);
    }
    for (const [i, t] of [
      [0, 9_000],
      [4, 9_000],
      [7, 8_000],
      [13, 9_000],
    ] as const) {
      out[i] = await tx.identities.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Custom roles in groups across the tree, and built-in (root-level) roles. */
export async function buildRoleWalk(store: Store): Promise<WalkFixture<RoleRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(19, 16);
  const rootSeg = hexSegments(23, 40);
  const names = ["viewer", "editor", "viewer", "owner", "deployer"];
  const times = [2_000, 1_000, 1_000, 2_000, 3_000, 1_000];
  const out: RoleRecord[] = [];
  await store.transaction(async (tx) => {
    for (const [i, owner] of OWNERS.entries()) {
      const parentUid = owner < 0 ? null : groups[owner]!.uid;
      const uid = parentUid === null ? rootSeg.next().value! : `${parentUid}/${seg.next().value!}`;
      const t = times[i % times.length]!;
      const rec = role(uid, parentUid, names[i % names.length]!, [1 + (i % 3), 10 + i], { createTime: t, updateTime: t });
      await tx.roles.create(rec);
      out.push(rec);
    }
    for (const [i, t] of [
      [2, 9_000],
      [5, 8_000],
      [10, 9_000],
      [16, 9_000],
    ] as const) {
      out[i] = await tx.roles.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Bindings at groups across the tree, several per group, with repeated create times. */
export async function buildRoleBindingWalk(store: Store): Promise<WalkFixture<RoleBindingRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(29, 16);
  const rootSeg = hexSegments(31, 40);
  const times = [1_000, 2_000, 1_000, 3_000, 1_000, 2_000];
  const out: RoleBindingRecord[] = [];
  await store.transaction(async (tx) => {
    const people = [0, 1, 2].map((i) => identity(rootSeg.next().value!, null, `person ${i}`));
    for (const p of people) await tx.identities.create(p);
    const roles = [role(rootSeg.next().value!, null, "viewer"), role(`${groups[0]!.uid}/${seg.next().value!}`, groups[0]!.uid, "ops")];
    for (const r of roles) await tx.roles.create(r);
    const at = OWNERS.map((owner) => (owner < 0 ? 4 : owner));
    const bindings = [...at, 0, 4, 17].map((g, i) =>
      binding(`${groups[g]!.uid}/${seg.next().value!}`, groups[g]!.uid, people[i % 3]!.uid, roles[i % 2]!.uid, times[i % times.length]!),
    );
    // One batch and single creates both build the fixture.
    await tx.roleBindings.create(bindings.slice(0, 10));
    for (const b of bindings.slice(10)) await tx.roleBindings.create([b]);
    out.push(...bindings);
  });
  return { records: out, root: groups[0]!.uid };
}

/** The owner of each OWNERS entry for kinds that always live in a group: root level moves to group 4. */
const IN_GROUP = OWNERS.map((owner) => (owner < 0 ? 4 : owner));

/** Providers in groups across the tree, two default roles, OIDC settings that differ between them. */
export async function buildIdentityProviderWalk(store: Store): Promise<WalkFixture<IdentityProviderRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(37, 16);
  const rootSeg = hexSegments(41, 40);
  const names = ["okta", "entra", "okta", "Google Workspace", "keycloak", "okta"];
  const times = [1_000, 2_000, 1_000, 3_000, 1_000];
  const out: IdentityProviderRecord[] = [];
  await store.transaction(async (tx) => {
    const roles = [role(rootSeg.next().value!, null, "viewer"), role(`${groups[0]!.uid}/${seg.next().value!}`, groups[0]!.uid, "ops")];
    for (const r of roles) await tx.roles.create(r);
    for (const [i, g] of IN_GROUP.entries()) {
      const parentUid = groups[g]!.uid;
      const t = times[i % times.length]!;
      const rec = identityProvider(`${parentUid}/${seg.next().value!}`, parentUid, names[i % names.length]!, roles[i % 2]!.uid, {
        oidc: { ...OIDC, clientSecret: i % 3 === 0 ? "" : `secret ${i}`, pkceEnabled: i % 2 === 0, additionalScopes: [] },
        createTime: t,
        updateTime: t,
      });
      await tx.identityProviders.create(rec);
      out.push(rec);
    }
    for (const [i, t] of [
      [1, 9_000],
      [6, 8_000],
      [11, 9_000],
      [15, 9_000],
    ] as const) {
      out[i] = await tx.identityProviders.update(out[i]!.uid, { description: `touched ${i}`, defaultRole: roles[0]!.uid }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Groups of the paging tree that get an account association: the three roots (0, 17, 20) and many below them. */
const ASSOCIATED = [0, 1, 2, 3, 5, 8, 9, 12, 13, 16, 17, 18, 20, 21, 22];

/** One association on each of many groups, roots included, with repeated names and times. */
export async function buildAccountAssociationWalk(store: Store): Promise<WalkFixture<AccountAssociationRecord>> {
  const groups = await buildPagingTree(store);
  const names = ["aws prod", "gcp", "aws prod", "azure", "everything"];
  const times = [2_000, 1_000, 1_000, 3_000, 2_000, 1_000];
  const out: AccountAssociationRecord[] = [];
  await store.transaction(async (tx) => {
    for (const [i, g] of ASSOCIATED.entries()) {
      const t = times[i % times.length]!;
      const rec = association(groups[g]!.uid, names[i % names.length]!, {
        providers: i % 4 === 0 ? PROVIDERS : { google: { projectId: `p-${i}`, projectNumber: `${1000 + i}` } },
        createTime: t,
        updateTime: t,
      });
      await tx.accountAssociations.create(rec);
      out.push(rec);
    }
    for (const [i, t] of [
      [0, 9_000],
      [4, 8_000],
      [9, 9_000],
      [12, 9_000],
    ] as const) {
      out[i] = await tx.accountAssociations.update(out[i]!.uid, { description: `touched ${i}` }, t);
    }
  });
  return { records: out, root: groups[0]!.uid };
}

/** Invites at groups across the tree; expiration order differs from creation order, both with ties. */
export async function buildGroupInviteWalk(store: Store): Promise<WalkFixture<GroupInviteRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(43, 16);
  const rootSeg = hexSegments(47, 40);
  const times = [1_000, 2_000, 1_000, 3_000, 1_000, 2_000];
  const expirations = [90_000, 50_000, 90_000, 70_000, 50_000];
  const out: GroupInviteRecord[] = [];
  await store.transaction(async (tx) => {
    const roles = [role(rootSeg.next().value!, null, "viewer"), role(`${groups[0]!.uid}/${seg.next().value!}`, groups[0]!.uid, "ops")];
    for (const r of roles) await tx.roles.create(r);
    for (const [i, g] of [...IN_GROUP, 0, 17].entries()) {
      const groupUid = groups[g]!.uid;
      const rec = invite(`${groupUid}/${seg.next().value!}`, groupUid, roles[i % 2]!.uid, `key-${seg.next().value!}`, {
        email: i % 3 === 0 ? `invitee${i}@example.com` : "",
        singleUse: i % 2 === 1,
        codeHash: seg.next().value!.repeat(4),
        createTime: times[i % times.length]!,
        expirationTime: expirations[i % expirations.length]!,
      });
      await tx.groupInvites.create(rec);
      out.push(rec);
    }
  });
  return { records: out, root: groups[0]!.uid };
}
