import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { PreconditionFailure } from "../../gen/google/rpc/error_details_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { CatalogTier, ReposService, type Repo } from "../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { describeListContract } from "../support/list-contract.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import {
  assertChildOf,
  assertCreated,
  assertDeletedOnce,
  createStranger,
  groupForSuite,
  iso,
  restOn,
  serveForSuite,
} from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

const PATH = "/registry/v2beta1/repos";
const DIGEST = `sha256:${"c".repeat(64)}`;
const START = Date.parse("2031-05-06T07:08:09.123Z");

let clock = START;
const srv = serveForSuite({ now: () => clock });
const call = restOn(srv);
const createRepo = (parent: string, body: object, headers?: Record<string, string>) => ok(call("POST", `${PATH}/${parent}`, body, headers));

describe("create and get", () => {
  const org = groupForSuite(srv, "repo org");

  test("a repo gets a child uid of its group and every field, defaults emitted; Get returns the same", async () => {
    const repo = await createRepo(org.uid, {
      name: "nginx",
      description: "web server",
      uid: "e".repeat(40),
      createTime: "2001-01-01T00:00:00Z",
    });
    assertCreated(repo, org.uid, {
      name: "nginx",
      description: "web server",
      catalogTier: "CATALOG_TIER_UNSPECIFIED",
      bundles: [],
      aliases: [],
      activeTags: [],
      createTime: iso(clock),
      updateTime: iso(clock),
    });
    assert.match(repo.createTime, MILLIS_TIMESTAMP);
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), repo);
  });

  test("the administrator sets the operator-managed fields on create", async () => {
    const body = {
      name: "chainguard/python",
      catalogTier: "CATALOG_TIER_FIPS",
      bundles: ["base", "fips"],
      aliases: ["docker.io/library/python:3", "python:latest"],
      activeTags: ["latest", "3.12", "3.12-dev"],
    };
    const repo = await createRepo(org.uid, body);
    assert.deepEqual(repo, { ...body, uid: repo.uid, description: "", createTime: iso(clock), updateTime: iso(clock) });
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), repo);
  });

  test("names that are OCI repository paths of 1 to 256 characters are accepted", async () => {
    for (const name of ["a", "go/builder", "a__b", "a--b.c_d", "x1/y2/z3", `${"n".repeat(127)}/${"m".repeat(128)}`]) {
      assert.equal((await createRepo(org.uid, { name })).name, name);
    }
  });

  const CASES: [string, object, string[]][] = [
    ["no name", { description: "x" }, ["name"]],
    ["an upper-case name", { name: "Nginx" }, ["name"]],
    ["a name with a space", { name: "my repo" }, ["name"]],
    ["a leading separator", { name: "-nginx" }, ["name"]],
    ["a trailing slash", { name: "nginx/" }, ["name"]],
    ["an empty path segment", { name: "a//b" }, ["name"]],
    ["three underscores", { name: "a___b" }, ["name"]],
    ["a 257-character name", { name: "n".repeat(257) }, ["name"]],
    ["a 513-character description", { name: "ok", description: "d".repeat(513) }, ["description"]],
    ["an undefined catalog tier", { name: "ok", catalogTier: 99 }, ["catalog_tier"]],
    ["a bundle outside the allow-list", { name: "ok", bundles: ["base", "gold"] }, ["bundles"]],
    ["an alias without a tag", { name: "ok", aliases: ["nginx"] }, ["aliases"]],
    ["an alias with a space", { name: "ok", aliases: ["ng inx:latest"] }, ["aliases"]],
    ["an active tag that is no OCI tag", { name: "ok", activeTags: ["latest", "-dev"] }, ["active_tags"]],
    [
      "everything wrong",
      { name: "A", description: "a\tb", catalogTier: 7, bundles: ["x"], aliases: [":"], activeTags: ["t".repeat(129)] },
      ["name", "description", "catalog_tier", "bundles", "aliases", "active_tags"],
    ],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}, and nothing is created`, async () => {
      const before = (await ok(call("GET", `${PATH}?uidp.children_of=${org.uid}`))).totalCount;
      const err = assertViolations(await call("POST", `${PATH}/${org.uid}`, body), fields);
      if (fields[0] === "name")
        assert.match(
          fieldViolations(err)[0]!.description,
          label === "no name" ? /^is required: must be 1 to 256 characters matching / : /256/,
        );
      if (label.startsWith("a bundle")) assert.match(fieldViolations(err)[0]!.description, /"gold".*application, base/);
      assert.equal((await ok(call("GET", `${PATH}?uidp.children_of=${org.uid}`))).totalCount, before);
    });
  }

  test("a name taken in the group is ALREADY_EXISTS; the same name in another group is fine", async () => {
    const first = await createRepo(org.uid, { name: "redis" });
    const err = assertRestError(
      await call("POST", `${PATH}/${org.uid}`, { name: "redis", description: "second" }),
      409,
      6,
      "ALREADY_EXISTS",
    );
    assert.match(err.message, /repo/);
    assert.equal((await ok(call("GET", `${PATH}?uidp.children_of=${org.uid}&name=redis`))).totalCount, "1");
    const team = await createGroup(srv.url, org.uid, "repo team");
    const other = await createRepo(team.uid, { name: "redis" });
    assert.notEqual(other.uid, first.uid);
  });

  test("a malformed parent is INVALID_ARGUMENT on parent; a missing group NOT_FOUND", async () => {
    assertViolations(await call("POST", `${PATH}/not-a-uid`, { name: "x" }), ["parent"]);
    assertRestError(await call("POST", `${PATH}/${"a".repeat(40)}`, { name: "x" }), 404, 5, "NOT_FOUND");
  });

  test("Get of a missing repo is NOT_FOUND; a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `${PATH}/${org.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${PATH}/NOPE`), ["uid"]);
  });
});

describe("update and delete", () => {
  const org = groupForSuite(srv, "repo edits");

  test("without a mask exactly the fields in the body change; updateTime moves", async () => {
    const repo = await createRepo(org.uid, { name: "editable", description: "a", bundles: ["base"] });
    clock += 1000;
    const res = await ok(call("PATCH", `${PATH}/${repo.uid}`, { description: "b" }));
    assert.deepEqual(res, { ...repo, description: "b", updateTime: iso(clock) });
    const renamed = await ok(
      call("PATCH", `${PATH}/${repo.uid}`, { name: "edited", catalogTier: "CATALOG_TIER_AI", activeTags: ["latest"] }),
    );
    assert.deepEqual(renamed, { ...res, name: "edited", catalogTier: "CATALOG_TIER_AI", activeTags: ["latest"] });
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), renamed);
  });

  test("updateMask names the only fields that change; an empty value in the body clears a field", async () => {
    const repo = await createRepo(org.uid, { name: "masked", description: "a", bundles: ["base"], aliases: ["masked:1"] });
    const res = await ok(call("PATCH", `${PATH}/${repo.uid}?updateMask=description`, { name: "ignored", description: "b", bundles: [] }));
    assert.deepEqual(res, { ...repo, description: "b", updateTime: iso(clock) });
    const cleared = await ok(call("PATCH", `${PATH}/${repo.uid}`, { bundles: [], aliases: [] }));
    assert.deepEqual(cleared, { ...res, bundles: [], aliases: [] });
    const all = await ok(
      call("PATCH", `${PATH}/${repo.uid}?updateMask=name,bundles`, {
        name: "masked-two",
        bundles: ["ai", "ai-gpu"],
        description: "ignored",
      }),
    );
    assert.deepEqual(all, { ...cleared, name: "masked-two", bundles: ["ai", "ai-gpu"] });
  });

  test("invalid new values, bad mask paths and a taken name fail and change nothing", async () => {
    const repo = await createRepo(org.uid, { name: "guarded" });
    await createRepo(org.uid, { name: "taken" });
    assertViolations(await call("PATCH", `${PATH}/${repo.uid}`, { name: "" }), ["name"]);
    assertViolations(await call("PATCH", `${PATH}/${repo.uid}`, { name: "UPPER", bundles: ["nope"] }), ["name", "bundles"]);
    assertViolations(await call("PATCH", `${PATH}/${repo.uid}`, { aliases: ["no-tag"] }), ["aliases"]);
    for (const path of ["uid", "create_time", "updateTime", "readme", "bogus"]) {
      assertViolations(await call("PATCH", `${PATH}/${repo.uid}?updateMask=${path}`, { description: "x" }), ["update_mask"]);
    }
    assertRestError(await call("PATCH", `${PATH}/${repo.uid}`, { name: "taken" }), 409, 6, "ALREADY_EXISTS");
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), repo);
  });

  test("update of a missing repo is NOT_FOUND", async () => {
    assertRestError(await call("PATCH", `${PATH}/${org.uid}/0123456789abcdef`, { description: "x" }), 404, 5, "NOT_FOUND");
  });

  test("delete returns {}; a second delete is NOT_FOUND; the name is free again", async () => {
    const repo = await createRepo(org.uid, { name: "doomed" });
    await assertDeletedOnce(srv, `${PATH}/${repo.uid}`);
    await createRepo(org.uid, { name: "doomed" });
  });

  test("a repo with tags cannot be deleted: 400 FAILED_PRECONDITION RESOURCE_NOT_EMPTY naming tags, nothing deleted", async () => {
    const repo = await createRepo(org.uid, { name: "tagged" });
    const tag = await ok(call("POST", `/registry/v2beta1/tags/${repo.uid}`, { name: "latest", digest: DIGEST }));
    assertPrecondition(await call("DELETE", `${PATH}/${repo.uid}`), "RESOURCE_NOT_EMPTY", /tags/);
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), repo);
    assert.deepEqual(await ok(call("GET", `/registry/v2beta1/tags/${tag.uid}`)), tag);
    await ok(call("DELETE", `/registry/v2beta1/tags/${tag.uid}`));
    assert.deepEqual(await ok(call("DELETE", `${PATH}/${repo.uid}`)), {});
  });

  test("a group holding repos cannot be deleted: 400 FAILED_PRECONDITION RESOURCE_NOT_EMPTY naming repos, nothing deleted", async () => {
    const group = await createGroup(srv.url, null, "busy with repos");
    const repo = await createRepo(group.uid, { name: "resident" });
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${group.uid}`), "RESOURCE_NOT_EMPTY", /repos/);
    assert.equal((await ok(call("GET", `/iam/v2beta1/groups/${group.uid}`))).uid, group.uid);
    assert.deepEqual(await ok(call("GET", `${PATH}/${repo.uid}`)), repo);
    await ok(call("DELETE", `${PATH}/${repo.uid}`));
    assert.deepEqual(await ok(call("DELETE", `/iam/v2beta1/groups/${group.uid}`)), {});
  });
});

