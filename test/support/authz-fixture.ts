import assert from "node:assert/strict";
import { rest, type RestResult, type TestServer } from "./server.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

/** A caller of the API: an identity and an API token minted for it. */
export interface Caller {
  uid: string;
  token: string;
  /** The Authorization header value. */
  bearer: string;
}

/** One organization of the authorization fixture, built by the administrator. */
export interface Tenant {
  org: Json;
  folder: Json;
  sub: Json;
  /** A workload identity (claimMatch) in the org. */
  identity: Json;
  /** A custom role defined at the org. */
  role: Json;
  /** A binding of identity to role at the org. */
  binding: Json;
  /** An identity in the org bound to the built-in owner role at the org. */
  owner: Caller;
  /** owner's binding. */
  ownerBinding: Json;
  /** An OIDC identity provider at the org (default role viewer). */
  idp: Json;
  /** The org's account association (its uid is the org's). */
  association: Json;
  /** An invite to the org (viewer), as created: the only response that shows its code. */
  invite: Json;
  /** A repo in the org. */
  repo: Json;
  /** A tag of repo. */
  tag: Json;
  /** A subscription of the folder's events (its sink refuses connections: deliveries are retried, nothing arrives). */
  subscription: Json;
}

/**
 * Orgs A and B (each org → folder → sub, an identity, a custom role, a binding,
 * an owner), plus in A a sibling folder, viewerA (viewer at A) and ownerA2
 * (owner only at A/folder, its identity inside that folder).
 */
export interface AuthzFixture {
  /** Built-in role uids by name. */
  builtin: Record<string, string>;
  A: Tenant & { sibling: Json; viewer: Caller; folderOwner: Caller };
  B: Tenant;
  /** Values no response may ever contain: client secrets and invite codes. */
  secrets: string[];
}

export const ISSUER = "https://ci.example.com";

/** Administrator REST call that must succeed; returns the body. */
export async function adminOk(srv: TestServer, method: string, path: string, body?: unknown): Promise<Json> {
  const res = await rest(srv.url, method, path, body);
  assert.equal(res.status, 200, `${method} ${path}: ${JSON.stringify(res.body)}`);
  return res.body;
}

/** REST as a given caller ("" sends no Authorization header). */
export function restAs(srv: TestServer, caller: Caller | string, method: string, path: string, body?: unknown): Promise<RestResult> {
  const bearer = typeof caller === "string" ? caller : caller.bearer;
  return rest(srv.url, method, path, body, { authorization: bearer });
}

/** Creates an identity in group with a claimMatch on subject, binds it roleUid at scope and mints its token. */
export async function makeCaller(
  srv: TestServer,
  group: string,
  name: string,
  roleUid: string | null,
  scope = group,
): Promise<{ caller: Caller; binding: Json }> {
  const identity = await adminOk(srv, "POST", `/iam/v2beta1/identities/${group}`, {
    name,
    claimMatch: { issuer: ISSUER, subject: `sub-${name}` },
  });
  const binding =
    roleUid === null ? null : await adminOk(srv, "POST", `/iam/v2beta1/roleBindings/${scope}`, { identityUid: identity.uid, roleUid });
  const { token } = await srv.server.tokens.mint(identity.uid);
  return { caller: { uid: identity.uid, token, bearer: `Bearer ${token}` }, binding };
}

