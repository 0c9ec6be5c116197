/**
 * The runtime: the node that runs this file is one package.json's engines
 * admits, and the compiled server, started by that node as an operator starts
 * it (`node bin/platform-api.js serve`), answers one call in each protocol of
 * its port: REST through fetch, gRPC through @grpc/grpc-js, Connect and
 * gRPC-Web through connect-node's transports. `npm test` runs it on the line
 * the suite runs on (Node 24); .ci/run runs it again on the oldest version
 * engines admits, with the same node_modules (better-sqlite3 is a Node-API
 * addon: one binary for every line).
 */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { GroupsService } from "../gen/platformapi/iam/v2beta1/groups_pb.js";
import { testTransport } from "./support/connect.js";
import { admits, ENGINES } from "./support/engines.js";
import { grpcClient } from "./support/grpc.js";
import { platformCli } from "./support/platform-cli.js";
import { startServeProcess, type ServeProcess } from "./support/serve-process.js";

/** The address the server's tokens name (the admin-token command's and the server's alike). */
const BASE_URL = "http://runtime-smoke.invalid";
let dataDir: string;
let srv: ServeProcess;
let token: string;
before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "platform-runtime-"));
  chmodSync(dataDir, 0o700);
  srv = await startServeProcess({ PLATFORM_DATA_DIR: dataDir, PLATFORM_BASE_URL: BASE_URL });
  const minted = await platformCli(dataDir, ["admin-token"], { PLATFORM_BASE_URL: BASE_URL });
  assert.equal(minted.code, 0, minted.stderr);
  token = minted.stdout.trim();
});
after(async () => {
  await srv?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

test(`this node (${process.version}) is one package.json's engines admits (${ENGINES})`, () => {
  assert.equal(admits(ENGINES, process.versions.node), true);
});

test("the compiled server answers REST, gRPC, Connect and gRPC-Web on its one port", async () => {
  const url = `http://127.0.0.1:${srv.port}`;
  const created = await fetch(`${url}/iam/v2beta1/groups`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "runtime smoke" }),
  });
  const group = (await created.json()) as { uid: string; name: string };
  assert.equal(created.status, 200, `${JSON.stringify(group)}\n${srv.output()}`);
  assert.equal(group.name, "runtime smoke");

  const grpc = grpcClient(GroupsService, srv.port, { token });
  try {
    assert.equal((await grpc.call("getGroup", { uid: group.uid })).name, "runtime smoke");
  } finally {
    grpc.close();
  }
  for (const kind of ["connect-h1", "grpc-web-h1"] as const) {
    const t = testTransport(kind, url, token);
    try {
      const got = await createClient(GroupsService, t.transport).getGroup({ uid: group.uid });
      assert.equal(got.name, "runtime smoke", kind);
    } finally {
      t.close();
    }
  }
});
