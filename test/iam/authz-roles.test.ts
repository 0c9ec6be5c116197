/**
 * What each kind of caller may do (viewer, folder-scoped owner, no token, a
 * bad token), privilege escalation and mass assignment (OWASP API3), and a
 * scan of every response for secret material.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { ServiceError } from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { GroupsService as GroupsV1Service } from "../../gen/platformapi/iam/v1/groups_pb.js";
import { AccountAssociationsService } from "../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import { GroupInvitesService } from "../../gen/platformapi/iam/v2beta1/group_invites_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { IdentitiesService } from "../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { IdentityProvidersService } from "../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import { RoleBindingsService } from "../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import { RolesService } from "../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { methodRule } from "../../src/auth/rules.js";
import { isAtOrBelow } from "../../src/domain/uidp.js";
import { CONTRACT_FILES } from "../../src/services/index.js";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import {
  adminOk,
  buildAuthzFixture,
  ISSUER,
  makeCaller,
  snapshot,
  type AuthzFixture,
  type Caller,
  type Json,
} from "../support/authz-fixture.js";
import { testTransport } from "../support/connect.js";
import { grpcClient, grpcStatus, type GrpcTestClient } from "../support/grpc.js";
import { rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

let srv: TestServer;
let fx: AuthzFixture;
const closers: (() => void)[] = [];
before(async () => {
  srv = await startTestServer();
  fx = await buildAuthzFixture(srv);
});
after(async () => {
  for (const close of closers) close();
  await srv.close();
});

// ---------------------------------------------------------------------------
// Calls as a caller, every response kept for the exposure scan at the end.

/** Every response body this file received, as text. */
const responses: string[] = [];
const V2 = "/iam/v2beta1";
const jsonText = (v: unknown) => JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));

async function as(caller: Caller | string, method: string, path: string, body?: unknown): Promise<RestResult> {
  const res = await rest(srv.url, method, path, body, { authorization: typeof caller === "string" ? caller : caller.bearer });
  responses.push(jsonText(res.body ?? ""));
  return res;
}

async function ok(caller: Caller, method: string, path: string, body?: unknown): Promise<Json> {
  const res = await as(caller, method, path, body);
  assert.equal(res.status, 200, `${method} ${path}: ${JSON.stringify(res.body)}`);
  return res.body;
}

const grpcClients = new Map<string, GrpcTestClient>();
function grpcAs(service: DescService, token: string): GrpcTestClient {
  const key = `${service.typeName} ${token}`;
  let client = grpcClients.get(key);
  if (!client) {
    client = grpcClient(service, srv.port, { token });
    grpcClients.set(key, client);
    closers.push(client.close);
  }
  return client;
}

/** A gRPC call's outcome: the response, or the code and ErrorInfo reasons. */
async function grpcCall(service: DescService, token: string, method: string, request: object, metadata: Record<string, string> = {}) {
  try {
    const res = await grpcAs(service, token).call(method, request, metadata);
    responses.push(jsonText(res));
    return { code: 0, res, reasons: [] as string[], message: "" };
  } catch (err) {
    const e = err as ServiceError;
    assert.equal(typeof e.code, "number", String(err));
    const status = grpcStatus(e);
    responses.push(jsonText(status));
    const reasons = status.details
      .filter((d) => d.$typeName === "google.rpc.ErrorInfo")
      .map((d) => (d as unknown as { reason: string }).reason);
    return { code: e.code, res: undefined, reasons, message: e.details };
  }
}

/** One RPC as REST and as gRPC. */
interface Op {
  label: string;
  service: DescService;
  method: string;
  rest: { method: string; path: string; body?: unknown };
  rpc: object;
}
const op = (label: string, service: DescService, method: string, rest: Op["rest"], rpc: object): Op => ({
  label,
  service,
  method,
  rest,
  rpc,
});
const nameOf = (o: Op) => `${o.service.typeName}/${o.service.methods.find((m) => m.localName === o.method)!.name}`;

/** Asserts PERMISSION_DENIED over REST (403) and gRPC (7), each with one ErrorInfo. */
async function assertDenied(caller: Caller, o: Op): Promise<void> {
  assertRestError(await as(caller, o.rest.method, o.rest.path, o.rest.body), 403, 7, "PERMISSION_DENIED");
  const g = await grpcCall(o.service, caller.token, o.method, o.rpc);
  assert.equal(g.code, 7, `${o.label} over gRPC: ${g.message}`);
  assert.deepEqual(g.reasons, ["PERMISSION_DENIED"]);
}

const V2_IAM: readonly DescService[] = [
  GroupsService,
  IdentitiesService,
  RolesService,
  RoleBindingsService,
  IdentityProvidersService,
  AccountAssociationsService,
  GroupInvitesService,
];
const IAM_SERVICES: readonly DescService[] = [...V2_IAM, GroupsV1Service];

/** Fails when a method of services whose name matches pattern has no op. */
function assertCovered(ops: readonly Op[], services: readonly DescService[], pattern: RegExp): void {
  const covered = new Set(ops.map(nameOf));
  const missing = services
    .flatMap((s) => s.methods.filter((m) => pattern.test(m.name)).map((m) => `${s.typeName}/${m.name}`))
    .filter((n) => !covered.has(n));
  assert.deepEqual(missing, [], "methods without a case");
}

const idpBody = (defaultRole: string) => ({
  name: "new idp",
  defaultRole,
  oidc: { issuer: "https://idp.example.com", clientId: "c", clientSecret: "a-secret" },
});
const idpRpc = (defaultRole: string) => ({
  name: "new idp",
  defaultRole,
  configuration: { case: "oidc", value: { issuer: "https://idp.example.com", clientId: "c", clientSecret: "a-secret" } },
});

