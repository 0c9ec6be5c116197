import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { GroupsService, type Group } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { connectError } from "../support/assertions.js";
import { testTransport, type TestTransport, type TransportKind } from "../support/connect.js";
import { startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
before(async () => {
  srv = await startTestServer();
});
after(async () => {
  await srv.close();
});

const TRANSPORTS: { kind: TransportKind; label: string }[] = [
  { kind: "connect-h1", label: "Connect over HTTP/1.1" },
  { kind: "grpc-web-h1", label: "gRPC-Web over HTTP/1.1" },
  { kind: "grpc-h2c", label: "gRPC over h2c (connect-node)" },
  { kind: "connect-h2c", label: "Connect over h2c" },
  { kind: "grpc-web-h2c", label: "gRPC-Web over h2c" },
  { kind: "connect-get-h2c", label: "Connect (useHttpGet) over h2c" },
];

for (const { kind, label } of TRANSPORTS) {
  describe(`GroupsService via ${label}`, () => {
    let t: TestTransport;
    let client: Client<typeof GroupsService>;
    let org: Group;
    let child: Group;

    before(() => {
      t = testTransport(kind, srv.url);
      client = createClient(GroupsService, t.transport);
    });
    after(() => t.close());

    test("CreateGroup makes a root and a child below it", async () => {
      org = await client.createGroup({ parent: "", group: { name: `${kind} org`, description: "root" } });
      assert.match(org.uid, /^[0-9a-f]{40}$/);
      assert.equal(org.name, `${kind} org`);
      assert.equal(org.description, "root");
      assert.equal(org.verified, false);
      assert.ok(org.createTime && org.updateTime, "timestamps are set");

      child = await client.createGroup({ parent: org.uid, group: { name: "child" } });
      assert.match(child.uid, new RegExp(`^${org.uid}/[0-9a-f]{16}$`));
    });

    test("GetGroup reads the group back", async () => {
      const got = await client.getGroup({ uid: child.uid });
      assert.equal(got.uid, child.uid);
      assert.equal(got.name, "child");
    });

    test("ListGroups with uidp.descendants_of returns the org's groups and totalCount", async () => {
      await client.createGroup({ parent: child.uid, group: { name: "grandchild" } });
      const res = await client.listGroups({ uidp: { descendantsOf: org.uid }, orderBy: "name" });
      assert.deepEqual(
        res.groups.map((g) => g.name),
        ["child", "grandchild"],
      );
      assert.equal(res.totalCount, 2n);
      assert.equal(res.nextPageToken, "");

      const page = await client.listGroups({ uidp: { descendantsOf: org.uid }, orderBy: "name", pageSize: 1 });
      assert.deepEqual(
        page.groups.map((g) => g.name),
        ["child"],
      );
      assert.notEqual(page.nextPageToken, "");
      const next = await client.listGroups({
        uidp: { descendantsOf: org.uid },
        orderBy: "name",
        pageSize: 1,
        pageToken: page.nextPageToken,
      });
      assert.deepEqual(
        next.groups.map((g) => g.name),
        ["grandchild"],
      );
    });

    test("UpdateGroup with update_mask changes only the masked field", async () => {
      const updated = await client.updateGroup({
        group: { uid: child.uid, name: "not applied", description: "changed" },
        updateMask: { paths: ["description"] },
      });
      assert.equal(updated.uid, child.uid);
      assert.equal(updated.name, "child");
      assert.equal(updated.description, "changed");
      assert.equal((await client.getGroup({ uid: child.uid })).description, "changed");
    });

    test("CreateGroup with an invalid name is InvalidArgument with ErrorInfo and BadRequest on name", async () => {
      const err = await connectError(client.createGroup({ parent: org.uid, group: { name: "NOT valid!" } }));
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, /^Invalid argument: name: /);
      const infos = err.findDetails(ErrorInfoSchema);
      assert.equal(infos.length, 1, "exactly one ErrorInfo");
      assert.equal(infos[0]!.reason, "INVALID_ARGUMENT");
      assert.equal(infos[0]!.domain, "iam.platform.api");
      const [bad] = err.findDetails(BadRequestSchema);
      assert.deepEqual(
        bad?.fieldViolations.map((v) => v.field),
        ["name"],
      );
    });

    test("DeleteGroup removes an empty group; GetGroup is then NotFound", async () => {
      const leaf = await client.createGroup({ parent: org.uid, group: { name: "leaf" } });
      await client.deleteGroup({ uid: leaf.uid });
      const err = await connectError(client.getGroup({ uid: leaf.uid }));
      assert.equal(err.code, Code.NotFound);
      const infos = err.findDetails(ErrorInfoSchema);
      assert.equal(infos.length, 1, "exactly one ErrorInfo");
      assert.equal(infos[0]!.reason, "NOT_FOUND");
    });
  });
}

describe("GroupsService via Connect GET (useHttpGet) over HTTP/1.1", () => {
  let t: TestTransport;
  let client: Client<typeof GroupsService>;
  before(() => {
    t = testTransport("connect-get-h1", srv.url);
    client = createClient(GroupsService, t.transport);
  });
  after(() => t.close());

  test("GetGroup and ListGroups (NO_SIDE_EFFECTS) are sent as GET and answered; CreateGroup stays POST", async () => {
    const org = await client.createGroup({ parent: "", group: { name: "get org" } });
    const got = await client.getGroup({ uid: org.uid });
    assert.equal(got.name, "get org");
    const listed = await client.listGroups({ name: "get org" });
    assert.deepEqual(
      listed.groups.map((g) => g.uid),
      [org.uid],
    );
    const err = await connectError(client.getGroup({ uid: "0".repeat(40) }));
    assert.equal(err.code, Code.NotFound);
    assert.equal(err.findDetails(ErrorInfoSchema).length, 1);
    const rpc = "/platformapi.iam.v2beta1.GroupsService/";
    assert.deepEqual(t.requests, [`POST ${rpc}CreateGroup`, `GET ${rpc}GetGroup`, `GET ${rpc}ListGroups`, `GET ${rpc}GetGroup`]);
  });
});
