/**
 * API1 (broken object-level authorization) across tenants: ownerA calls every
 * served RPC that takes a uid, a parent or a uidp filter with B's identifiers,
 * over REST, gRPC and Connect, in every path variant, and each answer is
 * compared with the answer for a random uid that does not exist.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import { after, before, describe, test } from "node:test";
import { createRegistry, fromBinary, toJson, type DescMethod, type DescService, type JsonValue } from "@bufbuild/protobuf";
import { ConnectError, createClient } from "@connectrpc/connect";
import type { ServiceError } from "@grpc/grpc-js";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { EventsService } from "../../gen/platformapi/events/v1/events_pb.js";
import { SubscriptionsService } from "../../gen/platformapi/events/v1/subscriptions_pb.js";
import { GroupsService as GroupsV1Service } from "../../gen/platformapi/iam/v1/groups_pb.js";
import { AccountAssociationsService } from "../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import { GroupInvitesService } from "../../gen/platformapi/iam/v2beta1/group_invites_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { IdentitiesService } from "../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { IdentityProvidersService } from "../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import { RoleBindingsService } from "../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import { RolesService } from "../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { RegistryService as RegistryV1Service } from "../../gen/platformapi/registry/v1/registry_pb.js";
import { ReposService } from "../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { TagsService } from "../../gen/platformapi/registry/v2beta1/tags_pb.js";
import { AdvisoriesService } from "../../gen/platformapi/vulnerabilities/v2beta1/advisories_pb.js";
import { isAtOrBelow } from "../../src/domain/uidp.js";
import { CONTRACT_FILES } from "../../src/services/index.js";
import { assertRestError } from "../support/assertions.js";
import { adminOk, buildAuthzFixture, restAs, snapshot, type AuthzFixture, type Caller, type Json } from "../support/authz-fixture.js";
import { testTransport, type TestTransport } from "../support/connect.js";
import { grpcClient, type GrpcTestClient } from "../support/grpc.js";
import { startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
let fx: AuthzFixture;
let ownerA: Caller;
let beforeB: Json;
let bAdvisory: string;
const closers: (() => void)[] = [];
before(async () => {
  // Owner A makes some thousands of calls as fast as the machine answers them: the per-identity rate limit
  // (test/security/security-rate-limit.test.ts) would refuse some on a fast, idle machine and none on a busy one.
  srv = await startTestServer({ env: { PLATFORM_CALLS_PER_IDENTITY: "0" } });
  fx = await buildAuthzFixture(srv);
  ownerA = fx.A.owner;
  beforeB = await snapshot(srv, fx.B.org.uid);
  bAdvisory = await writeAdvisoryOfB();
});
/** Writes B's advisory through a second connection to the server's database: advisories have no create RPC. */
async function writeAdvisoryOfB(): Promise<string> {
  const uid = `${fx.B.folder.uid}/${"a".repeat(16)}`;
  const store = await srv.openStore();
  const t = Date.now();
  const names = {
    artifactName: "b-lib",
    componentName: "b-lib",
    origin: "b-lib",
    artifactType: "library",
    componentType: "go",
    artifactArchitecture: "",
    componentLocation: "",
  };
  const detection = {
    uid: `${uid}/${"1".repeat(16)}`,
    createTime: t,
    author: "b",
    reviewer: "",
    reviewState: 2,
    issue: null,
    type: "detection",
    data: { manual: {} },
  };
  await store.advisories.upsert([
    {
      uid,
      parentUid: fx.B.folder.uid,
      advisoryId: "CGA-bbbb-bbbb-bbbb",
      legacyAdvisoryId: "",
      author: "b",
      ...names,
      aliases: ["CVE-2099-0002"],
      severities: [],
      events: [detection],
      createTime: t,
      updateTime: t,
      deleteTime: null,
    },
  ]);
  await store.close();
  return uid;
}
after(async () => {
  for (const close of closers) close();
  await srv.close();
});

/** The services whose RPCs name IAM objects; every method must be probed or shown to take no identifier. */
const IAM_SERVICES: readonly DescService[] = [
  GroupsService,
  IdentitiesService,
  RolesService,
  RoleBindingsService,
  IdentityProvidersService,
  AccountAssociationsService,
  GroupInvitesService,
  GroupsV1Service,
];
/** The lists without a totalCount: v1's { items }, and the change feed (a cursor, not a count). */
const V1_LISTS: readonly DescService[] = [GroupsV1Service, RegistryV1Service, EventsService];
/** Served RPCs that take an identifier but are authorized by something other than the caller's API token. */
const EXEMPT: Record<string, string> = {
  "platformapi.oidc.v1.SecurityTokenService/Exchange":
    "needs no API token: the upstream token must match the identity's claimMatch (sts-exchange.test.ts)",
  "platformapi.events.v1.EventsService/WatchEvents":
    "a stream, with ListEvents' visibility: a viewer of one organization sees none of another's events (events-watch.test.ts)",
};
/** Request fields that carry a uid, a parent or a uidp filter. */
const IDENTIFIER_FIELDS = new Set([
  "uid",
  "id",
  "ids",
  "parent",
  "uidp",
  "identity",
  "group",
  "role",
  "identity_uid",
  "role_uid",
  "default_role",
  "key_id",
]);

