import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ServiceError } from "@grpc/grpc-js";
import type { PreconditionFailure } from "../../gen/google/rpc/error_details_pb.js";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { RolesService, type Role } from "../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP, preconditionViolations } from "../support/assertions.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { assertPagedWalks } from "../support/paged-walk.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const START = Date.parse("2031-05-06T07:08:09.123Z");
const ROOT_UID = /^[0-9a-f]{40}$/;

let clock = START;
let srv: TestServer;
before(async () => {
  srv = await startTestServer({ now: () => clock });
});
after(async () => {
  await srv.close();
});

const call = (method: string, path: string, body?: unknown) => rest(srv.url, method, path, body);
const iso = (ms: number) => new Date(ms).toISOString();

async function createRole(parent: string, body: object) {
  const res = await call("POST", `/iam/v2beta1/roles/${parent}`, body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** Asserts INVALID_ARGUMENT whose violations name exactly these fields. */
function assertViolations(res: RestResult, fields: string[]) {
  const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
  assert.deepEqual(
    fieldViolations(err).map((v) => v.field),
    fields,
    JSON.stringify(err),
  );
  assert.ok(err.message.startsWith(`Invalid argument: ${fields[0]}: `), err.message);
  return err;
}

/** Asserts FAILED_PRECONDITION with one violation of the given type. */
function assertPrecondition(res: RestResult, type: string, description: RegExp) {
  const err = assertRestError(res, 400, 9, "FAILED_PRECONDITION");
  assert.match(err.message, /^Precondition failed: /);
  const violations = preconditionViolations(err);
  assert.equal(violations.length, 1);
  assert.equal(violations[0]!.type, type);
  assert.match(violations[0]!.description, description);
}

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
  let org: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "roles org");
  });

  test("a custom role gets a child uid; capabilities come back sorted and de-duplicated", async () => {
    const role = await createRole(org.uid, {
      name: "Registry Puller (CI)",
      description: "pulls images",
      capabilities: ["CAP_REPO_LIST", "CAP_IAM_GROUPS_LIST", "CAP_REPO_LIST", "CAP_REPO_BLOBS_GET"],
      uid: "e".repeat(40),
      createTime: "2001-01-01T00:00:00Z",
    });
    assert.match(role.uid, new RegExp(`^${org.uid}/[0-9a-f]{16}$`));
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
  let org: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "role edits");
  });

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
    const res = await call("DELETE", `/iam/v2beta1/roles/${role.uid}`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {});
    assertRestError(await call("GET", `/iam/v2beta1/roles/${role.uid}`), 404, 5, "NOT_FOUND");
    assertRestError(await call("DELETE", `/iam/v2beta1/roles/${role.uid}`), 404, 5, "NOT_FOUND");
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

describe("list", () => {
  let org: { uid: string };
  let team: { uid: string };
  let items: { uid: string; name: string; createTime: string; updateTime: string }[];
  before(async () => {
    org = await createGroup(srv.url, null, "role list org");
    team = await createGroup(srv.url, org.uid, "role list team");
    items = [];
    const plan: [string, string, number][] = [
      [org.uid, "viewer", 0],
      [team.uid, "puller", 1],
      [org.uid, "puller", 0],
      [team.uid, "auditor", 0],
      [org.uid, "zeta", 2],
      [team.uid, "viewer", 0],
    ];
    for (const [parent, name, step] of plan) {
      clock += step;
      items.push(await createRole(parent, { name, capabilities: ["CAP_REPO_LIST"] }));
    }
    clock += 10;
    items[1] = (await call("PATCH", `/iam/v2beta1/roles/${items[1]!.uid}`, { description: "touched" })).body;
  });

  const uids = async (query: string) => {
    const res = await call("GET", `/iam/v2beta1/roles?${query}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return (res.body.roles as { uid: string }[]).map((r) => r.uid).sort();
  };

  test("name is exact and sees built-in and custom roles; uidp narrows to custom roles below a group", async () => {
    const viewer = await builtIn("viewer");
    const named = await uids("name=viewer&page_size=200");
    assert.ok(named.includes(viewer.uid));
    assert.ok(named.includes(items[0]!.uid) && named.includes(items[5]!.uid));
    assert.deepEqual(await uids(`uidp.descendants_of=${org.uid}&name=viewer`), [items[0]!.uid, items[5]!.uid].sort());
    assert.deepEqual(await uids(`uidp.children_of=${team.uid}`), [items[1]!.uid, items[3]!.uid, items[5]!.uid].sort());
    assert.deepEqual(await uids(`uidp.descendants_of=${org.uid}&name=view`), []);
  });

  test("bad filters and orders are INVALID_ARGUMENT naming the parameter", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/roles?uidp.children_of=x"), ["uidp.children_of"]);
    assertViolations(await call("GET", "/iam/v2beta1/roles?order_by=capabilities"), ["order_by"]);
  });

  test("every order, every page size 1..N+1: the paged walk equals the full list", async () => {
    await assertPagedWalks(srv.url, "/iam/v2beta1/roles", "roles", `uidp.descendants_of=${org.uid}`, items, [
      "uid",
      "name",
      "created_at",
      "updated_at",
    ]);
  });
});

describe("RolesService over native gRPC", () => {
  test("create, get, list, delete", async () => {
    const client = grpcClient(RolesService, srv.port);
    try {
      const org = await createGroup(srv.url, null, "grpc roles");
      const role: Role = await client.call("createRole", {
        parent: org.uid,
        role: { name: "grpc role", capabilities: [Capability.CAP_TAG_LIST, Capability.CAP_REPO_LIST] },
      });
      assert.ok(role.uid.startsWith(`${org.uid}/`));
      assert.deepEqual(role.capabilities, [Capability.CAP_REPO_LIST, Capability.CAP_TAG_LIST]);
      assert.equal(timestampMs(role.createTime!), clock);
      assert.deepEqual((await client.call("getRole", { uid: role.uid })).name, "grpc role");
      const listed = await client.call("listRoles", { uidp: { descendantsOf: org.uid } });
      assert.deepEqual(
        listed.roles.map((r: Role) => r.uid),
        [role.uid],
      );
      assert.equal(listed.totalCount, 1n);
      await client.call("deleteRole", { uid: role.uid });
      const gone = await client.call("getRole", { uid: role.uid }).then(
        () => assert.fail("expected NOT_FOUND"),
        (e: ServiceError) => e,
      );
      assert.equal(gone.code, 5);
      const viewer = await builtIn("viewer");
      const refused = await client.call("deleteRole", { uid: viewer.uid }).then(
        () => assert.fail("expected FAILED_PRECONDITION"),
        (e: ServiceError) => e,
      );
      assert.equal(refused.code, 9);
      const failure = grpcStatus(refused).details.find((d) => d.$typeName === "google.rpc.PreconditionFailure") as PreconditionFailure;
      assert.equal(failure.violations[0]!.type, "BUILT_IN_ROLE");
    } finally {
      client.close();
    }
  });
});