/** Every write RPC aimed at group g (and, where it names an existing record, at A's records). */
function writesAt(
  g: string,
  records: { group: string; identity: string; role: string; binding: string; idp: string; association: string; invite: string },
): Op[] {
  const viewer = fx.builtin.viewer!;
  const batch = { parent: g, requests: [{ parent: g, roleBinding: { identityUid: fx.A.identity.uid, roleUid: viewer } }] };
  return [
    op(
      "create group",
      GroupsService,
      "createGroup",
      { method: "POST", path: `${V2}/groups/${g}`, body: { name: "new group" } },
      { parent: g, group: { name: "new group" } },
    ),
    op(
      "update group",
      GroupsService,
      "updateGroup",
      { method: "PATCH", path: `${V2}/groups/${records.group}`, body: { description: "changed" } },
      { group: { uid: records.group, description: "changed" }, updateMask: { paths: ["description"] } },
    ),
    op("delete group", GroupsService, "deleteGroup", { method: "DELETE", path: `${V2}/groups/${records.group}` }, { uid: records.group }),
    op(
      "create identity",
      IdentitiesService,
      "createIdentity",
      { method: "POST", path: `${V2}/identities/${g}`, body: { name: "new identity", claimMatch: { issuer: ISSUER, subject: "new" } } },
      {
        parent: g,
        identity: { name: "new identity", relationship: { case: "claimMatch", value: { issuer: ISSUER, subject: "new" } } },
      },
    ),
    op(
      "update identity",
      IdentitiesService,
      "updateIdentity",
      { method: "PATCH", path: `${V2}/identities/${records.identity}`, body: { description: "changed" } },
      { identity: { uid: records.identity, description: "changed" }, updateMask: { paths: ["description"] } },
    ),
    op(
      "delete identity",
      IdentitiesService,
      "deleteIdentity",
      { method: "DELETE", path: `${V2}/identities/${records.identity}` },
      { uid: records.identity },
    ),
    op(
      "create role",
      RolesService,
      "createRole",
      { method: "POST", path: `${V2}/roles/${g}`, body: { name: "new role", capabilities: ["CAP_REPO_LIST"] } },
      { parent: g, role: { name: "new role", capabilities: [Capability.CAP_REPO_LIST] } },
    ),
    op(
      "update role",
      RolesService,
      "updateRole",
      { method: "PATCH", path: `${V2}/roles/${records.role}`, body: { description: "changed" } },
      { role: { uid: records.role, description: "changed" }, updateMask: { paths: ["description"] } },
    ),
    op("delete role", RolesService, "deleteRole", { method: "DELETE", path: `${V2}/roles/${records.role}` }, { uid: records.role }),
    op(
      "create role binding",
      RoleBindingsService,
      "createRoleBinding",
      { method: "POST", path: `${V2}/roleBindings/${g}`, body: { identityUid: fx.A.identity.uid, roleUid: viewer } },
      {
        parent: g,
        roleBinding: { identityUid: fx.A.identity.uid, roleUid: viewer },
      },
    ),
    op(
      "batch-create role bindings",
      RoleBindingsService,
      "batchCreateRoleBindings",
      { method: "POST", path: `${V2}/roleBindings:batchCreate`, body: batch },
      batch,
    ),
    op(
      "update role binding",
      RoleBindingsService,
      "updateRoleBinding",
      { method: "PATCH", path: `${V2}/roleBindings/${records.binding}`, body: { roleUid: viewer } },
      { roleBinding: { uid: records.binding, roleUid: viewer }, updateMask: { paths: ["role_uid"] } },
    ),
    op(
      "delete role binding",
      RoleBindingsService,
      "deleteRoleBinding",
      { method: "DELETE", path: `${V2}/roleBindings/${records.binding}` },
      { uid: records.binding },
    ),
    op(
      "create identity provider",
      IdentityProvidersService,
      "createIdentityProvider",
      { method: "POST", path: `${V2}/identityProviders/${g}`, body: idpBody(viewer) },
      { parent: g, identityProvider: idpRpc(viewer) },
    ),
    op(
      "update identity provider",
      IdentityProvidersService,
      "updateIdentityProvider",
      { method: "PATCH", path: `${V2}/identityProviders/${records.idp}`, body: { description: "changed" } },
      {
        identityProvider: { uid: records.idp, description: "changed" },
        updateMask: { paths: ["description"] },
      },
    ),
    op(
      "delete identity provider",
      IdentityProvidersService,
      "deleteIdentityProvider",
      { method: "DELETE", path: `${V2}/identityProviders/${records.idp}` },
      { uid: records.idp },
    ),
    op(
      "create account association",
      AccountAssociationsService,
      "createAccountAssociation",
      { method: "POST", path: `${V2}/accountAssociations/${g}`, body: { name: "aws", amazon: { account: "210987654321" } } },
      {
        parent: g,
        accountAssociation: { name: "aws", amazon: { account: "210987654321" } },
      },
    ),
    op(
      "update account association",
      AccountAssociationsService,
      "updateAccountAssociation",
      { method: "PATCH", path: `${V2}/accountAssociations/${records.association}`, body: { description: "changed" } },
      {
        accountAssociation: { uid: records.association, description: "changed" },
        updateMask: { paths: ["description"] },
      },
    ),
    op(
      "delete account association",
      AccountAssociationsService,
      "deleteAccountAssociation",
      { method: "DELETE", path: `${V2}/accountAssociations/${records.association}` },
      { uid: records.association },
    ),
    op(
      "create group invite",
      GroupInvitesService,
      "createGroupInvite",
      { method: "POST", path: `${V2}/groupInvites/${g}`, body: { roleUid: viewer, ttl: "3600s" } },
      { parent: g, groupInvite: { roleUid: viewer, ttl: { seconds: 3600n } } },
    ),
    op(
      "delete group invite",
      GroupInvitesService,
      "deleteGroupInvite",
      { method: "DELETE", path: `${V2}/groupInvites/${records.invite}` },
      { uid: records.invite },
    ),
  ];
}

/** The write RPCs against A's own records. */
const writesInA = () =>
  writesAt(fx.A.org.uid, {
    group: fx.A.org.uid,
    identity: fx.A.identity.uid,
    role: fx.A.role.uid,
    binding: fx.A.binding.uid,
    idp: fx.A.idp.uid,
    association: fx.A.association.uid,
    invite: fx.A.invite.uid,
  });

// ---------------------------------------------------------------------------