/** True when a request message names an object: an identifier field at the top or inside a top-level message. */
function takesIdentifier(method: DescMethod): boolean {
  return method.input.fields.some(
    (f) =>
      IDENTIFIER_FIELDS.has(f.name) ||
      ((f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message")) &&
        f.message.fields.some((g) => IDENTIFIER_FIELDS.has(g.name))),
  );
}

// ---------------------------------------------------------------------------
// Calling one request over each protocol and fingerprinting the answer.

type Protocol = "rest" | "grpc" | "connect";
const PROTOCOLS: readonly Protocol[] = ["rest", "grpc", "connect"];

interface Outcome {
  ok: boolean;
  code: number;
  /** Everything the caller sees: HTTP status and body text, or gRPC/Connect code, message, details; or the response JSON. */
  fingerprint: string;
  /** The response as JSON when ok. */
  body?: Json;
}

const agent = new http.Agent({ keepAlive: true });
closers.push(() => agent.destroy());

/** REST over node:http, so the path reaches the server exactly as written ("..", "//", "%2F" and all). */
function rawRest(method: string, path: string, body: unknown, bearer: string): Promise<Outcome> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  const headers: Record<string, string | number> = { authorization: bearer };
  if (data !== undefined) Object.assign(headers, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port: srv.port, method, path, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        const parsed = text === "" ? {} : (JSON.parse(text) as Json);
        const ok = res.statusCode === 200;
        resolve({ ok, code: ok ? 0 : parsed.code, fingerprint: `${res.statusCode} ${text}`, body: ok ? parsed : undefined });
      });
    });
    req.on("error", reject);
    req.end(data);
  });
}

const grpcClients = new Map<string, GrpcTestClient>();
const connectClients = new Map<string, Json>();

function grpcFor(service: DescService, caller: Caller): GrpcTestClient {
  const key = `${service.typeName} ${caller.uid}`;
  let client = grpcClients.get(key);
  if (!client) {
    client = grpcClient(service, srv.port, { token: caller.token });
    grpcClients.set(key, client);
    closers.push(client.close);
  }
  return client;
}

function connectFor(service: DescService, caller: Caller): Json {
  const key = `${service.typeName} ${caller.uid}`;
  let client = connectClients.get(key);
  if (!client) {
    const transport: TestTransport = testTransport("connect-h1", srv.url, caller.token);
    closers.push(transport.close);
    client = createClient(service, transport.transport);
    connectClients.set(key, client);
  }
  return client;
}

function okOutcome(method: DescMethod, res: Json): Outcome {
  const body = toJson(method.output, res) as JsonValue;
  return { ok: true, code: 0, fingerprint: `0 ${JSON.stringify(body)}`, body };
}

async function callRpc(
  protocol: Exclude<Protocol, "rest">,
  service: DescService,
  localName: string,
  request: object,
  caller: Caller,
): Promise<Outcome> {
  const method = service.methods.find((m) => m.localName === localName)!;
  try {
    const res =
      protocol === "grpc" ? await grpcFor(service, caller).call(localName, request) : await connectFor(service, caller)[localName](request);
    return okOutcome(method, res);
  } catch (err) {
    if (protocol === "grpc") {
      const e = err as ServiceError;
      assert.equal(typeof e.code, "number", String(err));
      const bin = e.metadata.get("grpc-status-details-bin")[0];
      assert.ok(bin instanceof Buffer, "grpc-status-details-bin");
      const status = fromBinary(StatusSchema, bin);
      const details = status.details.map((any) => detailJson(any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1), any.value));
      return { ok: false, code: e.code, fingerprint: `${e.code} ${e.details} ${status.code} ${status.message} ${details.join(",")}` };
    }
    assert.ok(err instanceof ConnectError, String(err));
    const details = err.details.map((d) => ("desc" in d ? "?" : detailJson(d.type, d.value)));
    return { ok: false, code: err.code, fingerprint: `${err.code} ${err.rawMessage} ${details.join(",")}` };
  }
}

const detailTypes = createRegistry(file_google_rpc_error_details);

/** An error detail decoded to JSON, so a uid it echoes can be compared as text. */
function detailJson(typeName: string, value: Uint8Array): string {
  const schema = detailTypes.getMessage(typeName);
  assert.ok(schema, `detail type ${typeName}`);
  return `${typeName}:${JSON.stringify(toJson(schema, fromBinary(schema, value)))}`;
}

// ---------------------------------------------------------------------------
// Probes: one RPC aimed at one of B's objects, buildable with any uid string.

interface Built {
  rest: { method: string; path: string; body?: unknown };
  rpc: object;
}
/** What the plain variant must answer: 7, an empty list, NOT_FOUND for a reference, or INVALID_ARGUMENT. */
type Expect = "denied" | "empty" | "notFound" | "invalid";
interface Probe {
  service: DescService;
  method: string;
  label: string;
  /** The B identifier the probe varies. */
  target: string;
  expect: Expect;
  build(uid: string): Built;
}

