import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { PreconditionFailure } from "../../gen/google/rpc/error_details_pb.js";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { RolesService, type Role } from "../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError } from "../support/grpc-suite.js";
import { grpcStatus } from "../support/grpc.js";
import { describeListContract } from "../support/list-contract.js";
import { ok } from "../support/principals.js";
import { assertChildOf, assertDeletedOnce, groupForSuite, iso, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

const START = Date.parse("2031-05-06T07:08:09.123Z");
const ROOT_UID = /^[0-9a-f]{40}$/;

let clock = START;
const srv = serveForSuite({ now: () => clock });
const call = restOn(srv);
const createRole = (parent: string, body: object) => ok(call("POST", `/iam/v2beta1/roles/${parent}`, body));

async function builtIn(name: string) {
  const res = await call("GET", `/iam/v2beta1/roles?name=${name}&uidp.in_root=true`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.roles.length, 1, `one built-in role named ${name}`);
  return res.body.roles[0];
}

describe("built-in roles", () => {
  test("viewer, editor and owner exist at the root, readable by list and get", async () => {
    const res = await call("GET", "/iam/v2beta1/roles");
    assert.equal(res.status, 200);
    const names = (res.body.roles as { name: string }[]).map((r) => r.name);
    for (const name of ["viewer", "editor", "owner"]) assert.ok(names.includes(name), `${name} is listed`);
    const viewer = await builtIn("viewer");
    assert.match(viewer.uid, ROOT_UID);
    assert.ok(viewer.capabilities.includes("CAP_REPO_BLOBS_GET"));
    assert.ok(!viewer.capabilities.includes("CAP_REPO_CREATE"));
    const got = await call("GET", `/iam/v2beta1/roles/${viewer.uid}`);
    assert.deepEqual(got.body, viewer);
  });

  test("cannot be changed: FAILED_PRECONDITION BUILT_IN_ROLE, and nothing changes", async () => {
    const viewer = await builtIn("viewer");
    assertPrecondition(await call("PATCH", `/iam/v2beta1/roles/${viewer.uid}`, { description: "mine now" }), "BUILT_IN_ROLE", /viewer/);
    assertPrecondition(
      await call("PATCH", `/iam/v2beta1/roles/${viewer.uid}`, { capabilities: ["CAP_IAM_GROUPS_LIST"] }),
      "BUILT_IN_ROLE",
      /viewer/,
    );
    assert.deepEqual((await call("GET", `/iam/v2beta1/roles/${viewer.uid}`)).body, viewer);
  });

  test("cannot be deleted: FAILED_PRECONDITION BUILT_IN_ROLE", async () => {
    const owner = await builtIn("owner");
    assertPrecondition(await call("DELETE", `/iam/v2beta1/roles/${owner.uid}`), "BUILT_IN_ROLE", /owner/);
    assert.equal((await call("GET", `/iam/v2beta1/roles/${owner.uid}`)).status, 200);
  });
});

describe("create", () => {
  const org = groupForSuite(srv, "roles org");

  test("a custom role gets a child uid; capabilities come back sorted and de-duplicated", async () => {
    const role = await createRole(org.uid, {
      name: "Registry Puller (CI)",
      description: "pulls images",
      capabilities: ["CAP_REPO_LIST", "CAP_IAM_GROUPS_LIST", "CAP_REPO_LIST", "CAP_REPO_BLOBS_GET"],
      uid: "e".repeat(40),
      createTime: "2001-01-01T00:00:00Z",
    });
    assertChildOf(role.uid, org.uid);
    assert.equal(role.name, "Registry Puller (CI)");
    assert.equal(role.description, "pulls images");
    assert.deepEqual(role.capabilities, ["CAP_IAM_GROUPS_LIST", "CAP_REPO_BLOBS_GET", "CAP_REPO_LIST"]);
    assert.equal(role.createTime, iso(clock));
    assert.match(role.createTime, MILLIS_TIMESTAMP);
    assert.equal(role.updateTime, role.createTime);
    assert.deepEqual((await call("GET", `/iam/v2beta1/roles/${role.uid}`)).body, role);
  });

  test("capabilities given as enum numbers are accepted", async () => {
    const role = await createRole(org.uid, { name: "numbers", capabilities: [Capability.CAP_TAG_LIST] });
    assert.deepEqual(role.capabilities, ["CAP_TAG_LIST"]);
  });

  const CASES: [string, object, string[]][] = [
    ["no name", { capabilities: ["CAP_REPO_LIST"] }, ["name"]],
    ["a 64-character name", { name: "r".repeat(64), capabilities: ["CAP_REPO_LIST"] }, ["name"]],
    ["a name with a tab", { name: "a\tb", capabilities: ["CAP_REPO_LIST"] }, ["name"]],
    ["a 513-character description", { name: "r", description: "d".repeat(513), capabilities: ["CAP_REPO_LIST"] }, ["description"]],
    ["no capabilities", { name: "empty" }, ["capabilities"]],
    ["UNKNOWN", { name: "unknown", capabilities: ["UNKNOWN"] }, ["capabilities"]],
    ["an undefined capability number", { name: "undefined", capabilities: [9999] }, ["capabilities"]],
    ["internal-only CAP_INTERNAL", { name: "internal", capabilities: ["CAP_INTERNAL", "CAP_REPO_LIST"] }, ["capabilities"]],
    [
      "internal-only CAP_REPO_INTERNAL_ADMIN",
      { name: "internal", capabilities: ["CAP_INTERNAL", "CAP_REPO_INTERNAL_ADMIN"] },
      ["capabilities"],
    ],
    ["everything wrong", { description: "a\nb" }, ["name", "description", "capabilities"]],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      const err = assertViolations(await call("POST", `/iam/v2beta1/roles/${org.uid}`, body), fields);
      if (label.startsWith("internal-only")) assert.match(fieldViolations(err)[0]!.description, /internal only/);
    });
  }

  test("an unknown capability name is INVALID_ARGUMENT", async () => {
    assertRestError(
      await call("POST", `/iam/v2beta1/roles/${org.uid}`, { name: "x", capabilities: ["CAP_MAKE_COFFEE"] }),
      400,
      3,
      "INVALID_ARGUMENT",
    );
  });

  test("a malformed parent is INVALID_ARGUMENT on parent; a missing group is NOT_FOUND", async () => {
    assertViolations(await call("POST", "/iam/v2beta1/roles/xyz", { name: "x", capabilities: ["CAP_REPO_LIST"] }), ["parent"]);
    assertRestError(
      await call("POST", `/iam/v2beta1/roles/${"a".repeat(40)}`, { name: "x", capabilities: ["CAP_REPO_LIST"] }),
      404,
      5,
      "NOT_FOUND",
    );
  });
});