describe("viewerA (viewer at A)", () => {
  /** Every Get and List over A's records, with the REST path the administrator's answer is compared on. */
  function reads(): Op[] {
    const A = fx.A;
    const below = `uidp.descendants_of=${A.org.uid}&page_size=200`;
    const get = (service: DescService, method: string, collection: string, uid: string) =>
      op(`get ${collection}`, service, method, { method: "GET", path: `${V2}/${collection}/${uid}` }, { uid });
    const list = (service: DescService, method: string, collection: string) =>
      op(
        `list ${collection}`,
        service,
        method,
        { method: "GET", path: `${V2}/${collection}?${below}` },
        { uidp: { descendantsOf: A.org.uid }, pageSize: 200 },
      );
    return [
      get(GroupsService, "getGroup", "groups", A.org.uid),
      get(GroupsService, "getGroup", "groups", A.sub.uid),
      list(GroupsService, "listGroups", "groups"),
      get(IdentitiesService, "getIdentity", "identities", A.identity.uid),
      list(IdentitiesService, "listIdentities", "identities"),
      get(RolesService, "getRole", "roles", A.role.uid),
      get(RolesService, "getRole", "roles", fx.builtin.owner!),
      list(RolesService, "listRoles", "roles"),
      get(RoleBindingsService, "getRoleBinding", "roleBindings", A.binding.uid),
      list(RoleBindingsService, "listRoleBindings", "roleBindings"),
      get(IdentityProvidersService, "getIdentityProvider", "identityProviders", A.idp.uid),
      list(IdentityProvidersService, "listIdentityProviders", "identityProviders"),
      get(AccountAssociationsService, "getAccountAssociation", "accountAssociations", A.association.uid),
      op(
        "list accountAssociations",
        AccountAssociationsService,
        "listAccountAssociations",
        { method: "GET", path: `${V2}/accountAssociations?uidp.ids=${A.org.uid}` },
        { uidp: { ids: [A.org.uid] } },
      ),
      get(GroupInvitesService, "getGroupInvite", "groupInvites", A.invite.uid),
      list(GroupInvitesService, "listGroupInvites", "groupInvites"),
      op(
        "v1 list groups",
        GroupsV1Service,
        "listGroups",
        { method: "GET", path: `/iam/v1/groups?uidp.descendants_of=${A.org.uid}` },
        { uidp: { descendantsOf: A.org.uid } },
      ),
    ];
  }

  test("every Get and List in A succeeds, over REST and gRPC, with what the administrator sees", async () => {
    const all = reads();
    assertCovered(all, IAM_SERVICES, /^(Get|List)/);
    for (const o of all) {
      const mine = await ok(fx.A.viewer, o.rest.method, o.rest.path);
      const admin = await adminOk(srv, o.rest.method, o.rest.path);
      assert.deepEqual(mine, admin, o.label);
      const items = ["groups", "identities", "roles", "roleBindings", "identityProviders", "accountAssociations", "groupInvites", "items"]
        .map((k) => mine[k])
        .find(Array.isArray);
      if (o.label.startsWith("list")) assert.ok(items && items.length > 0, `${o.label} returns A's records`);
      const g = await grpcCall(o.service, fx.A.viewer.token, o.method, o.rpc);
      assert.equal(g.code, 0, `${o.label} over gRPC: ${g.message}`);
    }
  });

  test("every write in A is PERMISSION_DENIED over REST and gRPC, and nothing changes", async () => {
    const all = writesInA();
    assertCovered(all, V2_IAM, /^(Create|Update|Delete|BatchCreate)/);
    const before = await snapshot(srv, fx.A.org.uid);
    for (const o of all) await assertDenied(fx.A.viewer, o);
    assert.deepEqual(await snapshot(srv, fx.A.org.uid), before);
  });
});

describe("ownerA2 (owner at A/folder only)", () => {
  const a2 = () => fx.A.folderOwner;

  test("acts in A/folder and its subfolder", async () => {
    const { folder, sub } = fx.A;
    const child = await ok(a2(), "POST", `${V2}/groups/${folder.uid}`, { name: "made by a2" });
    const grandchild = await ok(a2(), "POST", `${V2}/groups/${sub.uid}`, { name: "deep by a2" });
    assert.equal((await ok(a2(), "PATCH", `${V2}/groups/${sub.uid}`, { description: "edited by a2" })).description, "edited by a2");
    const identity = await ok(a2(), "POST", `${V2}/identities/${sub.uid}`, {
      name: "bot of a2",
      claimMatch: { issuer: ISSUER, subject: "a2-bot" },
    });
    const role = await ok(a2(), "POST", `${V2}/roles/${folder.uid}`, { name: "a2 role", capabilities: ["CAP_REPO_LIST"] });
    const binding = await ok(a2(), "POST", `${V2}/roleBindings/${sub.uid}`, { identityUid: identity.uid, roleUid: role.uid });
    assert.equal(binding.group.uid, sub.uid);
    const g = await grpcCall(GroupsService, a2().token, "getGroup", { uid: sub.uid });
    assert.equal(g.code, 0);
    for (const [collection, uid] of [
      ["roleBindings", binding.uid],
      ["roles", role.uid],
      ["identities", identity.uid],
      ["groups", grandchild.uid],
      ["groups", child.uid],
    ]) {
      await ok(a2(), "DELETE", `${V2}/${collection}/${uid}`);
    }
  });

  test("gets PERMISSION_DENIED on A itself and on the sibling folder", async () => {
    for (const o of writesInA()) await assertDenied(a2(), o);
    const sib = fx.A.sibling.uid;
    const atSibling = writesAt(sib, {
      group: sib,
      identity: `${sib}/0123456789abcdef`,
      role: `${sib}/0123456789abcdef`,
      binding: `${sib}/0123456789abcdef`,
      idp: `${sib}/0123456789abcdef`,
      association: sib,
      invite: `${sib}/0123456789abcdef`,
    });
    for (const o of atSibling) await assertDenied(a2(), o);
    for (const uid of [fx.A.org.uid, sib])
      await assertDenied(a2(), op("get group", GroupsService, "getGroup", { method: "GET", path: `${V2}/groups/${uid}` }, { uid }));
    await assertDenied(
      a2(),
      op("get A's role", RolesService, "getRole", { method: "GET", path: `${V2}/roles/${fx.A.role.uid}` }, { uid: fx.A.role.uid }),
    );
  });

  test("lists only what is at or below A/folder, and totalCount counts only that", async () => {
    const folder = fx.A.folder.uid;
    const cases: [string, string][] = [
      ["groups", "groups"],
      ["identities", "identities"],
      ["roleBindings", "roleBindings"],
      ["roles", "roles"],
      ["identityProviders", "identityProviders"],
      ["groupInvites", "groupInvites"],
      ["accountAssociations", "accountAssociations"],
    ];
    for (const [collection, key] of cases) {
      for (const query of ["page_size=200", `uidp.descendants_of=${fx.A.org.uid}&page_size=200`]) {
        const mine = await ok(a2(), "GET", `${V2}/${collection}?${query}`);
        const items: Json[] = mine[key];
        assert.equal(mine.totalCount, String(items.length), `${collection}?${query}`);
        for (const item of items) {
          const builtIn = collection === "roles" && !item.uid.includes("/");
          assert.ok(builtIn || isAtOrBelow(folder, item.uid), `${collection}: ${item.uid} is at or below A/folder`);
        }
        // The administrator's view of the same subtree, restricted to the folder, is what a2 sees.
        const all = await adminOk(srv, "GET", `${V2}/${collection}?${query.startsWith("uidp") ? query : "page_size=200"}`);
        const expected = (all[key] as Json[]).filter(
          (i) => isAtOrBelow(folder, i.uid) || (collection === "roles" && !i.uid.includes("/") && !query.startsWith("uidp")),
        );
        assert.deepEqual(items.map((i) => i.uid).sort(), expected.map((i) => i.uid).sort(), `${collection}?${query}`);
      }
    }
    const groups = await ok(a2(), "GET", `${V2}/groups`);
    assert.deepEqual(groups.groups.map((g: Json) => g.uid).sort(), [fx.A.folder.uid, fx.A.sub.uid].sort());
    assert.equal(groups.totalCount, "2");
    const v1 = await ok(a2(), "GET", "/iam/v1/groups");
    assert.deepEqual(v1.items.map((g: Json) => g.id).sort(), [fx.A.folder.uid, fx.A.sub.uid].sort());
  });
});