function probes(): Probe[] {
  const A = fx.A;
  const B = fx.B;
  const owner = fx.builtin.owner!;
  const out: Probe[] = [];
  const add = (service: DescService, method: string, label: string, target: string, expect: Expect, build: (u: string) => Built) =>
    out.push({ service, method, label, target, expect, build });
  const V2 = "/iam/v2beta1";

  for (const g of [B.org, B.folder, B.sub]) {
    add(GroupsService, "getGroup", `group ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "GET", path: `${V2}/groups/${u}` },
      rpc: { uid: u },
    }));
    add(GroupsService, "updateGroup", `group ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "PATCH", path: `${V2}/groups/${u}?updateMask=description`, body: { description: "pwned" } },
      rpc: { group: { uid: u, description: "pwned" }, updateMask: { paths: ["description"] } },
    }));
    add(GroupsService, "deleteGroup", `group ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "DELETE", path: `${V2}/groups/${u}` },
      rpc: { uid: u },
    }));
    add(GroupsService, "createGroup", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/groups/${u}`, body: { name: "intruder" } },
      rpc: { parent: u, group: { name: "intruder" } },
    }));
    add(IdentitiesService, "createIdentity", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: {
        method: "POST",
        path: `${V2}/identities/${u}`,
        body: { name: "intruder", claimMatch: { issuer: "https://evil.example", subject: "me" } },
      },
      rpc: {
        parent: u,
        identity: { name: "intruder", relationship: { case: "claimMatch", value: { issuer: "https://evil.example", subject: "me" } } },
      },
    }));
    add(RolesService, "createRole", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/roles/${u}`, body: { name: "intruder", capabilities: ["CAP_REPO_LIST"] } },
      rpc: { parent: u, role: { name: "intruder", capabilities: [Capability.CAP_REPO_LIST] } },
    }));
    add(RoleBindingsService, "createRoleBinding", `ownerA as owner of ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/roleBindings/${u}`, body: { identityUid: ownerA.uid, roleUid: owner } },
      rpc: { parent: u, roleBinding: { identityUid: ownerA.uid, roleUid: owner } },
    }));
    add(RoleBindingsService, "batchCreateRoleBindings", `parent ${g.name}`, g.uid, "denied", (u) => {
      const body = { parent: u, requests: [{ parent: u, roleBinding: { identityUid: ownerA.uid, roleUid: owner } }] };
      return { rest: { method: "POST", path: `${V2}/roleBindings:batchCreate`, body }, rpc: body };
    });
    add(RoleBindingsService, "batchCreateRoleBindings", `parent A, sub-request under ${g.name}`, g.uid, "invalid", (u) => {
      const body = { parent: A.org.uid, requests: [{ parent: u, roleBinding: { identityUid: ownerA.uid, roleUid: owner } }] };
      return { rest: { method: "POST", path: `${V2}/roleBindings:batchCreate`, body }, rpc: body };
    });
  }

  for (const id of [B.identity, { uid: B.owner.uid, name: "owner b" }]) {
    add(IdentitiesService, "getIdentity", id.name, id.uid, "denied", (u) => ({
      rest: { method: "GET", path: `${V2}/identities/${u}` },
      rpc: { uid: u },
    }));
    add(IdentitiesService, "updateIdentity", `${id.name} description`, id.uid, "denied", (u) => ({
      rest: { method: "PATCH", path: `${V2}/identities/${u}?updateMask=description`, body: { description: "pwned" } },
      rpc: { identity: { uid: u, description: "pwned" }, updateMask: { paths: ["description"] } },
    }));
    add(IdentitiesService, "updateIdentity", `${id.name} claimMatch`, id.uid, "denied", (u) => ({
      rest: { method: "PATCH", path: `${V2}/identities/${u}`, body: { claimMatch: { issuer: "https://evil.example", subject: "me" } } },
      rpc: {
        identity: { uid: u, relationship: { case: "claimMatch", value: { issuer: "https://evil.example", subject: "me" } } },
        updateMask: { paths: ["claim_match"] },
      },
    }));
    add(IdentitiesService, "deleteIdentity", id.name, id.uid, "denied", (u) => ({
      rest: { method: "DELETE", path: `${V2}/identities/${u}` },
      rpc: { uid: u },
    }));
  }

  add(RolesService, "getRole", B.role.name, B.role.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${V2}/roles/${u}` },
    rpc: { uid: u },
  }));
  add(RolesService, "updateRole", `${B.role.name} capabilities`, B.role.uid, "denied", (u) => ({
    rest: { method: "PATCH", path: `${V2}/roles/${u}`, body: { capabilities: ["CAP_IAM_GROUPS_DELETE"] } },
    rpc: { role: { uid: u, capabilities: [Capability.CAP_IAM_GROUPS_DELETE] }, updateMask: { paths: ["capabilities"] } },
  }));
  add(RolesService, "deleteRole", B.role.name, B.role.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${V2}/roles/${u}` },
    rpc: { uid: u },
  }));

  for (const b of [B.binding, B.ownerBinding]) {
    add(RoleBindingsService, "getRoleBinding", b.uid, b.uid, "denied", (u) => ({
      rest: { method: "GET", path: `${V2}/roleBindings/${u}` },
      rpc: { uid: u },
    }));
    add(RoleBindingsService, "updateRoleBinding", b.uid, b.uid, "denied", (u) => ({
      rest: { method: "PATCH", path: `${V2}/roleBindings/${u}`, body: { identityUid: ownerA.uid } },
      rpc: { roleBinding: { uid: u, identityUid: ownerA.uid }, updateMask: { paths: ["identity_uid"] } },
    }));
    add(RoleBindingsService, "deleteRoleBinding", b.uid, b.uid, "denied", (u) => ({
      rest: { method: "DELETE", path: `${V2}/roleBindings/${u}` },
      rpc: { uid: u },
    }));
  }

  const idp = (defaultRole = fx.builtin.viewer!) => ({
    name: "intruder idp",
    defaultRole,
    oidc: { issuer: "https://evil.example.com", clientId: "evil", clientSecret: "evil-secret" },
  });
  const idpRpc = (defaultRole?: string) => {
    const { oidc, ...fields } = idp(defaultRole);
    return { ...fields, configuration: { case: "oidc", value: oidc } };
  };
  for (const g of [B.org, B.folder]) {
    add(IdentityProvidersService, "createIdentityProvider", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/identityProviders/${u}`, body: idp() },
      rpc: { parent: u, identityProvider: idpRpc() },
    }));
    add(AccountAssociationsService, "createAccountAssociation", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/accountAssociations/${u}`, body: { name: "intruder", amazon: { account: "999999999999" } } },
      rpc: { parent: u, accountAssociation: { name: "intruder", amazon: { account: "999999999999" } } },
    }));
    add(GroupInvitesService, "createGroupInvite", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${V2}/groupInvites/${u}`, body: { roleUid: owner, ttl: "3600s" } },
      rpc: { parent: u, groupInvite: { roleUid: owner, ttl: { seconds: 3600n } } },
    }));
  }
  add(IdentityProvidersService, "getIdentityProvider", B.idp.name, B.idp.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${V2}/identityProviders/${u}` },
    rpc: { uid: u },
  }));
  add(IdentityProvidersService, "updateIdentityProvider", B.idp.name, B.idp.uid, "denied", (u) => ({
    rest: { method: "PATCH", path: `${V2}/identityProviders/${u}?updateMask=default_role`, body: { defaultRole: owner } },
    rpc: { identityProvider: { uid: u, defaultRole: owner }, updateMask: { paths: ["default_role"] } },
  }));
  add(IdentityProvidersService, "deleteIdentityProvider", B.idp.name, B.idp.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${V2}/identityProviders/${u}` },
    rpc: { uid: u },
  }));
  add(AccountAssociationsService, "getAccountAssociation", B.association.name, B.association.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${V2}/accountAssociations/${u}` },
    rpc: { uid: u },
  }));
  add(AccountAssociationsService, "updateAccountAssociation", B.association.name, B.association.uid, "denied", (u) => ({
    rest: { method: "PATCH", path: `${V2}/accountAssociations/${u}?updateMask=description`, body: { description: "pwned" } },
    rpc: { accountAssociation: { uid: u, description: "pwned" }, updateMask: { paths: ["description"] } },
  }));
  add(AccountAssociationsService, "deleteAccountAssociation", B.association.name, B.association.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${V2}/accountAssociations/${u}` },
    rpc: { uid: u },
  }));
  add(GroupInvitesService, "getGroupInvite", "B's invite", B.invite.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${V2}/groupInvites/${u}` },
    rpc: { uid: u },
  }));
  add(GroupInvitesService, "deleteGroupInvite", "B's invite", B.invite.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${V2}/groupInvites/${u}` },
    rpc: { uid: u },
  }));

  // The registry: repos under B's groups, B's repo and tag, a tag put into B's repo.
  const R2 = "/registry/v2beta1";
  for (const g of [B.org, B.folder]) {
    add(ReposService, "createRepo", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${R2}/repos/${u}`, body: { name: "intruder" } },
      rpc: { parent: u, repo: { name: "intruder" } },
    }));
  }
  add(ReposService, "getRepo", B.repo.name, B.repo.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${R2}/repos/${u}` },
    rpc: { uid: u },
  }));
  add(ReposService, "updateRepo", `${B.repo.name} description`, B.repo.uid, "denied", (u) => ({
    rest: { method: "PATCH", path: `${R2}/repos/${u}?updateMask=description`, body: { description: "pwned" } },
    rpc: { repo: { uid: u, description: "pwned" }, updateMask: { paths: ["description"] } },
  }));
  add(ReposService, "deleteRepo", B.repo.name, B.repo.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${R2}/repos/${u}` },
    rpc: { uid: u },
  }));
  const evilTag = { name: "latest", digest: `sha256:${"e".repeat(64)}` };
  add(TagsService, "createTag", `B's tag name in ${B.repo.name}`, B.repo.uid, "denied", (u) => ({
    rest: { method: "POST", path: `${R2}/tags/${u}`, body: evilTag },
    rpc: { parent: u, tag: evilTag },
  }));
  add(TagsService, "getTag", "B's tag", B.tag.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${R2}/tags/${u}` },
    rpc: { uid: u },
  }));
  add(TagsService, "deleteTag", "B's tag", B.tag.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${R2}/tags/${u}` },
    rpc: { uid: u },
  }));
  // Subscriptions: one under B's groups (it would receive B's events), B's by uid, its log, a redelivery.
  const SUBS = "/events/v1/subscriptions";
  for (const g of [B.org, B.folder]) {
    add(SubscriptionsService, "createSubscription", `under ${g.name}`, g.uid, "denied", (u) => ({
      rest: { method: "POST", path: `${SUBS}/${u}`, body: { sink: "https://intruder.example/hook" } },
      rpc: { parent: u, subscription: { sink: "https://intruder.example/hook" } },
    }));
  }
  add(SubscriptionsService, "getSubscription", "B's subscription", B.subscription.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${SUBS}/${u}` },
    rpc: { uid: u },
  }));
  add(SubscriptionsService, "deleteSubscription", "B's subscription", B.subscription.uid, "denied", (u) => ({
    rest: { method: "DELETE", path: `${SUBS}/${u}` },
    rpc: { uid: u },
  }));
  add(SubscriptionsService, "listDeliveries", "B's subscription", B.subscription.uid, "denied", (u) => ({
    rest: { method: "GET", path: `${SUBS}/${u}/deliveries` },
    rpc: { uid: u },
  }));
  add(SubscriptionsService, "redeliverEvent", "B's subscription", B.subscription.uid, "denied", (u) => ({
    rest: { method: "POST", path: `${SUBS}/${u}:redeliver`, body: { eventId: "00000000-0000-4000-8000-000000000000" } },
    rpc: { uid: u, eventId: "00000000-0000-4000-8000-000000000000" },
  }));
  // An identity provider or an invite in A that promises B's custom role.
  add(IdentityProvidersService, "createIdentityProvider", "in A with B's role as default", B.role.uid, "notFound", (u) => ({
    rest: { method: "POST", path: `${V2}/identityProviders/${A.org.uid}`, body: idp(u) },
    rpc: { parent: A.org.uid, identityProvider: idpRpc(u) },
  }));
  add(IdentityProvidersService, "updateIdentityProvider", "A's, to B's role as default", B.role.uid, "notFound", (u) => ({
    rest: { method: "PATCH", path: `${V2}/identityProviders/${A.idp.uid}?updateMask=default_role`, body: { defaultRole: u } },
    rpc: { identityProvider: { uid: A.idp.uid, defaultRole: u }, updateMask: { paths: ["default_role"] } },
  }));
  add(GroupInvitesService, "createGroupInvite", "in A for B's role", B.role.uid, "notFound", (u) => ({
    rest: { method: "POST", path: `${V2}/groupInvites/${A.org.uid}`, body: { roleUid: u, ttl: "3600s" } },
    rpc: { parent: A.org.uid, groupInvite: { roleUid: u, ttl: { seconds: 3600n } } },
  }));

  // A role binding in A that references B's identity or B's custom role.
  const refs = [
    { what: "identity", target: B.identity.uid, ref: (u: string) => ({ identityUid: u, roleUid: fx.builtin.viewer! }) },
    { what: "role", target: B.role.uid, ref: (u: string) => ({ identityUid: A.identity.uid, roleUid: u }) },
  ];
  for (const { what, target, ref } of refs) {
    add(RoleBindingsService, "createRoleBinding", `in A with B's ${what}`, target, "notFound", (u) => ({
      rest: { method: "POST", path: `${V2}/roleBindings/${A.org.uid}`, body: ref(u) },
      rpc: { parent: A.org.uid, roleBinding: ref(u) },
    }));
    add(RoleBindingsService, "batchCreateRoleBindings", `in A with B's ${what}`, target, "notFound", (u) => {
      const body = { parent: A.org.uid, requests: [{ parent: A.folder.uid, roleBinding: ref(u) }] };
      return { rest: { method: "POST", path: `${V2}/roleBindings:batchCreate`, body }, rpc: body };
    });
    const field = what === "identity" ? "identityUid" : "roleUid";
    add(RoleBindingsService, "updateRoleBinding", `A's binding to B's ${what}`, target, "notFound", (u) => ({
      rest: { method: "PATCH", path: `${V2}/roleBindings/${A.binding.uid}`, body: { [field]: u } },
      rpc: { roleBinding: { uid: A.binding.uid, [field]: u }, updateMask: { paths: [what === "identity" ? "identity_uid" : "role_uid"] } },
    }));
  }

  // Lists filtered to B: every hierarchy filter, and the role-binding reference filters.
  const lists: [DescService, string, string][] = [
    [GroupsService, "listGroups", "groups"],
    [IdentitiesService, "listIdentities", "identities"],
    [RolesService, "listRoles", "roles"],
    [RoleBindingsService, "listRoleBindings", "roleBindings"],
    [IdentityProvidersService, "listIdentityProviders", "identityProviders"],
    [AccountAssociationsService, "listAccountAssociations", "accountAssociations"],
    [GroupInvitesService, "listGroupInvites", "groupInvites"],
    [GroupsV1Service, "listGroups", "v1/groups"],
    [ReposService, "listRepos", "repos"],
    [TagsService, "listTags", "tags"],
    [RegistryV1Service, "listRepos", "v1/repos"],
    [EventsService, "listEvents", "events"],
    [SubscriptionsService, "listSubscriptions", "subscriptions"],
  ];
  const listPaths: Record<string, string> = {
    "v1/groups": "/iam/v1/groups",
    repos: "/registry/v2beta1/repos",
    tags: "/registry/v2beta1/tags",
    "v1/repos": "/registry/v1/repos",
    events: "/events/v1/events",
    subscriptions: "/events/v1/subscriptions",
  };
  const filters: [string, string, (u: string) => object][] = [
    ["uidp.descendants_of", B.org.uid, (u) => ({ descendantsOf: u })],
    ["uidp.descendants_of", B.folder.uid, (u) => ({ descendantsOf: u })],
    ["uidp.children_of", B.org.uid, (u) => ({ childrenOf: u })],
    ["uidp.children_of", B.folder.uid, (u) => ({ childrenOf: u })],
    ["uidp.ancestors_of", B.sub.uid, (u) => ({ ancestorsOf: u })],
  ];
  for (const [service, method, collection] of lists) {
    const path = listPaths[collection] ?? `${V2}/${collection}`;
    for (const [param, target, uidp] of filters) {
      add(
        service,
        method,
        `${param}=${target === B.org.uid ? "B" : target === B.folder.uid ? "B/folder" : "B/folder/sub"}`,
        target,
        "empty",
        (u) => ({
          rest: { method: "GET", path: `${path}?${param}=${u}` },
          rpc: { uidp: uidp(u) },
        }),
      );
    }
    const own: Record<string, string> = {
      groups: B.folder.uid,
      "v1/groups": B.folder.uid,
      identities: B.identity.uid,
      roles: B.role.uid,
      roleBindings: B.binding.uid,
      identityProviders: B.idp.uid,
      accountAssociations: B.association.uid,
      groupInvites: B.invite.uid,
      repos: B.repo.uid,
      tags: B.tag.uid,
      "v1/repos": B.repo.uid,
      // An event's subject: B's folder's creation was one.
      events: B.folder.uid,
      subscriptions: B.subscription.uid,
    };
    add(service, method, "uidp.ids=B's", own[collection]!, "empty", (u) => ({
      rest: { method: "GET", path: `${path}?uidp.ids=${u}` },
      rpc: { uidp: { ids: [u] } },
    }));
  }
  add(GroupInvitesService, "listGroupInvites", "key_id=B's", B.invite.keyId, "empty", (u) => ({
    rest: { method: "GET", path: `${V2}/groupInvites?key_id=${u}` },
    rpc: { keyId: u },
  }));
  for (const target of [B.org.uid, B.folder.uid]) {
    add(GroupsV1Service, "listGroups", "id=B's", target, "empty", (u) => ({
      rest: { method: "GET", path: `/iam/v1/groups?id=${u}` },
      rpc: { id: u },
    }));
  }
  add(RegistryV1Service, "listRepos", "id=B's", B.repo.uid, "empty", (u) => ({
    rest: { method: "GET", path: `/registry/v1/repos?id=${u}` },
    rpc: { id: u },
  }));
  // Advisories: B's by uid, and every hierarchy filter aimed at B.
  const ADV = "/vulnerabilities/v2beta1/advisories";
  add(AdvisoriesService, "getAdvisory", "B's advisory", bAdvisory, "denied", (u) => ({
    rest: { method: "GET", path: `${ADV}/${u}` },
    rpc: { uid: u },
  }));
  for (const [param, target, uidp] of filters) {
    add(
      AdvisoriesService,
      "listAdvisories",
      `${param}=${target === B.org.uid ? "B" : target === B.folder.uid ? "B/folder" : "B/folder/sub"}`,
      target,
      "empty",
      (u) => ({
        rest: { method: "GET", path: `${ADV}?${param}=${u}` },
        rpc: { uidp: uidp(u) },
      }),
    );
  }
  add(AdvisoriesService, "listAdvisories", "uidp.ids=B's", bAdvisory, "empty", (u) => ({
    rest: { method: "GET", path: `${ADV}?uidp.ids=${u}` },
    rpc: { uidp: { ids: [u] } },
  }));
  for (const [filter, target] of [
    ["identity", B.identity.uid],
    ["group", B.org.uid],
    ["role", B.role.uid],
  ] as const) {
    add(RoleBindingsService, "listRoleBindings", `${filter}=B's`, target, "empty", (u) => ({
      rest: { method: "GET", path: `${V2}/roleBindings?${filter}=${u}` },
      rpc: { [filter]: u },
    }));
  }
  return out;
}