async function tenant(srv: TestServer, label: string, builtin: Record<string, string>): Promise<Tenant> {
  const group = (parent: string, name: string) =>
    adminOk(srv, "POST", `/iam/v2beta1/groups/${parent}`, { name, description: `${name} of ${label}` });
  const org = await adminOk(srv, "POST", "/iam/v2beta1/groups", { name: `org ${label}`, description: `organization ${label}` });
  const folder = await group(org.uid, `folder ${label}`);
  const sub = await group(folder.uid, `sub ${label}`);
  const identity = await adminOk(srv, "POST", `/iam/v2beta1/identities/${org.uid}`, {
    name: `deployer ${label}`,
    description: "a workload",
    claimMatch: { issuer: ISSUER, subject: `repo:${label}/app` },
  });
  const role = await adminOk(srv, "POST", `/iam/v2beta1/roles/${org.uid}`, {
    name: `reader-${label}`,
    description: "custom",
    capabilities: ["CAP_REPO_LIST", "CAP_IAM_GROUPS_LIST"],
  });
  const binding = await adminOk(srv, "POST", `/iam/v2beta1/roleBindings/${org.uid}`, { identityUid: identity.uid, roleUid: role.uid });
  const o = await makeCaller(srv, org.uid, `owner ${label}`, builtin.owner!);
  const idp = await adminOk(srv, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
    name: `idp ${label}`,
    defaultRole: builtin.viewer,
    oidc: { issuer: `https://idp-${label}.example.com`, clientId: `client-${label}`, clientSecret: clientSecret(label) },
  });
  const association = await adminOk(srv, "POST", `/iam/v2beta1/accountAssociations/${org.uid}`, {
    name: `aws ${label}`,
    amazon: { account: "123456789012" },
  });
  const invite = await adminOk(srv, "POST", `/iam/v2beta1/groupInvites/${org.uid}`, { roleUid: builtin.viewer, ttl: "3600s" });
  assert.ok(typeof invite.code === "string" && invite.code.length >= 16, "the create response reveals the invite code");
  const repo = await adminOk(srv, "POST", `/registry/v2beta1/repos/${org.uid}`, {
    name: `images/${label}`,
    description: `repo of ${label}`,
  });
  const tag = await adminOk(srv, "POST", `/registry/v2beta1/tags/${repo.uid}`, { name: "latest", digest: `sha256:${"0".repeat(64)}` });
  const subscription = await adminOk(srv, "POST", `/events/v1/subscriptions/${folder.uid}`, { sink: "http://127.0.0.1:9/hook" });
  return {
    org,
    folder,
    sub,
    identity,
    role,
    binding,
    owner: o.caller,
    ownerBinding: o.binding,
    idp,
    association,
    invite,
    repo,
    tag,
    subscription,
  };
}

const clientSecret = (label: string) => `client-secret-of-${label}-0123456789`;

/** Builds the fixture over REST as the administrator. */
export async function buildAuthzFixture(srv: TestServer): Promise<AuthzFixture> {
  const roles = await adminOk(srv, "GET", "/iam/v2beta1/roles?uidp.in_root=true&page_size=200");
  const builtin: Record<string, string> = {};
  for (const r of roles.roles as Json[]) builtin[r.name] = r.uid;
  assert.ok(builtin.owner && builtin.viewer, "built-in owner and viewer roles are listed");
  const A = await tenant(srv, "a", builtin);
  const B = await tenant(srv, "b", builtin);
  const sibling = await adminOk(srv, "POST", `/iam/v2beta1/groups/${A.org.uid}`, { name: "sibling a" });
  const viewer = (await makeCaller(srv, A.org.uid, "viewer a", builtin.viewer)).caller;
  const folderOwner = (await makeCaller(srv, A.folder.uid, "owner a2", builtin.owner)).caller;
  const secrets = [clientSecret("a"), clientSecret("b"), A.invite.code, B.invite.code];
  return { builtin, A: { ...A, sibling, viewer, folderOwner }, B, secrets };
}

/** Everything at or below org as the administrator sees it, for before/after comparisons. */
export async function snapshot(srv: TestServer, org: string): Promise<Json> {
  const q = `uidp.descendants_of=${org}&page_size=200`;
  return {
    org: await adminOk(srv, "GET", `/iam/v2beta1/groups/${org}`),
    groups: (await adminOk(srv, "GET", `/iam/v2beta1/groups?${q}`)).groups,
    identities: (await adminOk(srv, "GET", `/iam/v2beta1/identities?${q}`)).identities,
    roles: (await adminOk(srv, "GET", `/iam/v2beta1/roles?${q}`)).roles,
    roleBindings: (await adminOk(srv, "GET", `/iam/v2beta1/roleBindings?${q}`)).roleBindings,
    identityProviders: (await adminOk(srv, "GET", `/iam/v2beta1/identityProviders?${q}`)).identityProviders,
    accountAssociations: [
      ...(await adminOk(srv, "GET", `/iam/v2beta1/accountAssociations?uidp.ids=${org}`)).accountAssociations,
      ...(await adminOk(srv, "GET", `/iam/v2beta1/accountAssociations?${q}`)).accountAssociations,
    ],
    groupInvites: (await adminOk(srv, "GET", `/iam/v2beta1/groupInvites?${q}`)).groupInvites,
    repos: (await adminOk(srv, "GET", `/registry/v2beta1/repos?${q}`)).repos,
    tags: (await adminOk(srv, "GET", `/registry/v2beta1/tags?${q}&include_referrers=true&include_dates=true&include_epochs=true`)).tags,
    subscriptions: (await adminOk(srv, "GET", `/events/v1/subscriptions?${q}`)).subscriptions,
  };
}