// ---------------------------------------------------------------------------

describe("authentication", () => {
  /** Every served RPC that needs an API token, with a REST request that reaches it. */
  function apiRpcs(): { method: DescMethod; service: DescService; rest: { method: string; path: string; body?: unknown } }[] {
    const byName = new Map<string, { service: DescService; method: DescMethod }>(
      CONTRACT_FILES.flatMap((f) => f.services).flatMap((s) =>
        s.methods.map((m) => [`${s.typeName}.${m.name}`, { service: s, method: m }] as const),
      ),
    );
    return srv.server.restOperations.flatMap((o) => {
      const found = byName.get(o.rpc);
      assert.ok(found, `${o.rpc} is in the contract`);
      if (methodRule(found.method).mode === "disabled") return [];
      const path = o.path.replace(/\{[^}]+\}/g, fx.A.org.uid);
      return [{ ...found, rest: { method: o.method, path, body: o.method === "POST" || o.method === "PATCH" ? {} : undefined } }];
    });
  }

  /** Sends every API RPC over REST, gRPC and Connect with authorization header value (null: none); all must be 16. */
  async function assertAllUnauthenticated(authorization: string | null): Promise<number> {
    const rpcs = apiRpcs();
    assert.ok(rpcs.length >= 35, `${rpcs.length} API RPCs`);
    const agent = new http.Agent({ keepAlive: true });
    const transport = createConnectTransport({
      baseUrl: srv.url,
      httpVersion: "1.1",
      nodeOptions: { agent },
      interceptors: authorization === null ? [] : [(next) => (req) => (req.header.set("authorization", authorization), next(req))],
    });
    let calls = 0;
    try {
      for (const { service, method, rest: r } of rpcs) {
        const where = `${service.typeName}/${method.name}`;
        const res = await as(authorization ?? "", r.method, r.path, r.body);
        assertRestError(res, 401, 16, "UNAUTHENTICATED");
        const g = await grpcCall(service, "", method.localName, {}, authorization === null ? {} : { authorization });
        assert.equal(g.code, 16, `${where} over gRPC: ${g.message}`);
        assert.deepEqual(g.reasons, ["UNAUTHENTICATED"], where);
        const client = createClient(service, transport) as unknown as Record<string, (req: object) => unknown>;
        const call = client[method.localName]!;
        // A server stream fails as it is read; a unary call's promise rejects.
        const settled =
          method.methodKind === "server_streaming"
            ? (async () => {
                for await (const _ of call({}) as AsyncIterable<unknown>) void _;
              })()
            : (call({}) as Promise<unknown>);
        await assert.rejects(settled, (err: unknown) => {
          assert.ok(err instanceof ConnectError, String(err));
          assert.equal(err.code, Code.Unauthenticated, `${where} over Connect: ${err.rawMessage}`);
          assert.deepEqual(
            err.findDetails(ErrorInfoSchema).map((d) => d.reason),
            ["UNAUTHENTICATED"],
            where,
          );
          return true;
        });
        calls += 3;
      }
    } finally {
      agent.destroy();
    }
    return calls;
  }

  test("no token: every API RPC is UNAUTHENTICATED (16, HTTP 401) over REST, gRPC and Connect", async () => {
    await assertAllUnauthenticated(null);
  });

  test("a garbage token, a token without Bearer, and a token with one character changed are UNAUTHENTICATED", async () => {
    const token = srv.adminToken;
    const flip = (i: number) => token.slice(0, i) + (token[i] === "A" ? "B" : "A") + token.slice(i + 1);
    const variants = [
      "Bearer garbage",
      "Bearer ",
      token,
      `Basic ${token}`,
      `Bearer ${flip(token.lastIndexOf(".") + 20)}`,
      `Bearer ${flip(token.indexOf(".") + 10)}`,
      `Bearer ${flip(5)}`,
    ];
    // The unmodified token works, so a 16 below is about the change.
    assert.equal((await as(`Bearer ${token}`, "GET", `${V2}/groups/${fx.A.org.uid}`)).status, 200);
    for (const v of variants) await assertAllUnauthenticated(v);
  });

  test("health, discovery and the exchange need no API token", async () => {
    assert.deepEqual((await as("", "GET", "/healthz")).body, { status: "ok" });
    assert.deepEqual((await as("", "GET", "/readyz")).body, { status: "ready" });
    const discovery = await as("", "GET", "/.well-known/openid-configuration");
    assert.equal(discovery.status, 200);
    assert.equal(typeof discovery.body.jwks_uri, "string");
    const jwks = await as("", "GET", "/.well-known/jwks.json");
    assert.equal(jwks.status, 200);
    assert.ok(jwks.body.keys.length > 0);
    for (const key of jwks.body.keys)
      for (const member of ["d", "p", "q", "dp", "dq", "qi", "k"]) assert.equal(member in key, false, `public JWK has no ${member}`);
    const health = await grpcCall(Health, "", "check", { service: "" });
    assert.equal(health.code, 0);
    assert.equal(health.res.status, 1, "SERVING");
    const connectHealth = testTransport("connect-h1", srv.url, "");
    try {
      assert.equal((await createClient(Health, connectHealth.transport).check({ service: "" })).status, 1);
    } finally {
      connectHealth.close();
    }
    // The exchange asks for the workload's upstream token, never an API token,
    // and with one (here not even a JWT) it fails for its own reasons.
    const bare = await as("", "GET", "/sts/exchange");
    const bareBody = assertRestError(bare, 401, 16, "UNAUTHENTICATED");
    assert.match(bareBody.message, /upstream OIDC token/);
    assert.doesNotMatch(bareBody.message, /API token/);
    const noAud = await as("Bearer not-an-api-token", "GET", "/sts/exchange");
    assert.equal(assertRestError(noAud, 400, 3, "INVALID_ARGUMENT").message, "Invalid argument: aud: Audience must be specified");
    const postNoAud = await as("Bearer not-an-api-token", "POST", "/sts/exchange", {});
    assert.equal(assertRestError(postNoAud, 400, 3, "INVALID_ARGUMENT").message, "Invalid argument: aud: Audience must be specified");
  });
});

// ---------------------------------------------------------------------------