/** Variants of a uid as a path segment or field value; null when the variant equals the plain uid. */
const VARIANTS: Record<string, (uid: string) => string | null> = {
  plain: (u) => u,
  "A/../B": (u) => `${fx.A.org.uid}/../${u}`,
  "%2F-encoded slashes": (u) => (u.includes("/") ? u.replaceAll("/", "%2F") : null),
  "trailing /": (u) => `${u}/`,
  "upper-case hex": (u) => u.toUpperCase(),
  "// in the path": (u) => (u.includes("/") ? u.replace("/", "//") : `/${u}`),
};

/** A random identifier of the same shape (segment lengths) that does not exist. */
function ghostOf(uid: string): string {
  return uid
    .split("/")
    .map((segment) => randomBytes(segment.length / 2).toString("hex"))
    .join("/");
}

async function run(protocol: Protocol, probe: Probe, uid: string, caller: Caller): Promise<Outcome> {
  const built = probe.build(uid);
  if (protocol === "rest") return rawRest(built.rest.method, built.rest.path, built.rest.body, caller.bearer);
  return callRpc(protocol, probe.service, probe.method, built.rpc, caller);
}

/** List items in a response body, whatever the collection's name. */
function listItems(body: Json): Json[] {
  for (const key of [
    "groups",
    "identities",
    "roles",
    "roleBindings",
    "identityProviders",
    "accountAssociations",
    "groupInvites",
    "advisories",
    "repos",
    "tags",
    "events",
    "subscriptions",
    "items",
  ])
    if (Array.isArray(body?.[key])) return body[key];
  return [];
}

