import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { RoleBindingsService, type RoleBinding } from "../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import { assertRestError, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError } from "../support/grpc-suite.js";
import { describeListContract } from "../support/list-contract.js";
import { ok } from "../support/principals.js";
import { assertCreated, assertDeletedOnce, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup, type RestResult } from "../support/server.js";

const START = Date.parse("2032-07-08T09:10:11.456Z");
const ISSUER = "https://issuer.example";
const JWKS = JSON.stringify({ keys: [{ kty: "OKP", crv: "Ed25519", x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" }] });

const BASE = "/iam/v2beta1/roleBindings";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
let org: Json, team: Json, other: Json;
let idOrg: Json, idTeam: Json, idStatic: Json, idOther: Json;
let viewer: Json, roleOrg: Json, roleTeam: Json, roleOther: Json;

let clock = START;
const srv = serveForSuite({ now: () => clock }, makeFixtures);
const call = restOn(srv);

const identity = (parent: string, name: string, subject: string) =>
  ok(call("POST", `/iam/v2beta1/identities/${parent}`, { name, description: `${name} desc`, claimMatch: { issuer: ISSUER, subject } }));
const role = (parent: string, name: string, capabilities = ["CAP_REPO_LIST"]) =>
  ok(call("POST", `/iam/v2beta1/roles/${parent}`, { name, description: `${name} desc`, capabilities }));
const bind = (group: string, identityUid: string, roleUid: string) => call("POST", `${BASE}/${group}`, { identityUid, roleUid });
const groupBindings = async (group: string) =>
  ((await ok(call("GET", `${BASE}?group=${group}`))).roleBindings as Json[]).map((b) => b.uid).sort();

/** The groups, identities and roles the tests bind, in two organizations. */
async function makeFixtures(): Promise<void> {
  org = await createGroup(srv.url, null, "binding org", "the org");
  team = await createGroup(srv.url, org.uid, "binding team", "a team");
  other = await createGroup(srv.url, null, "other org");
  idOrg = await identity(org.uid, "org bot", "sub-org");
  idTeam = await identity(team.uid, "team bot", "sub-team");
  idOther = await identity(other.uid, "other bot", "sub-other");
  idStatic = await ok(
    call("POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "static bot",
      staticKeys: { issuer: "https://offline.example", subject: "robot", issuerKeys: JWKS },
    }),
  );
  const roles = await ok(call("GET", "/iam/v2beta1/roles?name=viewer&uidp.in_root=true"));
  viewer = roles.roles[0];
  assert.ok(viewer, "the built-in viewer role exists");
  roleOrg = await role(org.uid, "org role");
  roleTeam = await role(team.uid, "team role");
  roleOther = await role(other.uid, "other role");
}

/** Asserts NOT_FOUND naming the kind and uid of the reference. */
function assertNotFound(res: RestResult, kind: string, uid: string) {
  const err = assertRestError(res, 404, 5, "NOT_FOUND");
  assert.ok(err.message.includes(`${kind} ${uid}`), err.message);
}

describe("create", () => {
  test("the response is hydrated: identity, group, role, createTime, no updateTime; inputs echoed", async () => {
    const b = await ok(bind(team.uid, idOrg.uid, viewer.uid));
    assertCreated(b, team.uid, {
      identity: { uid: idOrg.uid, name: "org bot", description: "org bot desc", subject: "sub-org", issuer: ISSUER, email: "" },
      group: { uid: team.uid, name: "binding team", description: "a team" },
      role: { uid: viewer.uid, name: "viewer", description: viewer.description },
      createTime: new Date(clock).toISOString(),
      identityUid: idOrg.uid,
      roleUid: viewer.uid,
    });
    assert.match(b.createTime, MILLIS_TIMESTAMP);
    assert.equal("updateTime" in b, false);
    assert.deepEqual(await ok(call("GET", `${BASE}/${b.uid}`)), b);
  });

  test("a static-keys identity shows the keys' issuer and subject", async () => {
    const b = await ok(bind(org.uid, idStatic.uid, roleOrg.uid));
    assert.equal(b.identity.issuer, "https://offline.example");
    assert.equal(b.identity.subject, "robot");
    assert.deepEqual(b.role, { uid: roleOrg.uid, name: "org role", description: "org role desc" });
  });

  test("only identityUid and roleUid are read from the body", async () => {
    const res = await call("POST", `${BASE}/${org.uid}`, {
      identityUid: idOrg.uid,
      roleUid: roleOrg.uid,
      uid: `${org.uid}/0000000000000000`,
      createTime: "2001-01-01T00:00:00Z",
      identity: { uid: idOther.uid, name: "spoof" },
    });
    const b = await ok(Promise.resolve(res));
    assert.notEqual(b.uid, `${org.uid}/0000000000000000`);
    assert.equal(b.identity.uid, idOrg.uid);
    assert.equal(b.identity.name, "org bot");
    assert.equal(b.createTime, new Date(clock).toISOString());
  });

  test("a custom role binds at or below its group, not above it or in another org", async () => {
    assert.equal((await bind(team.uid, idTeam.uid, roleOrg.uid)).status, 200);
    assert.equal((await bind(team.uid, idTeam.uid, roleTeam.uid)).status, 200);
    assertNotFound(await bind(org.uid, idOrg.uid, roleTeam.uid), "role", roleTeam.uid);
    assertNotFound(await bind(org.uid, idOrg.uid, roleOther.uid), "role", roleOther.uid);
  });

  test("missing references are NOT_FOUND naming the identity or role (a person not yet signed up is bindable: see security-iam)", async () => {
    const ghostIdentity = `${org.uid}/0123456789abcdef`;
    assertNotFound(await bind(org.uid, ghostIdentity, viewer.uid), "identity", ghostIdentity);
    assertNotFound(await bind(org.uid, idOrg.uid, "d".repeat(40)), "role", "d".repeat(40));
    assertRestError(await bind("e".repeat(40), idOrg.uid, viewer.uid), 404, 5, "NOT_FOUND");
  });

  const CASES: [string, object, string[]][] = [
    ["no identity_uid", { roleUid: "a".repeat(40) }, ["identity_uid"]],
    ["no role_uid", { identityUid: "a".repeat(40) }, ["role_uid"]],
    ["an empty body", {}, ["identity_uid", "role_uid"]],
    ["malformed uids", { identityUid: "bob", roleUid: "viewer" }, ["identity_uid", "role_uid"]],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      assertViolations(await call("POST", `${BASE}/${org.uid}`, body), fields);
    });
  }

  test("a malformed parent is INVALID_ARGUMENT on parent", async () => {
    assertViolations(await call("POST", `${BASE}/not-a-group`, { identityUid: idOrg.uid, roleUid: viewer.uid }), ["parent"]);
  });
});

describe("get, update, delete", () => {
  test("get of a missing binding is NOT_FOUND; of a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `${BASE}/${org.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${BASE}/x`), ["uid"]);
  });

  test("update changes the role or the identity and returns the binding hydrated", async () => {
    const b = await ok(bind(team.uid, idTeam.uid, viewer.uid));
    const moved = await ok(call("PATCH", `${BASE}/${b.uid}`, { roleUid: roleTeam.uid }));
    assert.deepEqual(moved, { ...b, roleUid: roleTeam.uid, role: { uid: roleTeam.uid, name: "team role", description: "team role desc" } });
    const masked = await ok(call("PATCH", `${BASE}/${b.uid}?updateMask=identity_uid`, { identityUid: idOrg.uid, roleUid: viewer.uid }));
    assert.equal(masked.identityUid, idOrg.uid);
    assert.equal(masked.identity.name, "org bot");
    assert.equal(masked.roleUid, roleTeam.uid, "role_uid outside the mask is ignored");
    assert.deepEqual(await ok(call("GET", `${BASE}/${b.uid}`)), masked);
  });

  test("update checks references like create and changes nothing on failure", async () => {
    const b = await ok(bind(org.uid, idOrg.uid, roleOrg.uid));
    assertNotFound(await call("PATCH", `${BASE}/${b.uid}`, { roleUid: roleTeam.uid }), "role", roleTeam.uid);
    assertNotFound(
      await call("PATCH", `${BASE}/${b.uid}`, { identityUid: `${org.uid}/0123456789abcdef` }),
      "identity",
      `${org.uid}/0123456789abcdef`,
    );
    assertViolations(await call("PATCH", `${BASE}/${b.uid}`, { roleUid: "" }), ["role_uid"]);
    assertViolations(await call("PATCH", `${BASE}/${b.uid}?updateMask=identity_uid,role_uid`, { roleUid: "bad" }), [
      "identity_uid",
      "role_uid",
    ]);
    for (const path of ["identity", "create_time", "uid", "group"]) {
      assertViolations(await call("PATCH", `${BASE}/${b.uid}?updateMask=${path}`, { roleUid: viewer.uid }), ["update_mask"]);
    }
    assert.deepEqual(await ok(call("GET", `${BASE}/${b.uid}`)), b);
    assertRestError(await call("PATCH", `${BASE}/${org.uid}/0123456789abcdef`, { roleUid: viewer.uid }), 404, 5, "NOT_FOUND");
  });

  test("delete is idempotent: {} whether or not the binding exists", async () => {
    const b = await ok(bind(org.uid, idOrg.uid, viewer.uid));
    await assertDeletedOnce(srv, `${BASE}/${b.uid}`, true);
    assertViolations(await call("DELETE", `${BASE}/nope`), ["uid"]);
  });

  test("deleting an identity removes its bindings", async () => {
    const temp = await identity(org.uid, "temp bot", "sub-temp");
    const b = await ok(bind(org.uid, temp.uid, viewer.uid));
    await ok(call("DELETE", `/iam/v2beta1/identities/${temp.uid}`));
    assertRestError(await call("GET", `${BASE}/${b.uid}`), 404, 5, "NOT_FOUND");
  });

  test("a group holding a binding cannot be deleted: RESOURCE_NOT_EMPTY naming role bindings", async () => {
    const g = await createGroup(srv.url, null, "busy with bindings");
    const b = await ok(bind(g.uid, idOrg.uid, viewer.uid));
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${g.uid}`), "RESOURCE_NOT_EMPTY", /role bindings/);
    await ok(call("DELETE", `${BASE}/${b.uid}`));
    await ok(call("DELETE", `/iam/v2beta1/groups/${g.uid}`));
  });
});

describe("batch create", () => {
  const batch = (body: object) => call("POST", `${BASE}:batchCreate`, body);
  const sub = (parent: string, identityUid: string, roleUid = "") => ({ parent, roleBinding: { identityUid, roleUid } });

  test("creates every binding in request order; role_uid is the default for sub-requests", async () => {
    const g = await createGroup(srv.url, org.uid, "batch target");
    const child = await createGroup(srv.url, g.uid, "batch child");
    const res = await ok(
      batch({
        parent: g.uid,
        roleUid: viewer.uid,
        requests: [sub(g.uid, idOrg.uid), sub(child.uid, idTeam.uid, viewer.uid), sub(g.uid, idStatic.uid)],
      }),
    );
    const got = res.roleBindings as Json[];
    assert.deepEqual(
      got.map((b) => [b.group.uid, b.identity.uid, b.role.name]),
      [
        [g.uid, idOrg.uid, "viewer"],
        [child.uid, idTeam.uid, "viewer"],
        [g.uid, idStatic.uid, "viewer"],
      ],
    );
    assert.ok(got.every((b) => b.uid.startsWith(`${b.group.uid}/`) && b.roleUid === viewer.uid && !("updateTime" in b)));
    assert.deepEqual(await groupBindings(g.uid), [got[0].uid, got[2].uid].sort());
    const noDefault = await ok(batch({ parent: g.uid, requests: [sub(g.uid, idOrg.uid, roleOrg.uid)] }));
    assert.equal(noDefault.roleBindings[0].role.uid, roleOrg.uid);
  });

  test("one bad reference fails the whole batch and creates nothing", async () => {
    const g = await createGroup(srv.url, org.uid, "atomic target");
    const ghost = `${org.uid}/0123456789abcdef`;
    assertNotFound(
      await batch({ parent: g.uid, roleUid: viewer.uid, requests: [sub(g.uid, idOrg.uid), sub(g.uid, ghost), sub(g.uid, idTeam.uid)] }),
      "identity",
      ghost,
    );
    assertNotFound(
      await batch({ parent: g.uid, requests: [sub(g.uid, idOrg.uid, viewer.uid), sub(g.uid, idOrg.uid, roleOther.uid)] }),
      "role",
      roleOther.uid,
    );
    assert.deepEqual(await groupBindings(g.uid), []);
  });

  test("request-level rules are INVALID_ARGUMENT naming the sub-request field, and nothing is created", async () => {
    const g = await createGroup(srv.url, org.uid, "batch rules");
    const many = Array.from({ length: 26 }, () => sub(g.uid, idOrg.uid, viewer.uid));
    assertViolations(await batch({ parent: g.uid, requests: [] }), ["requests"]);
    assertViolations(await batch({ parent: g.uid, requests: many }), ["requests"]);
    assert.equal((await batch({ parent: g.uid, requests: many.slice(0, 25) })).status, 200, "25 is allowed");
    const g2 = await createGroup(srv.url, org.uid, "batch rules two");
    assertViolations(
      await batch({ parent: g2.uid, roleUid: viewer.uid, requests: [sub(g2.uid, idOrg.uid), sub(g2.uid, idTeam.uid, roleOrg.uid)] }),
      ["requests[1].role_binding.role_uid"],
    );
    assertViolations(await batch({ parent: g2.uid, requests: [sub(org.uid, idOrg.uid, viewer.uid)] }), ["requests[0].parent"]);
    assertViolations(await batch({ parent: g2.uid, requests: [sub(other.uid, idOrg.uid, viewer.uid)] }), ["requests[0].parent"]);
    assertViolations(
      await batch({ parent: g2.uid, requests: [sub(g2.uid, "", viewer.uid), sub("x", idOrg.uid, viewer.uid), sub(g2.uid, idOrg.uid)] }),
      ["requests[0].role_binding.identity_uid", "requests[1].parent", "requests[2].role_binding.role_uid"],
    );
    assertViolations(await batch({ parent: "", requests: [sub(g2.uid, idOrg.uid, viewer.uid)] }), ["parent"]);
    assertViolations(await batch({ parent: g2.uid, roleUid: "bad", requests: [sub(g2.uid, idOrg.uid)] }), ["role_uid"]);
    assert.deepEqual(await groupBindings(g2.uid), []);
  });
});

/** Who each planned binding binds to what: two identities and two roles, every pair at most once per group. */
const PAIRS = ["a viewer", "b custom", "b custom", "a custom", "a viewer", "b viewer", "a custom"];
let listSubjects: Record<string, Json>;

describeListContract({
  resource: "role bindings",
  srv,
  path: BASE,
  seed: {
    create: async (parent, _name, i) => {
      // The plan's first item is in its organization: the identities and the custom role are made there.
      if (i === 0) {
        listSubjects = {
          a: await identity(parent, "list bot a", "la"),
          b: await identity(parent, "list bot b", "lb"),
          custom: await role(parent, "list role"),
          viewer,
        };
      }
      const [who, what] = PAIRS[i]!.split(" ");
      return ok(bind(parent, listSubjects[who!].uid, listSubjects[what!].uid));
    },
    advance: (ms) => (clock += ms),
  },
  orderFields: ["uid", "created_at"],
  unsortable: ["name"],
  filters: ({ items, team }) => {
    const [a, custom] = [items[0].identityUid, items[1].roleUid];
    return [
      [`identity=${a}`, (b) => b.identityUid === a],
      [`group=${team}`, (b) => b.group.uid === team],
      [`role=${custom}`, (b) => b.roleUid === custom],
      [`role=${viewer.uid}&identity=${a}`, (b) => b.roleUid === viewer.uid && b.identityUid === a],
    ];
  },
  invalid: [
    ["identity=x", ["identity"]],
    ["group=x&role=y", ["group", "role"]],
  ],
  check: (b) => assert.ok(b.identity.name && b.group.name && b.role.name, "every item is hydrated"),
});

describeOverGrpc(srv, RoleBindingsService, "create, batch create, get, list, delete", async (client) => {
  const g = await createGroup(srv.url, org.uid, "grpc bindings");
  const b: RoleBinding = await client.call("createRoleBinding", {
    parent: g.uid,
    roleBinding: { identityUid: idOrg.uid, roleUid: viewer.uid },
  });
  assert.ok(b.uid.startsWith(`${g.uid}/`));
  assert.equal(b.identity?.name, "org bot");
  assert.equal(b.group?.name, "grpc bindings");
  assert.equal(b.role?.name, "viewer");
  assert.equal(timestampMs(b.createTime!), clock);
  const batch = await client.call("batchCreateRoleBindings", {
    parent: g.uid,
    roleUid: roleOrg.uid,
    requests: [{ parent: g.uid, roleBinding: { identityUid: idTeam.uid } }],
  });
  assert.equal(batch.roleBindings[0].role.name, "org role");
  assert.equal((await client.call("getRoleBinding", { uid: b.uid })).identityUid, idOrg.uid);
  const listed = await client.call("listRoleBindings", { group: g.uid });
  assert.deepEqual(listed.roleBindings.map((x: RoleBinding) => x.uid).sort(), [b.uid, batch.roleBindings[0].uid].sort());
  assert.equal(listed.totalCount, 2n);
  await client.call("deleteRoleBinding", { uid: b.uid });
  await client.call("deleteRoleBinding", { uid: b.uid });
  assert.equal((await grpcError(client.call("getRoleBinding", { uid: b.uid }))).code, 5);
  const missing = await grpcError(
    client.call("createRoleBinding", { parent: g.uid, roleBinding: { identityUid: idOrg.uid, roleUid: roleOther.uid } }),
  );
  assert.equal(missing.code, 5);
});
