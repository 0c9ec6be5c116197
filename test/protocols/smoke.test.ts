import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { createGroup, startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
before(async () => {
  srv = await startTestServer();
});
after(async () => {
  await srv.close();
});

test("a group created over REST is read back over gRPC on the same port", async () => {
  const g = await createGroup(srv.url, null, "smoke org");
  const client = grpcClient(GroupsService, srv.port);
  try {
    const got = await client.call("getGroup", { uid: g.uid });
    assert.equal(got.name, "smoke org");
    await assert.rejects(client.call("createGroup", { group: { name: "X" } }), (err: never) => {
      const st = grpcStatus(err);
      assert.equal(st.code, 3);
      return true;
    });
  } finally {
    client.close();
  }
});