describe("ownerA against B's identifiers", () => {
  test("every served RPC that takes a uid, parent or uidp filter is probed", () => {
    const all = probes();
    const probed = new Set(all.map((p) => `${p.service.typeName}/${p.service.methods.find((m) => m.localName === p.method)!.name}`));
    const byName = new Map<string, DescMethod>(
      CONTRACT_FILES.flatMap((f) => f.services).flatMap((s) => s.methods.map((m) => [`${s.typeName}/${m.name}`, m] as const)),
    );
    const served = new Set(srv.server.restOperations.map((op) => op.rpc.replace(/\.(\w+)$/, "/$1")));
    const missing: string[] = [];
    for (const name of served) {
      const method = byName.get(name);
      assert.ok(method, `${name} is served but not in the contract`);
      if (takesIdentifier(method) && !probed.has(name) && !(name in EXEMPT)) missing.push(name);
    }
    for (const service of IAM_SERVICES) {
      for (const m of service.methods) {
        const name = `${service.typeName}/${m.name}`;
        assert.ok(served.has(name), `${name} is served`);
        if (!probed.has(name)) assert.equal(takesIdentifier(m), false, `${name} takes an identifier but is not probed`);
      }
    }
    assert.deepEqual(missing, [], "served RPCs taking identifiers without a cross-tenant probe");
    for (const name of Object.keys(EXEMPT)) assert.ok(served.has(name), `exempt ${name} is served`);
  });

  test("RPC × protocol × variant: nothing succeeds, lists return nothing of B, existing and missing targets answer alike", async () => {
    const all = probes();
    const bRoot = fx.B.org.uid;
    let calls = 0;
    let succeeded = 0;
    let bRecords = 0;
    const differences: string[] = [];
    const wrong: string[] = [];
    for (const probe of all) {
      const ghost = ghostOf(probe.target);
      for (const [variant, vary] of Object.entries(VARIANTS)) {
        const sent = vary(probe.target);
        if (sent === null) continue;
        const ghostSent = vary(ghost)!;
        for (const protocol of PROTOCOLS) {
          const where = `${probe.service.name}.${probe.method} ${probe.label} [${protocol}, ${variant}]`;
          const real = await run(protocol, probe, sent, ownerA);
          const fake = await run(protocol, probe, ghostSent, ownerA);
          calls++;
          if (real.ok) {
            const items = listItems(real.body);
            const ofB = items.filter((it) => String(it.uid ?? it.subject ?? it.id).startsWith(bRoot)).length;
            bRecords += ofB;
            if (probe.expect !== "empty") {
              succeeded++;
              wrong.push(`${where}: succeeded: ${real.fingerprint}`);
            } else if (real.fingerprint.includes(bRoot)) wrong.push(`${where}: the response names B: ${real.fingerprint}`);
          }
          // The answers may echo the uid the caller sent (a NOT_FOUND names it); everything else must match byte for byte.
          // A feed's next page token is where it stands now (it moves with every commit anywhere), not an answer about B.
          const feedless = (f: string) =>
            f.replace(/"nextPageToken":"[^"]*"/, '"nextPageToken":"<cursor>"').replace(/nextPageToken: '[^']*'/, "");
          const same = feedless(real.fingerprint).split(sent).join("<uid>") === feedless(fake.fingerprint).split(ghostSent).join("<uid>");
          if (!same) differences.push(`${where}\n  existing: ${real.fingerprint}\n  missing:  ${fake.fingerprint}`);
          if (variant === "plain") {
            const want = { denied: 7, empty: 0, notFound: 5, invalid: 3 }[probe.expect];
            if (real.code !== want) wrong.push(`${where}: code ${real.code}, want ${want}: ${real.fingerprint}`);
            if (protocol === "rest" && probe.expect === "empty" && !V1_LISTS.includes(probe.service) && real.body?.totalCount !== "0") {
              wrong.push(`${where}: totalCount ${real.body?.totalCount}, want "0"`);
            }
          } else if (real.ok && probe.expect !== "empty") {
            wrong.push(`${where}: a malformed uid succeeded`);
          }
        }
      }
    }
    assert.deepEqual(wrong, []);
    assert.deepEqual(differences, [], "existing and non-existing targets must answer alike");
    assert.equal(succeeded, 0);
    assert.equal(bRecords, 0);
    assert.ok(calls > 1000, `${calls} calls`);
    // eslint-disable-next-line no-console
    console.log(
      `${calls} calls (RPC × protocol × variant): ${succeeded} succeeded, ${bRecords} B records returned by List, ${differences.length} status differences between existing and non-existing targets`,
    );
  });

  test("the plain denials are PERMISSION_DENIED in the error model, over REST", async () => {
    assertRestError(await restAs(srv, ownerA, "GET", `/iam/v2beta1/groups/${fx.B.org.uid}`), 403, 7, "PERMISSION_DENIED");
    assertRestError(
      await restAs(srv, ownerA, "POST", `/iam/v2beta1/roleBindings/${fx.A.org.uid}`, {
        identityUid: fx.B.identity.uid,
        roleUid: fx.builtin.viewer,
      }),
      404,
      5,
      "NOT_FOUND",
    );
  });

  test("B's owner sees its own records through the same calls (the probes are not vacuous)", async () => {
    const ownerB = fx.B.owner;
    assert.equal((await restAs(srv, ownerB, "GET", `/iam/v2beta1/groups/${fx.B.folder.uid}`)).status, 200);
    assert.equal((await restAs(srv, ownerB, "GET", `/iam/v2beta1/roles/${fx.B.role.uid}`)).status, 200);
    assert.equal((await restAs(srv, ownerB, "GET", `/iam/v2beta1/roleBindings/${fx.B.binding.uid}`)).status, 200);
    assert.equal((await restAs(srv, ownerB, "GET", `/vulnerabilities/v2beta1/advisories/${bAdvisory}`)).status, 200);
    const advisories = await restAs(srv, ownerB, "GET", `/vulnerabilities/v2beta1/advisories?uidp.descendants_of=${fx.B.org.uid}`);
    assert.deepEqual(
      advisories.body.advisories.map((a: Json) => a.uid),
      [bAdvisory],
    );
    const groups = await restAs(srv, ownerB, "GET", `/iam/v2beta1/groups?uidp.descendants_of=${fx.B.org.uid}`);
    assert.equal(groups.body.totalCount, "2");
    const bindings = await restAs(srv, ownerB, "GET", `/iam/v2beta1/roleBindings?identity=${fx.B.identity.uid}`);
    assert.deepEqual(
      bindings.body.roleBindings.map((b: Json) => b.uid),
      [fx.B.binding.uid],
    );
    const v1 = await restAs(srv, ownerB, "GET", `/iam/v1/groups?id=${fx.B.folder.uid}`);
    assert.deepEqual(
      v1.body.items.map((g: Json) => g.id),
      [fx.B.folder.uid],
    );
    assert.equal((await restAs(srv, ownerB, "GET", `/registry/v2beta1/repos/${fx.B.repo.uid}`)).status, 200);
    assert.equal((await restAs(srv, ownerB, "GET", `/registry/v2beta1/tags/${fx.B.tag.uid}`)).status, 200);
    const tags = await restAs(srv, ownerB, "GET", `/registry/v2beta1/tags?uidp.descendants_of=${fx.B.org.uid}`);
    assert.deepEqual(
      tags.body.tags.map((t: Json) => t.uid),
      [fx.B.tag.uid],
    );
    const v1Repos = await restAs(srv, ownerB, "GET", `/registry/v1/repos?id=${fx.B.repo.uid}`);
    assert.deepEqual(
      v1Repos.body.items.map((r: Json) => r.id),
      [fx.B.repo.uid],
    );
  });

  test("a PATCH whose path names A's object and whose body names B's changes A only", async () => {
    const A = fx.A;
    const B = fx.B;
    const cases: [string, string, string, object][] = [
      ["/iam/v2beta1/groups", A.folder.uid, B.folder.uid, { description: "conflict" }],
      ["/iam/v2beta1/identities", A.identity.uid, B.identity.uid, { description: "conflict" }],
      ["/iam/v2beta1/roles", A.role.uid, B.role.uid, { description: "conflict" }],
      ["/iam/v2beta1/roleBindings", A.binding.uid, B.binding.uid, { roleUid: A.role.uid }],
      ["/registry/v2beta1/repos", A.repo.uid, B.repo.uid, { description: "conflict" }],
    ];
    for (const [collection, mine, theirs, change] of cases) {
      const theirsBefore = await adminOk(srv, "GET", `${collection}/${theirs}`);
      for (const query of ["", collection.endsWith("/roleBindings") ? "?updateMask=role_uid" : "?updateMask=description"]) {
        const res = await restAs(srv, ownerA, "PATCH", `${collection}/${mine}${query}`, { ...change, uid: theirs });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.equal(res.body.uid, mine, `${collection}: the path's uid wins`);
        if ("description" in change) assert.equal(res.body.description, "conflict");
        assert.deepEqual(await adminOk(srv, "GET", `${collection}/${theirs}`), theirsBefore, `${collection}: B's record is unchanged`);
      }
    }
  });

  test("nothing of B changed or was created under B", async () => {
    assert.deepEqual(await snapshot(srv, fx.B.org.uid), beforeB);
  });
});

