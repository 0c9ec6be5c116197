import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Message } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ServiceError } from "@grpc/grpc-js";
import type { BadRequest, ErrorInfo, PreconditionFailure } from "../../gen/google/rpc/error_details_pb.js";
import { GroupsService as GroupsV1Service } from "../../gen/platformapi/iam/v1/groups_pb.js";
import { GroupsService, type Group, type ListGroupsResponse } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { grpcClient, grpcStatus, type GrpcTestClient } from "../support/grpc.js";
import { startTestServer, type TestServer } from "../support/server.js";

const ROOT_UID = /^[0-9a-f]{40}$/;
const START = Date.parse("2030-01-02T03:04:05.678Z");

// A clock the tests move by hand, so timestamps are exact values, not races.
let clock = START;
let srv: TestServer;
let groups: GrpcTestClient;
let groupsV1: GrpcTestClient;

before(async () => {
  srv = await startTestServer({ now: () => clock });
  groups = grpcClient(GroupsService, srv.port);
  groupsV1 = grpcClient(GroupsV1Service, srv.port);
});
after(async () => {
  groups.close();
  groupsV1.close();
  await srv.close();
});

/** The decoded google.rpc.Status of a failed call, checked to carry exactly one ErrorInfo. */
function statusOf(err: unknown, code: number) {
  const e = err as ServiceError;
  assert.equal(e.code, code, `grpc code (${e.details})`);
  const st = grpcStatus(e);
  assert.equal(st.code, code, "google.rpc.Status.code");
  const infos = st.details.filter((d) => d.$typeName === "google.rpc.ErrorInfo") as ErrorInfo[];
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  return {
    ...st,
    grpcMessage: e.details,
    info: infos[0]!,
    detail: <T extends Message>(typeName: T["$typeName"]) => st.details.filter((d) => d.$typeName === typeName) as T[],
  };
}

/** Runs a call that must fail with code and returns its decoded status. */
async function failure(call: Promise<unknown>, code: number) {
  let caught: unknown;
  await call.then(
    () => assert.fail(`expected gRPC code ${code}, the call succeeded`),
    (err: unknown) => void (caught = err),
  );
  return statusOf(caught, code);
}

async function create(parent: string, name: string, description = ""): Promise<Group> {
  return groups.call("createGroup", { parent, group: { name, description } });
}

async function list(req: object): Promise<ListGroupsResponse> {
  return groups.call("listGroups", req);
}