describe("privilege escalation", () => {
  let roleCreator: Caller;
  let binder: Caller;
  let roleUpdater: Caller;
  let updaterRole: Json;
  let target: Json;
  let narrow: Json;
  let escalations = 0;

  /** A principal in A holding only a custom role with capabilities at A. */
  async function holding(name: string, capabilities: string[]): Promise<{ caller: Caller; role: Json }> {
    const role = await adminOk(srv, "POST", `${V2}/roles/${fx.A.org.uid}`, { name: `${name} role`, capabilities });
    return { caller: (await makeCaller(srv, fx.A.org.uid, name, role.uid)).caller, role };
  }

  before(async () => {
    roleCreator = (await holding("role creator", ["CAP_IAM_ROLES_CREATE", "CAP_IAM_ROLES_LIST"])).caller;
    binder = (await holding("binder", ["CAP_IAM_ROLE_BINDINGS_CREATE", "CAP_IAM_IDENTITY_LIST", "CAP_IAM_ROLES_LIST"])).caller;
    ({ caller: roleUpdater, role: updaterRole } = await holding("role updater", ["CAP_IAM_ROLES_UPDATE", "CAP_IAM_ROLES_LIST"]));
    target = await adminOk(srv, "POST", `${V2}/roles/${fx.A.org.uid}`, {
      name: "update target",
      description: "kept",
      capabilities: ["CAP_IAM_ROLES_LIST"],
    });
    narrow = await adminOk(srv, "POST", `${V2}/roles/${fx.A.org.uid}`, { name: "narrow", capabilities: ["CAP_IAM_ROLES_LIST"] });
  });

  /** Asserts 7 over REST and gRPC for a create-role request, and that no role of that name exists afterwards. */
  async function assertCannotCreateRole(caller: Caller, parent: string, name: string, capabilities: string[], numbers: number[]) {
    const res = await as(caller, "POST", `${V2}/roles/${parent}`, { name, capabilities });
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    const g = await grpcCall(RolesService, caller.token, "createRole", { parent, role: { name, capabilities: numbers } });
    assert.equal(g.code, 7, g.message);
    assert.equal((await adminOk(srv, "GET", `${V2}/roles?name=${encodeURIComponent(name)}`)).totalCount, "0", `no role ${name}`);
    escalations += 2;
  }

  test("viewerA and the folder-scoped owner cannot create a role at A", async () => {
    await assertCannotCreateRole(fx.A.viewer, fx.A.org.uid, "viewer's role", ["CAP_REPO_LIST"], [Capability.CAP_REPO_LIST]);
    await assertCannotCreateRole(fx.A.folderOwner, fx.A.org.uid, "a2's role", ["CAP_REPO_LIST"], [Capability.CAP_REPO_LIST]);
  });

  test("a role creator cannot create a role with a capability it lacks, but can with one it holds", async () => {
    const { CAP_IAM_GROUPS_DELETE: GROUPS_DELETE, CAP_IAM_ROLES_LIST: ROLES_LIST } = Capability;
    const res = await as(roleCreator, "POST", `${V2}/roles/${fx.A.org.uid}`, { name: "wider", capabilities: ["CAP_IAM_GROUPS_DELETE"] });
    assert.match(assertRestError(res, 403, 7, "PERMISSION_DENIED").message, /CAP_IAM_GROUPS_DELETE/);
    await assertCannotCreateRole(roleCreator, fx.A.org.uid, "wider", ["CAP_IAM_GROUPS_DELETE"], [GROUPS_DELETE]);
    await assertCannotCreateRole(
      roleCreator,
      fx.A.org.uid,
      "wider mix",
      ["CAP_IAM_ROLES_LIST", "CAP_IAM_GROUPS_DELETE"],
      [ROLES_LIST, GROUPS_DELETE],
    );
    await assertCannotCreateRole(roleCreator, fx.A.folder.uid, "wider below", ["CAP_IAM_GROUPS_DELETE"], [GROUPS_DELETE]);
    const made = await ok(roleCreator, "POST", `${V2}/roles/${fx.A.org.uid}`, { name: "same", capabilities: ["CAP_IAM_ROLES_LIST"] });
    assert.deepEqual(made.capabilities, ["CAP_IAM_ROLES_LIST"]);
    const both = await ok(roleCreator, "POST", `${V2}/roles/${fx.A.folder.uid}`, {
      name: "same two",
      capabilities: ["CAP_IAM_ROLES_LIST", "CAP_IAM_ROLES_CREATE"],
    });
    assert.deepEqual(both.capabilities.sort(), ["CAP_IAM_ROLES_CREATE", "CAP_IAM_ROLES_LIST"]);
  });

  test("a binder cannot bind itself or anyone to owner, but can bind a role whose capabilities it holds", async () => {
    const owner = fx.builtin.owner!;
    const bindingsOf = async (identity: string) =>
      ((await adminOk(srv, "GET", `${V2}/roleBindings?identity=${identity}&page_size=200`)).roleBindings as Json[]).map((b) => b.role.uid);
    const before = { self: await bindingsOf(binder.uid), viewer: await bindingsOf(fx.A.viewer.uid) };
    for (const [who, group] of [
      [binder.uid, fx.A.org.uid],
      [binder.uid, fx.A.folder.uid],
      [fx.A.viewer.uid, fx.A.org.uid],
    ]) {
      const res = await as(binder, "POST", `${V2}/roleBindings/${group}`, { identityUid: who, roleUid: owner });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      const g = await grpcCall(RoleBindingsService, binder.token, "createRoleBinding", {
        parent: group,
        roleBinding: { identityUid: who, roleUid: owner },
      });
      assert.equal(g.code, 7, g.message);
      escalations += 2;
    }
    // A batch with one acceptable and one escalating request creates nothing.
    const batch = {
      parent: fx.A.org.uid,
      requests: [
        { parent: fx.A.folder.uid, roleBinding: { identityUid: binder.uid, roleUid: narrow.uid } },
        { parent: fx.A.folder.uid, roleBinding: { identityUid: binder.uid, roleUid: owner } },
      ],
    };
    assertRestError(await as(binder, "POST", `${V2}/roleBindings:batchCreate`, batch), 403, 7, "PERMISSION_DENIED");
    assert.equal((await grpcCall(RoleBindingsService, binder.token, "batchCreateRoleBindings", batch)).code, 7);
    escalations += 2;
    assert.deepEqual({ self: await bindingsOf(binder.uid), viewer: await bindingsOf(fx.A.viewer.uid) }, before, "nothing was bound");
    const bound = await ok(binder, "POST", `${V2}/roleBindings/${fx.A.folder.uid}`, { identityUid: binder.uid, roleUid: narrow.uid });
    assert.equal(bound.role.uid, narrow.uid);
  });

  test("UpdateRole cannot add a capability the caller lacks, to another role or to its own", async () => {
    for (const role of [target, updaterRole]) {
      const before = await adminOk(srv, "GET", `${V2}/roles/${role.uid}`);
      const wider = [...before.capabilities, "CAP_IAM_GROUPS_DELETE"];
      assertRestError(await as(roleUpdater, "PATCH", `${V2}/roles/${role.uid}`, { capabilities: wider }), 403, 7, "PERMISSION_DENIED");
      assertRestError(
        await as(roleUpdater, "PATCH", `${V2}/roles/${role.uid}?updateMask=*`, { ...before, capabilities: wider }),
        403,
        7,
        "PERMISSION_DENIED",
      );
      const g = await grpcCall(RolesService, roleUpdater.token, "updateRole", {
        role: { uid: role.uid, capabilities: [Capability.CAP_IAM_ROLES_LIST, Capability.CAP_IAM_GROUPS_DELETE] },
        updateMask: { paths: ["capabilities"] },
      });
      assert.equal(g.code, 7, g.message);
      escalations += 3;
      assert.deepEqual(await adminOk(srv, "GET", `${V2}/roles/${role.uid}`), before, "the role is unchanged");
    }
    const updated = await ok(roleUpdater, "PATCH", `${V2}/roles/${target.uid}`, {
      capabilities: ["CAP_IAM_ROLES_LIST", "CAP_IAM_ROLES_UPDATE"],
    });
    assert.deepEqual(updated.capabilities.sort(), ["CAP_IAM_ROLES_LIST", "CAP_IAM_ROLES_UPDATE"]);
  });

  test("an identity cannot change its own claimMatch or static keys, even as owner", async () => {
    const me = fx.A.owner;
    const before = await adminOk(srv, "GET", `${V2}/identities/${me.uid}`);
    const wider = { issuer: ISSUER, subjectPattern: ".*" };
    const keys = {
      issuer: "https://offline.example",
      subject: "me",
      issuerKeys: JSON.stringify({
        keys: [
          { kty: "EC", crv: "P-256", x: "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", y: "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0" },
        ],
      }),
    };
    for (const [query, body] of [
      ["", { claimMatch: wider }],
      ["?updateMask=claim_match", { claimMatch: wider, description: "x" }],
      ["?updateMask=*", { name: before.name, claimMatch: wider }],
      ["", { staticKeys: keys }],
    ] as const) {
      assertRestError(await as(me, "PATCH", `${V2}/identities/${me.uid}${query}`, body), 403, 7, "PERMISSION_DENIED");
      escalations++;
    }
    const g = await grpcCall(IdentitiesService, me.token, "updateIdentity", {
      identity: { uid: me.uid, relationship: { case: "claimMatch", value: { issuer: ISSUER, subjectPattern: ".*" } } },
      updateMask: { paths: ["claim_match"] },
    });
    assert.equal(g.code, 7, g.message);
    escalations++;
    assert.deepEqual(await adminOk(srv, "GET", `${V2}/identities/${me.uid}`), before, "the identity is unchanged");
    // The same owner may edit its own description, and another identity's claimMatch.
    assert.equal((await ok(me, "PATCH", `${V2}/identities/${me.uid}`, { description: "me" })).description, "me");
    const other = await ok(me, "PATCH", `${V2}/identities/${fx.A.identity.uid}?updateMask=claim_match`, {
      claimMatch: { issuer: ISSUER, subject: "repo:a/other" },
    });
    assert.equal(other.claimMatch.subject, "repo:a/other");
  });

  test("an identity editor cannot take over a more privileged identity by rewriting its claimMatch", async () => {
    const { caller: editor } = await holding("identity editor", ["CAP_IAM_IDENTITY_UPDATE", "CAP_IAM_IDENTITY_LIST"]);
    for (const victim of [fx.A.owner.uid, fx.A.viewer.uid, fx.A.identity.uid]) {
      const before = await adminOk(srv, "GET", `${V2}/identities/${victim}`);
      const res = await as(editor, "PATCH", `${V2}/identities/${victim}`, {
        claimMatch: { issuer: "https://attacker.example.com", subject: "me" },
      });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      const g = await grpcCall(IdentitiesService, editor.token, "updateIdentity", {
        identity: { uid: victim, relationship: { case: "claimMatch", value: { issuer: "https://attacker.example.com", subject: "me" } } },
        updateMask: { paths: ["claim_match"] },
      });
      assert.equal(g.code, 7, g.message);
      escalations += 2;
      assert.deepEqual(await adminOk(srv, "GET", `${V2}/identities/${victim}`), before, "the victim is unchanged");
    }
    // An identity with no bindings grants nothing, so the editor may re-point it.
    const unbound = (await makeCaller(srv, fx.A.org.uid, "unbound bot", null)).caller;
    const res = await ok(editor, "PATCH", `${V2}/identities/${unbound.uid}`, { claimMatch: { issuer: ISSUER, subject: "moved" } });
    assert.equal(res.claimMatch.subject, "moved");
  });

  test("a binding editor cannot re-point an owner binding at itself", async () => {
    const { caller: editor } = await holding("binding editor", [
      "CAP_IAM_ROLE_BINDINGS_UPDATE",
      "CAP_IAM_IDENTITY_LIST",
      "CAP_IAM_ROLES_LIST",
    ]);
    const binding = fx.A.ownerBinding;
    const before = await adminOk(srv, "GET", `${V2}/roleBindings/${binding.uid}`);
    assertRestError(
      await as(editor, "PATCH", `${V2}/roleBindings/${binding.uid}`, { identityUid: editor.uid }),
      403,
      7,
      "PERMISSION_DENIED",
    );
    const g = await grpcCall(RoleBindingsService, editor.token, "updateRoleBinding", {
      roleBinding: { uid: binding.uid, identityUid: editor.uid },
      updateMask: { paths: ["identity_uid"] },
    });
    assert.equal(g.code, 7, g.message);
    escalations += 2;
    assert.deepEqual(await adminOk(srv, "GET", `${V2}/roleBindings/${binding.uid}`), before);
  });

  test("invites and identity providers cannot promise a role with capabilities the caller lacks", async () => {
    const { caller: promiser } = await holding("promiser", [
      "CAP_IAM_GROUP_INVITES_CREATE",
      "CAP_IAM_GROUP_INVITES_LIST",
      "CAP_IAM_IDENTITY_PROVIDERS_CREATE",
      "CAP_IAM_IDENTITY_PROVIDERS_UPDATE",
      "CAP_IAM_ROLE_BINDINGS_CREATE",
      "CAP_IAM_ROLES_LIST",
    ]);
    const owner = fx.builtin.owner!;
    assertRestError(
      await as(promiser, "POST", `${V2}/groupInvites/${fx.A.org.uid}`, { roleUid: owner, ttl: "3600s" }),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assertRestError(await as(promiser, "POST", `${V2}/identityProviders/${fx.A.org.uid}`, idpBody(owner)), 403, 7, "PERMISSION_DENIED");
    assertRestError(
      await as(promiser, "PATCH", `${V2}/identityProviders/${fx.A.idp.uid}?updateMask=default_role`, { defaultRole: owner }),
      403,
      7,
      "PERMISSION_DENIED",
    );
    escalations += 3;
    const invite = await ok(promiser, "POST", `${V2}/groupInvites/${fx.A.folder.uid}`, { roleUid: narrow.uid, ttl: "3600s" });
    assert.ok(invite.code.length > 0, "the create response shows the code once");
    const again = await ok(promiser, "GET", `${V2}/groupInvites/${invite.uid}`);
    assert.equal(again.code, "", "GET never shows the code");
    const listed = await ok(promiser, "GET", `${V2}/groupInvites?uidp.descendants_of=${fx.A.org.uid}`);
    assert.ok(
      listed.groupInvites.every((i: Json) => i.code === ""),
      "List never shows a code",
    );
    // Only the create response may carry it: drop it from the exposure scan's input.
    responses.splice(
      responses.findIndex((r) => r.includes(invite.code)),
      1,
    );
  });

  test("batchCreate with a sub-request outside what the caller holds is refused and creates nothing", async () => {
    const a2 = fx.A.folderOwner;
    const viewer = fx.builtin.viewer!;
    const count = async () =>
      (await adminOk(srv, "GET", `${V2}/roleBindings?uidp.descendants_of=${fx.A.org.uid}&page_size=200`)).totalCount;
    const before = await count();
    const outside = {
      parent: fx.A.org.uid,
      requests: [
        { parent: fx.A.folder.uid, roleBinding: { identityUid: fx.A.identity.uid, roleUid: viewer } },
        { parent: fx.A.org.uid, roleBinding: { identityUid: fx.A.identity.uid, roleUid: viewer } },
      ],
    };
    assertRestError(await as(a2, "POST", `${V2}/roleBindings:batchCreate`, outside), 403, 7, "PERMISSION_DENIED");
    assert.equal((await grpcCall(RoleBindingsService, a2.token, "batchCreateRoleBindings", outside)).code, 7);
    // A sub-request beside the batch parent is malformed whatever the caller holds.
    const beside = {
      parent: fx.A.folder.uid,
      requests: [{ parent: fx.A.sibling.uid, roleBinding: { identityUid: fx.A.identity.uid, roleUid: viewer } }],
    };
    const err = assertRestError(await as(a2, "POST", `${V2}/roleBindings:batchCreate`, beside), 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(
      fieldViolations(err).map((v) => v.field),
      ["requests[0].parent"],
    );
    escalations += 3;
    assert.equal(await count(), before, "nothing was created");
  });

  test("creating a root organization needs only a valid token, and the creator owns it", async () => {
    const viewer = fx.A.viewer;
    assertRestError(await as("", "POST", `${V2}/groups`, { name: "anonymous org" }), 401, 16, "UNAUTHENTICATED");
    const org = await ok(viewer, "POST", `${V2}/groups`, { name: "viewer org" });
    assert.match(org.uid, /^[0-9a-f]{40}$/);
    const whoami = await ok(viewer, "GET", "/auth/v1/ok");
    assert.equal(whoami.subject, viewer.uid);
    const mine = (whoami.capabilities as Json[]).filter((c) => c.group.id === org.uid);
    assert.deepEqual(
      mine.map((c) => c.role.name),
      ["owner"],
    );
    const folder = await ok(viewer, "POST", `${V2}/groups/${org.uid}`, { name: "viewer folder" });
    assert.ok(isAtOrBelow(org.uid, folder.uid));
    const g = await grpcCall(GroupsService, viewer.token, "createGroup", { group: { name: "viewer org two" } });
    assert.equal(g.code, 0, g.message);
    // Owning a new org grants nothing in A.
    assertRestError(await as(viewer, "POST", `${V2}/groups/${fx.A.org.uid}`, { name: "still no" }), 403, 7, "PERMISSION_DENIED");
  });

  after(() => {
    // eslint-disable-next-line no-console
    console.log(`privilege escalation: ${escalations} escalation attempts, 0 succeeded`);
  });
});

// ---------------------------------------------------------------------------

describe("mass assignment", () => {
  const STUFFED_TIME = "2001-02-03T04:05:06.789Z";
  let maskPaths = 0;

  interface Update {
    label: string;
    service: DescService;
    method: string;
    collection: string;
    /** The resource field of the gRPC request. */
    field: string;
    uid: () => string;
    paths: string[];
    /** Output-only and foreign values a client might stuff into the body. */
    stuffing: () => Json;
  }
  const COMMON = [
    "uid",
    "create_time",
    "update_time",
    "createTime",
    "no_such_field",
    "name.first",
    "description.text",
    "parent",
    "description,uid",
    "description,no_such_field",
  ];
  const updates: Update[] = [
    {
      label: "UpdateGroup",
      service: GroupsService,
      method: "updateGroup",
      collection: "groups",
      field: "group",
      uid: () => fx.A.folder.uid,
      paths: [...COMMON, "verified", "resource_limits", "resource_limits.clusters", "parent_uid"],
      stuffing: () => ({
        uid: fx.B.folder.uid,
        createTime: STUFFED_TIME,
        updateTime: STUFFED_TIME,
        verified: true,
        resourceLimits: { clusters: 9 },
      }),
    },
    {
      label: "UpdateIdentity",
      service: IdentitiesService,
      method: "updateIdentity",
      collection: "identities",
      field: "identity",
      uid: () => fx.A.identity.uid,
      paths: [...COMMON, "last_seen_time", "email", "email_unverified", "claim_match.issuer", "claim_match.subject", "relationship"],
      stuffing: () => ({
        uid: fx.B.identity.uid,
        createTime: STUFFED_TIME,
        updateTime: STUFFED_TIME,
        lastSeenTime: STUFFED_TIME,
        email: "spoof@example.com",
        emailUnverified: "spoof@example.com",
      }),
    },
    {
      label: "UpdateRole",
      service: RolesService,
      method: "updateRole",
      collection: "roles",
      field: "role",
      uid: () => fx.A.role.uid,
      paths: [...COMMON, "capabilities.x"],
      stuffing: () => ({ uid: fx.B.role.uid, createTime: STUFFED_TIME, updateTime: STUFFED_TIME }),
    },
    {
      label: "UpdateRoleBinding",
      service: RoleBindingsService,
      method: "updateRoleBinding",
      collection: "roleBindings",
      field: "roleBinding",
      uid: () => fx.A.binding.uid,
      paths: [
        ...COMMON.filter((p) => !p.startsWith("description")),
        "group",
        "group.uid",
        "identity",
        "identity.uid",
        "role",
        "role.uid",
        "role_uid,group",
        "identity_uid.x",
      ],
      stuffing: () => ({
        uid: fx.B.binding.uid,
        createTime: STUFFED_TIME,
        group: { uid: fx.B.org.uid, name: "b" },
        identity: { uid: fx.B.identity.uid, name: "b" },
        role: { uid: fx.builtin.owner, name: "owner" },
      }),
    },
  ];
  const writable: Record<string, Json> = {
    groups: { name: "mass name", description: "mass" },
    identities: { name: "mass name", description: "mass" },
    roles: { name: "mass name", description: "mass" },
    roleBindings: {},
  };

  test("update_mask naming output-only, immutable, unknown or nested paths is INVALID_ARGUMENT and changes nothing", async () => {
    const ownerA = fx.A.owner;
    for (const u of updates) {
      const path = `${V2}/${u.collection}/${u.uid()}`;
      const before = await adminOk(srv, "GET", path);
      for (const mask of u.paths) {
        const body = {
          ...writable[u.collection],
          roleUid: u.collection === "roleBindings" ? fx.builtin.viewer : undefined,
          ...u.stuffing(),
        };
        const err = assertRestError(await as(ownerA, "PATCH", `${path}?updateMask=${mask}`, body), 400, 3, "INVALID_ARGUMENT");
        assert.deepEqual(
          fieldViolations(err).map((v) => v.field),
          ["update_mask"],
          `${u.label} ${mask}: ${err.message}`,
        );
        const snake = mask.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
        const g = await grpcCall(u.service, ownerA.token, u.method, {
          [u.field]: { uid: u.uid(), description: "mass" },
          updateMask: { paths: snake.split(",") },
        });
        assert.equal(g.code, 3, `${u.label} ${mask} over gRPC: ${g.message}`);
        maskPaths++;
      }
      assert.deepEqual(await adminOk(srv, "GET", path), before, `${u.label}: the stored record is unchanged`);
    }
  });

  test("updateMask=* replaces every updatable field", async () => {
    const ownerA = fx.A.owner;
    const group = await ok(ownerA, "PATCH", `${V2}/groups/${fx.A.sub.uid}?updateMask=*`, { name: "replaced sub" });
    assert.deepEqual([group.uid, group.name, group.description], [fx.A.sub.uid, "replaced sub", ""]);
    const role = await ok(ownerA, "PATCH", `${V2}/roles/${fx.A.role.uid}?updateMask=*`, {
      name: "replaced role",
      capabilities: ["CAP_REPO_LIST"],
    });
    assert.deepEqual([role.uid, role.name, role.description, role.capabilities], [fx.A.role.uid, "replaced role", "", ["CAP_REPO_LIST"]]);
    const identity = await ok(ownerA, "PATCH", `${V2}/identities/${fx.A.identity.uid}?updateMask=*`, {
      name: "replaced identity",
      claimMatch: { issuer: ISSUER, subject: "replaced" },
    });
    assert.deepEqual(
      [identity.uid, identity.name, identity.description, identity.claimMatch.subject],
      [fx.A.identity.uid, "replaced identity", "", "replaced"],
    );
    const binding = await ok(ownerA, "PATCH", `${V2}/roleBindings/${fx.A.binding.uid}?updateMask=*`, {
      identityUid: fx.A.viewer.uid,
      roleUid: fx.builtin.viewer,
    });
    assert.deepEqual(
      [binding.uid, binding.identity.uid, binding.role.uid, binding.group.uid],
      [fx.A.binding.uid, fx.A.viewer.uid, fx.builtin.viewer, fx.A.org.uid],
    );
    for (const [collection, record] of [
      ["groups", group],
      ["roles", role],
      ["identities", identity],
      ["roleBindings", binding],
    ] as const) {
      assert.deepEqual(await adminOk(srv, "GET", `${V2}/${collection}/${record.uid}`), record, `${collection}: GET shows the replacement`);
    }
  });

  test("a body stuffed with output-only fields and no mask changes only the writable fields", async () => {
    const ownerA = fx.A.owner;
    for (const u of updates) {
      const path = `${V2}/${u.collection}/${u.uid()}`;
      const before = await adminOk(srv, "GET", path);
      const change = u.collection === "roleBindings" ? { roleUid: fx.A.role.uid } : { description: "stuffed" };
      const after = await ok(ownerA, "PATCH", path, { ...u.stuffing(), ...change });
      const expected = { ...before, ...change };
      if ("updateTime" in before) {
        assert.notEqual(after.updateTime, STUFFED_TIME);
        expected.updateTime = after.updateTime;
      }
      if (u.collection === "roleBindings") {
        assert.equal(after.role.uid, fx.A.role.uid, "the hydrated role follows roleUid");
        expected.role = after.role;
      }
      assert.deepEqual(after, expected, `${u.label}: only the writable field changed`);
      assert.deepEqual(await adminOk(srv, "GET", path), after, `${u.label}: as stored`);
    }
  });

  after(() => {
    // eslint-disable-next-line no-console
    console.log(
      `mass assignment: ${maskPaths} (mask path × update RPC) pairs over ${updates.length} update RPCs, REST and gRPC: all INVALID_ARGUMENT, 0 stored fields changed`,
    );
  });
});

// ---------------------------------------------------------------------------

test("exposure: no response in this file carries private key material, raw tokens or secrets", () => {
  const JWT = /eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}/;
  const PRIVATE_JWK = /"(d|p|q|dp|dq|qi|k)"\s*:\s*"/;
  const leaks: string[] = [];
  for (const text of responses) {
    if (JWT.test(text)) leaks.push(`a raw token: ${text.slice(0, 200)}`);
    if (PRIVATE_JWK.test(text)) leaks.push(`a private JWK member: ${text.slice(0, 200)}`);
    for (const secret of fx.secrets) if (text.includes(secret)) leaks.push(`a secret: ${text.slice(0, 200)}`);
    if (/"client_?[sS]ecret"\s*:\s*"[^"]/.test(text)) leaks.push(`a client secret field: ${text.slice(0, 200)}`);
  }
  assert.ok(responses.length > 500, `${responses.length} responses scanned`);
  assert.deepEqual(leaks, []);
  // eslint-disable-next-line no-console
  console.log(`exposure: 0 secret fields in ${responses.length} responses`);
});