describe("get, update, delete", () => {
  const org = groupForSuite(srv, "role edits");

  test("a missing role is NOT_FOUND; a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `/iam/v2beta1/roles/${org.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertRestError(await call("GET", `/iam/v2beta1/roles/${"c".repeat(40)}`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", "/iam/v2beta1/roles/NOPE"), ["uid"]);
  });

  test("without a mask exactly the fields in the body change; updateTime moves", async () => {
    const role = await createRole(org.uid, { name: "editable", description: "a", capabilities: ["CAP_REPO_LIST"] });
    clock += 1000;
    const res = await call("PATCH", `/iam/v2beta1/roles/${role.uid}`, { capabilities: ["CAP_TAG_LIST", "CAP_REPO_LIST", "CAP_TAG_LIST"] });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body, { ...role, capabilities: ["CAP_REPO_LIST", "CAP_TAG_LIST"], updateTime: iso(clock) });
    const renamed = await call("PATCH", `/iam/v2beta1/roles/${role.uid}`, { name: "Edited Role", description: "" });
    assert.equal(renamed.body.name, "Edited Role");
    assert.equal(renamed.body.description, "");
    assert.deepEqual(renamed.body.capabilities, ["CAP_REPO_LIST", "CAP_TAG_LIST"]);
  });

  test("updateMask names the only fields that change", async () => {
    const role = await createRole(org.uid, { name: "masked", description: "a", capabilities: ["CAP_REPO_LIST"] });
    const res = await call("PATCH", `/iam/v2beta1/roles/${role.uid}?updateMask=description`, {
      name: "ignored",
      description: "b",
      capabilities: [],
    });
    assert.equal(res.body.name, "masked");
    assert.equal(res.body.description, "b");
    assert.deepEqual(res.body.capabilities, ["CAP_REPO_LIST"]);
  });

  test("invalid new values and bad mask paths are INVALID_ARGUMENT and change nothing", async () => {
    const role = await createRole(org.uid, { name: "guarded", capabilities: ["CAP_REPO_LIST"] });
    assertViolations(await call("PATCH", `/iam/v2beta1/roles/${role.uid}`, { capabilities: [] }), ["capabilities"]);
    assertViolations(await call("PATCH", `/iam/v2beta1/roles/${role.uid}`, { capabilities: ["CAP_INTERNAL"] }), ["capabilities"]);
    assertViolations(await call("PATCH", `/iam/v2beta1/roles/${role.uid}`, { name: "" }), ["name"]);
    for (const path of ["uid", "create_time", "updateTime", "bogus"]) {
      assertViolations(await call("PATCH", `/iam/v2beta1/roles/${role.uid}?updateMask=${path}`, { description: "x" }), ["update_mask"]);
    }
    assert.deepEqual((await call("GET", `/iam/v2beta1/roles/${role.uid}`)).body, role);
  });

  test("update of a missing role is NOT_FOUND", async () => {
    assertRestError(await call("PATCH", `/iam/v2beta1/roles/${org.uid}/0123456789abcdef`, { description: "x" }), 404, 5, "NOT_FOUND");
  });

  test("delete returns {}; a second delete is NOT_FOUND", async () => {
    const role = await createRole(org.uid, { name: "doomed", capabilities: ["CAP_REPO_LIST"] });
    await assertDeletedOnce(srv, `/iam/v2beta1/roles/${role.uid}`);
  });

  test("a bound role cannot be deleted (ROLE_IN_USE) until its binding goes", async () => {
    const role = await createRole(org.uid, { name: "in use", capabilities: ["CAP_REPO_LIST"] });
    const id = (
      await call("POST", `/iam/v2beta1/identities/${org.uid}`, {
        name: "holder",
        claimMatch: { issuer: "https://i.example", subject: "s" },
      })
    ).body;
    const binding = (await call("POST", `/iam/v2beta1/roleBindings/${org.uid}`, { identityUid: id.uid, roleUid: role.uid })).body;
    assert.ok(binding.uid, JSON.stringify(binding));
    assertPrecondition(await call("DELETE", `/iam/v2beta1/roles/${role.uid}`), "ROLE_IN_USE", /.+/);
    assert.equal((await call("GET", `/iam/v2beta1/roles/${role.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/roleBindings/${binding.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/roles/${role.uid}`)).status, 200);
  });

  test("a group holding a role cannot be deleted: RESOURCE_NOT_EMPTY naming roles", async () => {
    const group = await createGroup(srv.url, null, "busy with roles");
    const role = await createRole(group.uid, { name: "resident", capabilities: ["CAP_REPO_LIST"] });
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${group.uid}`), "RESOURCE_NOT_EMPTY", /roles/);
    assert.equal((await call("DELETE", `/iam/v2beta1/roles/${role.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/groups/${group.uid}`)).status, 200);
  });
});

// Custom roles named like the built-in viewer: a name filter without uidp sees both kinds.
describeListContract(
  {
    resource: "roles",
    srv,
    path: "/iam/v2beta1/roles",
    seed: {
      create: (parent, name) => createRole(parent, { name, capabilities: ["CAP_REPO_LIST"] }),
      names: ["viewer", "puller", "puller", "auditor", "viewer", "zeta", "auditor"],
      advance: (ms) => (clock += ms),
    },
    unsortable: ["capabilities"],
    lister: "viewer",
  },
  (listed) => {
    test("name is exact and sees built-in and custom roles", async () => {
      const named = await listed.uids("name=viewer");
      assert.deepEqual(
        named.filter((uid) => uid.includes("/")),
        listed.items
          .filter((r) => r.name === "viewer")
          .map((r) => r.uid)
          .sort(),
      );
      assert.ok(named.includes((await builtIn("viewer")).uid));
    });
  },
);

describeOverGrpc(srv, RolesService, "create, get, list, delete", async (client, org) => {
  const role: Role = await client.call("createRole", {
    parent: org,
    role: { name: "grpc role", capabilities: [Capability.CAP_TAG_LIST, Capability.CAP_REPO_LIST] },
  });
  assert.ok(role.uid.startsWith(`${org}/`));
  assert.deepEqual(role.capabilities, [Capability.CAP_REPO_LIST, Capability.CAP_TAG_LIST]);
  assert.equal(timestampMs(role.createTime!), clock);
  assert.deepEqual((await client.call("getRole", { uid: role.uid })).name, "grpc role");
  const listed = await client.call("listRoles", { uidp: { descendantsOf: org } });
  assert.deepEqual(
    listed.roles.map((r: Role) => r.uid),
    [role.uid],
  );
  assert.equal(listed.totalCount, 1n);
  await client.call("deleteRole", { uid: role.uid });
  assert.equal((await grpcError(client.call("getRole", { uid: role.uid }))).code, 5);
  const viewer = await builtIn("viewer");
  const refused = await grpcError(client.call("deleteRole", { uid: viewer.uid }));
  assert.equal(refused.code, 9);
  const failure = grpcStatus(refused).details.find((d) => d.$typeName === "google.rpc.PreconditionFailure") as PreconditionFailure;
  assert.equal(failure.violations[0]!.type, "BUILT_IN_ROLE");
});