// Names are unique within a group; "go/builder" sorts its "/" among the letters.
describeListContract({
  resource: "repos",
  srv,
  path: PATH,
  seed: {
    create: (parent, name) => createRepo(parent, { name }),
    names: ["nginx", "python", "nginx", "go/builder", "python", "zeta", "zeta"],
    advance: (ms) => (clock += ms),
  },
  unsortable: ["description"],
  lister: "viewer",
});

describe("capabilities", () => {
  let org: { uid: string };
  let viewer: Caller;
  let editor: Caller;
  let owner: Caller;
  let stranger: Caller;
  let managed: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "repo caps");
    viewer = await createCaller(srv, org.uid, "repo viewer", await builtinRole(srv, "viewer"));
    editor = await createCaller(srv, org.uid, "repo editor", await builtinRole(srv, "editor"));
    owner = await createCaller(srv, org.uid, "repo owner", await builtinRole(srv, "owner"));
    stranger = await createStranger(srv, "repo caps");
    managed = await createRepo(org.uid, {
      name: "managed",
      catalogTier: "CATALOG_TIER_BASE",
      bundles: ["base"],
      aliases: ["managed:1"],
      activeTags: ["1"],
    });
  });

  test("a viewer lists and gets repos but cannot create, update or delete them (7)", async () => {
    const listed = await ok(call("GET", `${PATH}?uidp.descendants_of=${org.uid}`, undefined, as(viewer)));
    assert.ok(listed.repos.some((r: { uid: string }) => r.uid === managed.uid));
    assert.deepEqual(await ok(call("GET", `${PATH}/${managed.uid}`, undefined, as(viewer))), managed);
    assertRestError(await call("POST", `${PATH}/${org.uid}`, { name: "viewer-made" }, as(viewer)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("PATCH", `${PATH}/${managed.uid}`, { description: "x" }, as(viewer)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("DELETE", `${PATH}/${managed.uid}`, undefined, as(viewer)), 403, 7, "PERMISSION_DENIED");
  });

  test("an editor creates, updates and deletes repos, but cannot set operator-managed fields (7)", async () => {
    const repo = await createRepo(org.uid, { name: "editor-made" }, as(editor));
    assert.equal((await ok(call("PATCH", `${PATH}/${repo.uid}`, { description: "edited" }, as(editor)))).description, "edited");
    const denied = assertRestError(
      await call("POST", `${PATH}/${org.uid}`, { name: "tiered", catalogTier: "CATALOG_TIER_BASE" }, as(editor)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assert.match(denied.message, /catalog_tier.*CAP_REPO_INTERNAL_ADMIN/);
    assertRestError(
      await call("PATCH", `${PATH}/${repo.uid}`, { catalogTier: "CATALOG_TIER_AI" }, as(editor)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assert.equal((await ok(call("GET", `${PATH}/${repo.uid}`))).catalogTier, "CATALOG_TIER_UNSPECIFIED");
    assert.deepEqual(await ok(call("DELETE", `${PATH}/${repo.uid}`, undefined, as(editor))), {});
    assert.equal((await ok(call("GET", `${PATH}?uidp.children_of=${org.uid}&name=tiered`))).totalCount, "0");
  });

  test("an owner cannot set or change catalogTier, bundles, aliases or active tags (7), and nothing changes", async () => {
    for (const body of [{ catalogTier: "CATALOG_TIER_AI" }, { bundles: ["base"] }, { aliases: ["x:1"] }, { activeTags: ["latest"] }]) {
      assertRestError(await call("POST", `${PATH}/${org.uid}`, { name: "owner-tiered", ...body }, as(owner)), 403, 7, "PERMISSION_DENIED");
    }
    for (const body of [
      { catalogTier: "CATALOG_TIER_AI" },
      { bundles: ["base", "fips"] },
      { bundles: [] },
      { aliases: [] },
      { activeTags: ["2"] },
    ]) {
      assertRestError(await call("PATCH", `${PATH}/${managed.uid}`, body, as(owner)), 403, 7, "PERMISSION_DENIED");
    }
    assert.equal((await ok(call("GET", `${PATH}?uidp.children_of=${org.uid}&name=owner-tiered`))).totalCount, "0");
    assert.deepEqual(await ok(call("GET", `${PATH}/${managed.uid}`)), managed);
  });

  test("an owner may send the operator-managed fields back unchanged, or at their defaults on create", async () => {
    const { uid, createTime, updateTime, ...fields } = managed as Record<string, unknown>;
    assert.ok(uid && createTime && updateTime);
    const res = await ok(call("PATCH", `${PATH}/${managed.uid}`, { ...fields, description: "owner edit" }, as(owner)));
    assert.deepEqual(res, { ...managed, description: "owner edit", updateTime: iso(clock) });
    const plain = await createRepo(org.uid, { name: "owner-made", catalogTier: "CATALOG_TIER_UNSPECIFIED", bundles: [] }, as(owner));
    assert.equal(plain.catalogTier, "CATALOG_TIER_UNSPECIFIED");
    managed = res;
  });

  test("the administrator changes the operator-managed fields", async () => {
    const res = await ok(
      call("PATCH", `${PATH}/${managed.uid}`, {
        catalogTier: "CATALOG_TIER_COMMERCIAL",
        bundles: ["commercial"],
        aliases: [],
        activeTags: ["2", "latest"],
      }),
    );
    assert.deepEqual(res, {
      ...managed,
      catalogTier: "CATALOG_TIER_COMMERCIAL",
      bundles: ["commercial"],
      aliases: [],
      activeTags: ["2", "latest"],
    });
    managed = res;
  });

  test("a caller of another organization reaches none of the repos (7)", async () => {
    assertRestError(await call("GET", `${PATH}/${managed.uid}`, undefined, as(stranger)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("POST", `${PATH}/${org.uid}`, { name: "intruder" }, as(stranger)), 403, 7, "PERMISSION_DENIED");
  });
});

describeOverGrpc(srv, ReposService, "create, get, list, update, delete; errors carry their details", async (client, org) => {
  const groups = grpcClient(GroupsService, srv.port);
  try {
    const repo: Repo = await client.call("createRepo", {
      parent: org,
      repo: { name: "grpc/nginx", catalogTier: CatalogTier.APPLICATION, bundles: ["application"], activeTags: ["latest"] },
    });
    assertChildOf(repo.uid, org);
    assert.equal(repo.catalogTier, CatalogTier.APPLICATION);
    assert.equal(timestampMs(repo.createTime!), clock);
    assert.deepEqual((await client.call("getRepo", { uid: repo.uid })).activeTags, ["latest"]);
    const listed = await client.call("listRepos", { uidp: { descendantsOf: org }, name: "grpc/nginx" });
    assert.deepEqual(
      listed.repos.map((r: Repo) => r.uid),
      [repo.uid],
    );
    assert.equal(listed.totalCount, 1n);
    assert.equal((await client.call("listRepos", { uidp: { descendantsOf: org }, name: "nginx" })).totalCount, 0n);
    clock += 5;
    const updated: Repo = await client.call("updateRepo", {
      repo: { uid: repo.uid, description: "via grpc", catalogTier: CatalogTier.DEVTOOLS },
      updateMask: { paths: ["description", "catalog_tier"] },
    });
    assert.equal(updated.description, "via grpc");
    assert.equal(updated.catalogTier, CatalogTier.DEVTOOLS);
    assert.equal(timestampMs(updated.updateTime!), clock);

    const invalid = await grpcError(client.call("createRepo", { parent: org, repo: { name: "Bad Name", catalogTier: 42 } }));
    assert.equal(invalid.code, 3);
    assert.deepEqual(grpcViolations(invalid), ["name", "catalog_tier"]);

    const blocked = await grpcError(groups.call("deleteGroup", { uid: org }));
    assert.equal(blocked.code, 9);
    const failure = grpcStatus(blocked).details.find((d) => d.$typeName === "google.rpc.PreconditionFailure") as PreconditionFailure;
    assert.equal(failure.violations[0]!.type, "RESOURCE_NOT_EMPTY");
    assert.match(failure.violations[0]!.description, /repos/);

    await client.call("deleteRepo", { uid: repo.uid });
    assert.equal((await grpcError(client.call("getRepo", { uid: repo.uid }))).code, 5);
    await groups.call("deleteGroup", { uid: org });
  } finally {
    groups.close();
  }
});