describe("GroupsService over native gRPC (grpc-js, h2c)", () => {
  let org: Group;
  let eng: Group;

  test("CreateGroup with an empty parent makes a root organization with a 40-hex uid", async () => {
    org = await create("", "grpc org", "the organization");
    assert.match(org.uid, ROOT_UID);
    assert.equal(org.name, "grpc org");
    assert.equal(org.description, "the organization");
    assert.equal(org.verified, false);
    assert.deepEqual(org.resourceLimits, {});
    assert.equal(timestampMs(org.createTime!), START);
    assert.equal(timestampMs(org.updateTime!), START);
  });

  test("CreateGroup under a parent makes a child whose uid is the parent's plus /16 hex", async () => {
    eng = await create(org.uid, "eng");
    assert.ok(eng.uid.startsWith(org.uid + "/"), eng.uid);
    assert.match(eng.uid.slice(org.uid.length + 1), /^[0-9a-f]{16}$/);
    const team = await create(eng.uid, "team one");
    assert.match(team.uid, new RegExp(`^${eng.uid}/[0-9a-f]{16}$`));
  });

  test("GetGroup returns the stored group", async () => {
    const got: Group = await groups.call("getGroup", { uid: eng.uid });
    assert.equal(got.uid, eng.uid);
    assert.equal(got.name, "eng");
    assert.equal(timestampMs(got.createTime!), START);
  });

  test("ListGroups filters by uidp.descendants_of, uidp.children_of and name", async () => {
    const other = await create("", "other org");
    await create(other.uid, "eng");

    const below = await list({ uidp: { descendantsOf: org.uid }, orderBy: "name" });
    assert.deepEqual(
      below.groups.map((g) => g.name),
      ["eng", "team one"],
    );
    assert.equal(below.totalCount, 2n);
    assert.equal(below.nextPageToken, "");

    const children = await list({ uidp: { childrenOf: org.uid } });
    assert.deepEqual(
      children.groups.map((g) => g.uid),
      [eng.uid],
    );

    const named = await list({ name: "eng" });
    assert.equal(named.groups.length, 2, "both orgs have an eng");
    assert.ok(named.groups.every((g) => g.name === "eng"));

    const namedInOrg = await list({ name: "eng", uidp: { descendantsOf: org.uid } });
    assert.deepEqual(
      namedInOrg.groups.map((g) => g.uid),
      [eng.uid],
    );

    const partial = await list({ name: "en" });
    assert.equal(partial.groups.length, 0, "name is an exact match");
    assert.equal(partial.totalCount, 0n);
  });

  test("ListGroups pages with nextPageToken, reports totalCount and skipped", async () => {
    const parent = await create("", "paged org");
    for (const name of ["p-c", "p-a", "p-e", "p-b", "p-d"]) await create(parent.uid, name);
    const base = { uidp: { childrenOf: parent.uid }, orderBy: "name", pageSize: 2 };

    const seen: string[] = [];
    let token = "";
    let pages = 0;
    do {
      const page = await list({ ...base, pageToken: token });
      pages++;
      assert.equal(typeof page.totalCount, "bigint");
      assert.equal(page.totalCount, 5n, "totalCount counts every match");
      assert.equal(page.skipped, 0);
      assert.ok(page.groups.length <= 2);
      seen.push(...page.groups.map((g) => g.name));
      token = page.nextPageToken;
    } while (token !== "" && pages < 10);
    assert.equal(pages, 3);
    assert.deepEqual(seen, ["p-a", "p-b", "p-c", "p-d", "p-e"]);

    const desc = await list({ ...base, orderBy: "name desc", pageSize: 0 });
    assert.deepEqual(
      desc.groups.map((g) => g.name),
      ["p-e", "p-d", "p-c", "p-b", "p-a"],
    );

    const skipped = await list({ ...base, skip: 3 });
    assert.deepEqual(
      skipped.groups.map((g) => g.name),
      ["p-d", "p-e"],
    );
    assert.equal(skipped.skipped, 3);
    assert.equal(skipped.totalCount, 5n);
    assert.equal(skipped.nextPageToken, "");
  });

  test("UpdateGroup without update_mask changes only the fields that are set", async () => {
    const g = await create(org.uid, "upd plain", "before");
    clock += 60_000;
    const updated: Group = await groups.call("updateGroup", { group: { uid: g.uid, description: "after" } });
    assert.equal(updated.name, "upd plain", "name was not sent and stays");
    assert.equal(updated.description, "after");
    assert.equal(timestampMs(updated.createTime!), timestampMs(g.createTime!), "createTime stays");
    assert.equal(timestampMs(updated.updateTime!), clock, "updateTime moves to now");
    assert.ok(timestampMs(updated.updateTime!) > timestampMs(g.updateTime!));

    const reread: Group = await groups.call("getGroup", { uid: g.uid });
    assert.equal(reread.description, "after");
    assert.equal(timestampMs(reread.updateTime!), clock);
  });

  test('UpdateGroup with update_mask "description" changes the description and leaves the name', async () => {
    const g = await create(org.uid, "upd masked", "before");
    clock += 60_000;
    const updated: Group = await groups.call("updateGroup", {
      group: { uid: g.uid, name: "ignored name", description: "masked" },
      updateMask: { paths: ["description"] },
    });
    assert.equal(updated.name, "upd masked");
    assert.equal(updated.description, "masked");
    assert.equal(timestampMs(updated.createTime!), timestampMs(g.createTime!));
    assert.equal(timestampMs(updated.updateTime!), clock);

    const renamed: Group = await groups.call("updateGroup", {
      group: { uid: g.uid, name: "renamed", description: "ignored" },
      updateMask: { paths: ["name"] },
    });
    assert.equal(renamed.name, "renamed");
    assert.equal(renamed.description, "masked");
  });

  for (const path of ["create_time", "uid", "no_such_field"]) {
    test(`UpdateGroup with update_mask "${path}" is INVALID_ARGUMENT on update_mask`, async () => {
      const g = await create(org.uid, `mask ${path.replace(/_/g, "-")}`, "kept");
      const st = await failure(groups.call("updateGroup", { group: { uid: g.uid, description: "x" }, updateMask: { paths: [path] } }), 3);
      assert.equal(st.info.reason, "INVALID_ARGUMENT");
      const [bad] = st.detail<BadRequest>("google.rpc.BadRequest");
      assert.deepEqual(
        bad?.fieldViolations.map((v) => v.field),
        ["update_mask"],
      );
      assert.match(bad!.fieldViolations[0]!.description, new RegExp(path));
      const unchanged: Group = await groups.call("getGroup", { uid: g.uid });
      assert.equal(unchanged.description, "kept");
    });
  }

  test("DeleteGroup removes an empty group; GetGroup then is NOT_FOUND", async () => {
    const g = await create(org.uid, "to delete");
    const res = await groups.call("deleteGroup", { uid: g.uid });
    assert.equal(res.$typeName, "google.protobuf.Empty");
    const st = await failure(groups.call("getGroup", { uid: g.uid }), 5);
    assert.equal(st.info.reason, "NOT_FOUND");
    assert.equal(st.info.metadata.uid, g.uid);
    // The uid has a "/": grpc-message must reach grpc-js users undamaged (no %2F).
    assert.equal(st.grpcMessage, `Not found: group ${g.uid} does not exist`);
    assert.equal(st.message, st.grpcMessage);
    const again = await failure(groups.call("deleteGroup", { uid: g.uid }), 5);
    assert.equal(again.info.reason, "NOT_FOUND");
  });

  test("DeleteGroup of a group with children is FAILED_PRECONDITION / RESOURCE_NOT_EMPTY", async () => {
    const st = await failure(groups.call("deleteGroup", { uid: eng.uid }), 9);
    assert.equal(st.info.reason, "FAILED_PRECONDITION");
    assert.match(st.message, /^Precondition failed: /);
    const [pf] = st.detail<PreconditionFailure>("google.rpc.PreconditionFailure");
    assert.ok(pf, "a PreconditionFailure detail");
    assert.deepEqual(
      pf.violations.map((v) => v.type),
      ["RESOURCE_NOT_EMPTY"],
    );
    assert.match(pf.violations[0]!.description, /group/);
    const still: Group = await groups.call("getGroup", { uid: eng.uid });
    assert.equal(still.name, "eng");
  });

  for (const [label, name] of [
    ["uppercase", "Bad Name"],
    ["missing", ""],
  ] as const) {
    test(`CreateGroup with a ${label} name is INVALID_ARGUMENT with a BadRequest on "name"`, async () => {
      const st = await failure(create(org.uid, name), 3);
      assert.equal(st.info.reason, "INVALID_ARGUMENT");
      assert.equal(st.info.domain, "iam.platform.api");
      assert.match(st.message, /^Invalid argument: name: /);
      const [bad] = st.detail<BadRequest>("google.rpc.BadRequest");
      assert.deepEqual(
        bad?.fieldViolations.map((v) => v.field),
        ["name"],
      );
      // A missing name says it is required and gives the pattern (the spec); a malformed one gives the pattern.
      assert.match(
        bad!.fieldViolations[0]!.description,
        label === "missing" ? /^is required: must match \^\[a-z0-9 \._-\]/ : /^must match \^\[a-z0-9 \._-\]/,
      );
    });
  }

  test("GetGroup of a well-formed uid that does not exist is NOT_FOUND", async () => {
    const missing = "f".repeat(40);
    const st = await failure(groups.call("getGroup", { uid: missing }), 5);
    assert.equal(st.info.reason, "NOT_FOUND");
    assert.equal(st.info.domain, "iam.platform.api");
    assert.equal(st.detail("google.rpc.BadRequest").length, 0);
  });

  test("GetGroup of a malformed uid is INVALID_ARGUMENT on uid", async () => {
    const st = await failure(groups.call("getGroup", { uid: "not-a-uid" }), 3);
    assert.equal(st.info.reason, "INVALID_ARGUMENT");
    const [bad] = st.detail<BadRequest>("google.rpc.BadRequest");
    assert.deepEqual(
      bad?.fieldViolations.map((v) => v.field),
      ["uid"],
    );
  });

  test("v1 ListGroups returns items with id in place of uid", async () => {
    const res = await groupsV1.call("listGroups", { uidp: { descendantsOf: org.uid } });
    assert.equal(res.$typeName, "platformapi.iam.v1.ListGroupsResponse");
    const byName = new Map<string, { id: string; name: string }>(res.items.map((g: { id: string; name: string }) => [g.name, g]));
    assert.equal(byName.get("eng")?.id, eng.uid);
    assert.ok(res.items.every((g: { id: string }) => g.id.startsWith(org.uid + "/")));

    const one = await groupsV1.call("listGroups", { id: org.uid });
    assert.deepEqual(
      one.items.map((g: { id: string; name: string }) => [g.id, g.name]),
      [[org.uid, "grpc org"]],
    );
  });
});
