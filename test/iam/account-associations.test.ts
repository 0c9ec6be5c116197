import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { AccountAssociationsService, type AccountAssociation } from "../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import { assertRestError, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { describeListContract } from "../support/list-contract.js";
import { as, builtinRole, createCaller, ok } from "../support/principals.js";
import { assertDeletedOnce, assertSameDenial, createStranger, iso, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

const START = Date.parse("2031-05-06T07:08:09.123Z");
const PATH = "/iam/v2beta1/accountAssociations";
const SERVICE_IDENTITY = `${"c".repeat(40)}/0123456789abcdef`;

let clock = START;
const srv = serveForSuite({ now: () => clock });
const call = restOn(srv);
const amazon = { account: "123456789012" };
const google = { projectId: "acme-prod", projectNumber: "987654321" };
const azure = { tenantId: "72f988bf-86f1-41af-91ab-2d7cd011db47", clientIds: { ingester: "11111111-2222-3333-4444-555555555555" } };
const chainguard = { serviceBindings: { "registry-pusher": SERVICE_IDENTITY } };
const github = {
  appInstallations: {
    "123456": {
      installations: [
        { installationId: "7890", name: "acme" },
        { installationId: "7891", name: "" },
      ],
    },
  },
};

describe("create and get", () => {
  test("the association's uid is its group's; every provider round-trips; Get returns the same", async () => {
    const org = await createGroup(srv.url, null, "aa org");
    const a = await ok(
      call("POST", `${PATH}/${org.uid}`, {
        name: "Acme Clouds",
        description: "prod accounts",
        uid: "f".repeat(40),
        amazon,
        google,
        azure,
        chainguard,
        github,
      }),
    );
    assert.deepEqual(a, {
      uid: org.uid,
      name: "Acme Clouds",
      description: "prod accounts",
      amazon,
      google,
      azure,
      chainguard,
      github,
      createTime: iso(clock),
      updateTime: iso(clock),
    });
    assert.match(a.createTime, MILLIS_TIMESTAMP);
    assert.deepEqual(await ok(call("GET", `${PATH}/${org.uid}`)), a);
  });

  test("a name alone is enough, and a folder can have its own association", async () => {
    const org = await createGroup(srv.url, null, "aa org two");
    const folder = await createGroup(srv.url, org.uid, "aa folder");
    const a = await ok(call("POST", `${PATH}/${folder.uid}`, { name: "x" }));
    assert.equal(a.uid, folder.uid);
    for (const p of ["amazon", "google", "azure", "chainguard", "github"]) assert.equal(a[p], undefined, p);
  });

  test("one association per group: a second create is ALREADY_EXISTS and changes nothing", async () => {
    const org = await createGroup(srv.url, null, "aa twice");
    const first = await ok(call("POST", `${PATH}/${org.uid}`, { name: "first", amazon }));
    assertRestError(await call("POST", `${PATH}/${org.uid}`, { name: "second" }), 409, 6, "ALREADY_EXISTS");
    assert.deepEqual(await ok(call("GET", `${PATH}/${org.uid}`)), first);
  });

  test("a missing group is NOT_FOUND; a malformed parent INVALID_ARGUMENT on parent", async () => {
    assertRestError(await call("POST", `${PATH}/${"e".repeat(40)}`, { name: "x" }), 404, 5, "NOT_FOUND");
    assertViolations(await call("POST", `${PATH}/nope`, { name: "x" }), ["parent"]);
  });

  test("get of a group without an association is NOT_FOUND; of a malformed uid INVALID_ARGUMENT on uid", async () => {
    const org = await createGroup(srv.url, null, "aa none");
    assertRestError(await call("GET", `${PATH}/${org.uid}`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${PATH}/nope`), ["uid"]);
  });

  const CASES: [string, object, string[]][] = [
    ["no name", { amazon }, ["name"]],
    ["a 64-character name", { name: "a".repeat(64) }, ["name"]],
    ["a name with a control character", { name: "a\u0007b" }, ["name"]],
    ["a description with a line break", { name: "x", description: "a\nb" }, ["description"]],
    ["an 11-digit AWS account", { name: "x", amazon: { account: "12345678901" } }, ["amazon.account"]],
    ["an AWS account with letters", { name: "x", amazon: { account: "12345678901a" } }, ["amazon.account"]],
    ["an empty amazon", { name: "x", amazon: {} }, ["amazon.account"]],
    ["google without project id", { name: "x", google: { projectNumber: "1" } }, ["google.project_id"]],
    ["google without project number", { name: "x", google: { projectId: "p" } }, ["google.project_number"]],
    [
      "google with a non-numeric project number",
      { name: "x", google: { projectId: "p", projectNumber: "12a" } },
      ["google.project_number"],
    ],
    ["azure without tenant or client ids", { name: "x", azure: {} }, ["azure.tenant_id", "azure.client_ids"]],
    ["azure with an empty client id", { name: "x", azure: { tenantId: "t", clientIds: { ingester: "" } } }, ["azure.client_ids[ingester]"]],
    ["chainguard without bindings", { name: "x", chainguard: {} }, ["chainguard.service_bindings"]],
    [
      "a chainguard binding that is not a uid",
      { name: "x", chainguard: { serviceBindings: { pusher: "not-a-uid" } } },
      ["chainguard.service_bindings[pusher]"],
    ],
    [
      "a GitHub app id of 0",
      { name: "x", github: { appInstallations: { "0": { installations: [{ installationId: "1" }] } } } },
      ["github.app_installations[0]"],
    ],
    [
      "a negative GitHub app id",
      { name: "x", github: { appInstallations: { "-5": { installations: [{ installationId: "1" }] } } } },
      ["github.app_installations[-5]"],
    ],
    [
      "a GitHub app without installations",
      { name: "x", github: { appInstallations: { "42": {} } } },
      ["github.app_installations[42].installations"],
    ],
    [
      "a GitHub installation without id",
      { name: "x", github: { appInstallations: { "42": { installations: [{ name: "acme" }] } } } },
      ["github.app_installations[42].installations[0].installation_id"],
    ],
    [
      "everything wrong at once",
      { amazon: { account: "1" }, google: {}, chainguard: { serviceBindings: { a: "b" } } },
      ["name", "amazon.account", "google.project_id", "google.project_number", "chainguard.service_bindings[a]"],
    ],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      const org = await createGroup(srv.url, null, "aa invalid");
      assertViolations(await call("POST", `${PATH}/${org.uid}`, body), fields);
      assertRestError(await call("GET", `${PATH}/${org.uid}`), 404, 5, "NOT_FOUND");
    });
  }

  test("a GitHub app id that is not an integer is INVALID_ARGUMENT (JSON map keys of int64)", async () => {
    const org = await createGroup(srv.url, null, "aa bad key");
    assertRestError(
      await call("POST", `${PATH}/${org.uid}`, {
        name: "x",
        github: { appInstallations: { abc: { installations: [{ installationId: "1" }] } } },
      }),
      400,
      3,
      "INVALID_ARGUMENT",
    );
  });
});

describe("update", () => {
  let org: { uid: string };
  let base: Record<string, unknown>;
  before(async () => {
    org = await createGroup(srv.url, null, "aa update org");
    base = await ok(call("POST", `${PATH}/${org.uid}`, { name: "clouds", description: "d", amazon, google }));
  });

  test("without a mask exactly the body's fields change; updateTime moves, createTime stays", async () => {
    clock += 1000;
    const res = await ok(call("PATCH", `${PATH}/${org.uid}`, { azure, github }));
    assert.deepEqual(res, { ...base, azure, github, updateTime: iso(clock) });
    base = res;
  });

  test("a key sent empty clears that provider; a mask naming an absent provider clears it", async () => {
    const cleared = await ok(call("PATCH", `${PATH}/${org.uid}`, { github: null }));
    assert.equal(cleared.github, undefined);
    assert.deepEqual(cleared.azure, azure);
    const masked = await ok(
      call("PATCH", `${PATH}/${org.uid}?updateMask=azure,name`, { name: "renamed", amazon: { account: "000000000000" } }),
    );
    assert.equal(masked.azure, undefined);
    assert.equal(masked.name, "renamed");
    assert.deepEqual(masked.amazon, amazon, "amazon is not in the mask");
    base = masked;
  });

  test("updateMask names the only fields that change; a provider is replaced whole", async () => {
    const res = await ok(
      call("PATCH", `${PATH}/${org.uid}?updateMask=google`, {
        description: "ignored",
        google: { projectId: "acme-dev", projectNumber: "1" },
      }),
    );
    assert.deepEqual(res, { ...base, google: { projectId: "acme-dev", projectNumber: "1" }, updateTime: res.updateTime });
    base = res;
  });

  for (const path of ["uid", "create_time", "updateTime", "bogus", "amazon.account", "group"]) {
    test(`mask path ${path} is INVALID_ARGUMENT on update_mask and changes nothing`, async () => {
      assertViolations(await call("PATCH", `${PATH}/${org.uid}?updateMask=${path}`, { description: "x" }), ["update_mask"]);
      assert.deepEqual(await ok(call("GET", `${PATH}/${org.uid}`)), base);
    });
  }

  test("changes are validated; a failed update changes nothing", async () => {
    assertViolations(await call("PATCH", `${PATH}/${org.uid}`, { amazon: { account: "1" } }), ["amazon.account"]);
    assertViolations(await call("PATCH", `${PATH}/${org.uid}`, { name: "" }), ["name"]);
    assert.deepEqual(await ok(call("GET", `${PATH}/${org.uid}`)), base);
  });

  test("a group without an association is NOT_FOUND", async () => {
    const g = await createGroup(srv.url, null, "aa update missing");
    assertRestError(await call("PATCH", `${PATH}/${g.uid}`, { description: "x" }), 404, 5, "NOT_FOUND");
  });
});

describe("delete", () => {
  test("delete is idempotent: {} whether or not the association exists; the group then deletes", async () => {
    const org = await createGroup(srv.url, null, "aa delete org");
    await ok(call("POST", `${PATH}/${org.uid}`, { name: "doomed" }));
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${org.uid}`), "RESOURCE_NOT_EMPTY", /account associations/);
    await assertDeletedOnce(srv, `${PATH}/${org.uid}`, true);
    assert.deepEqual(await ok(call("DELETE", `/iam/v2beta1/groups/${org.uid}`)), {});
    // Gone with its group: still {}.
    assert.deepEqual(await ok(call("DELETE", `${PATH}/${org.uid}`)), {});
  });
});

describe("authorization", () => {
  test("a viewer reads but cannot create, update or delete; another org's owner gets the missing-target answer", async () => {
    const org = await createGroup(srv.url, null, "aa authz org");
    const folder = await createGroup(srv.url, org.uid, "aa authz folder");
    await ok(call("POST", `${PATH}/${org.uid}`, { name: "org clouds", amazon }));
    const reader = await createCaller(srv, org.uid, "aa reader", await builtinRole(srv, "viewer"));
    assert.equal((await ok(call("GET", `${PATH}/${org.uid}`, undefined, as(reader)))).uid, org.uid);
    assertRestError(await call("POST", `${PATH}/${folder.uid}`, { name: "x" }, as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("PATCH", `${PATH}/${org.uid}`, { name: "x" }, as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("DELETE", `${PATH}/${org.uid}`, undefined, as(reader)), 403, 7, "PERMISSION_DENIED");
    const stranger = await createStranger(srv, "aa");
    await assertSameDenial(srv, stranger, `${PATH}/${org.uid}`, `${PATH}/${folder.uid}`);
    assertRestError(await call("DELETE", `${PATH}/${org.uid}`, undefined, as(stranger)), 403, 7, "PERMISSION_DENIED");
    assert.equal((await ok(call("GET", `${PATH}/${org.uid}`))).name, "org clouds");
  });
});

// Each association is its group's: the plan makes a group for every one.
describeListContract({
  resource: "account associations",
  srv,
  path: PATH,
  seed: {
    create: async (parent, name) =>
      ok(call("POST", `${PATH}/${(await createGroup(srv.url, parent, `aa list ${name}`)).uid}`, { name, amazon })),
    advance: (ms) => (clock += ms),
  },
  orderFields: ["group", "name", "created_at", "updated_at"],
  defaultOrder: "group",
  unsortable: ["account"],
  lister: "viewer",
});

describeOverGrpc(srv, AccountAssociationsService, "create, get, list, update, delete; int64 GitHub ids round-trip", async (client, org) => {
  const created: AccountAssociation = await client.call("createAccountAssociation", {
    parent: org,
    accountAssociation: {
      name: "grpc clouds",
      github: { appInstallations: { "9007199254740993": { installations: [{ installationId: 9007199254740995n, name: "big" }] } } },
    },
  });
  assert.equal(created.uid, org);
  assert.equal(created.github?.appInstallations["9007199254740993"]?.installations[0]?.installationId, 9007199254740995n);
  const got: AccountAssociation = await client.call("getAccountAssociation", { uid: org });
  assert.equal(got.name, "grpc clouds");
  const rest = await ok(call("GET", `${PATH}/${org}`));
  assert.deepEqual(rest.github, {
    appInstallations: { "9007199254740993": { installations: [{ installationId: "9007199254740995", name: "big" }] } },
  });
  const listed = await client.call("listAccountAssociations", { uidp: { ids: [org] } });
  assert.deepEqual(
    listed.accountAssociations.map((a: AccountAssociation) => a.uid),
    [org],
  );
  assert.equal(listed.totalCount, 1n);
  const updated: AccountAssociation = await client.call("updateAccountAssociation", {
    accountAssociation: { uid: org, amazon: { account: "210987654321" } },
    updateMask: { paths: ["amazon", "github"] },
  });
  assert.equal(updated.amazon?.account, "210987654321");
  assert.equal(updated.github, undefined);
  const bad = await grpcError(client.call("updateAccountAssociation", { accountAssociation: { uid: org, amazon: { account: "x" } } }));
  assert.equal(bad.code, 3);
  assert.deepEqual(grpcViolations(bad), ["amazon.account"]);
  await client.call("deleteAccountAssociation", { uid: org });
  await client.call("deleteAccountAssociation", { uid: org });
  assert.equal((await grpcError(client.call("getAccountAssociation", { uid: org }))).code, 5);
});