describe("prefix confusion", () => {
  /** uid with its last hex digit changed: the longest possible common prefix with uid. */
  const nearMiss = (uid: string) => uid.slice(0, -1) + (uid.endsWith("0") ? "1" : "0");
  let nearOrg: string;
  let nearFolder: string;

  before(async () => {
    // Uids are random, so two that share all but one character are inserted
    // directly, through a second connection to the server's database.
    nearOrg = nearMiss(fx.A.org.uid);
    nearFolder = nearMiss(fx.A.folder.uid);
    const store = await srv.openStore();
    const now = Date.now();
    const group = (uid: string, parentUid: string | null, name: string) =>
      store.groups.create({ uid, parentUid, name, description: "", verified: false, resourceLimits: {}, createTime: now, updateTime: now });
    await group(nearOrg, null, "near org");
    await group(nearFolder, fx.A.org.uid, "near folder");
    await store.close();
    // A write through the server itself, so nothing it cached predates the insert.
    await adminOk(srv, "POST", `/iam/v2beta1/groups/${fx.A.sibling.uid}`, { name: "cache buster" });
  });

  test("with fixed-width hex segments, a uid that starts with another is its descendant", () => {
    const uids = [fx.A.org, fx.A.folder, fx.A.sub, fx.A.sibling, fx.B.org, fx.B.folder, fx.B.sub]
      .map((g) => g.uid)
      .concat(nearOrg, nearFolder);
    for (const x of uids) {
      for (const y of uids) {
        if (x !== y && x.startsWith(y)) assert.equal(x[y.length], "/", `${x} starts with ${y} only at a segment boundary`);
      }
    }
    assert.equal(isAtOrBelow(fx.A.org.uid, nearOrg), false);
    assert.equal(isAtOrBelow(fx.A.folder.uid, nearFolder), false);
    assert.equal(isAtOrBelow(fx.A.folder.uid, `${fx.A.folder.uid}0`), false, "a longer last segment is not below");
  });

  test("a group differing from A's only in the last character is not A's: 403 like a missing uid, absent from lists", async () => {
    const get = (uid: string) => restAs(srv, ownerA, "GET", `/iam/v2beta1/groups/${uid}`);
    const near = await get(nearOrg);
    assertRestError(near, 403, 7, "PERMISSION_DENIED");
    assert.deepEqual((await get(ghostOf(nearOrg))).body, near.body);
    assert.equal((await get(fx.A.org.uid)).status, 200);
    assertRestError(await get(`${fx.A.org.uid}/0000000000000000`), 404, 5, "NOT_FOUND");
    const listed = await restAs(srv, ownerA, "GET", "/iam/v2beta1/groups?page_size=200");
    assert.ok(!listed.body.groups.some((g: Json) => g.uid === nearOrg), "the near-miss org is not listed");
    assert.ok(listed.body.groups.every((g: Json) => isAtOrBelow(fx.A.org.uid, g.uid)));
    assert.equal(listed.body.totalCount, String(listed.body.groups.length));
    assertRestError(await restAs(srv, ownerA, "POST", `/iam/v2beta1/groups/${nearOrg}`, { name: "inside" }), 403, 7, "PERMISSION_DENIED");
  });

  test("a folder-scoped owner does not reach a sibling whose uid differs from its folder's only in the last character", async () => {
    const a2 = fx.A.folderOwner;
    const get = (uid: string) => restAs(srv, a2, "GET", `/iam/v2beta1/groups/${uid}`);
    assertRestError(await get(nearFolder), 403, 7, "PERMISSION_DENIED");
    assert.equal((await get(fx.A.folder.uid)).status, 200);
    assertRestError(await get(`${fx.A.folder.uid}/0000000000000000`), 404, 5, "NOT_FOUND");
    assertRestError(await restAs(srv, a2, "POST", `/iam/v2beta1/groups/${nearFolder}`, { name: "inside" }), 403, 7, "PERMISSION_DENIED");
    const listed = await restAs(srv, a2, "GET", "/iam/v2beta1/groups?page_size=200");
    assert.deepEqual(listed.body.groups.map((g: Json) => g.uid).sort(), [fx.A.folder.uid, fx.A.sub.uid].sort());
    assert.equal(listed.body.totalCount, "2");
    const below = await adminOk(srv, "GET", `/iam/v2beta1/groups?uidp.descendants_of=${fx.A.folder.uid}`);
    assert.deepEqual(
      below.groups.map((g: Json) => g.uid),
      [fx.A.sub.uid],
      "the store's descendant range excludes the near miss",
    );
    const children = await adminOk(srv, "GET", `/iam/v2beta1/groups?uidp.children_of=${fx.A.org.uid}&page_size=200`);
    assert.ok(
      children.groups.some((g: Json) => g.uid === nearFolder),
      "the near miss is a real child of A",
    );
  });
});
