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
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { testTransport } from "../support/connect.js";
import { admits, ENGINES } from "../support/engines.js";
import { grpcClient } from "../support/grpc.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";

/** The address the server's tokens name (the admin-token command's and the server's alike). */
const BASE_URL = "http://runtime-smoke.invalid";
let dataDir: string;
let srv: ServeProcess;
let token: string;
before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "platform-runtime-"));
  chmodSync(dataDir, 0o700);
  srv = await startServeProcess({ PLATFORM_DATA_DIR: dataDir, PLATFORM_BASE_URL: BASE_URL });
  token = await srv.adminToken();
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

test("the command's own Node check agrees with engines", async () => {
  const { supportedNode } = await import("../../bin/supported-node.js");
  for (const v of ["18.20.8", "20.19.0", "20.20.2", "21.7.3", "22.13.1", "22.14.0", "22.23.5", "23.11.1", "24.0.0", "24.22.3", "25.2.0"]) {
    assert.equal(supportedNode(v), admits(ENGINES, v), v);
  }
});

test("on a Node that engines does not admit, the command says so in one line and exits 2", async (t) => {
  // Debian 12's /usr/bin/node is 20.x; where it is absent or supported there is nothing to try.
  const old = spawnSync("/usr/bin/node", ["--version"], { encoding: "utf8" });
  const version = old.stdout?.trim().replace(/^v/, "");
  if (old.status !== 0 || !version || admits(ENGINES, version)) return t.skip("no unsupported node at /usr/bin/node");
  const run = spawnSync("/usr/bin/node", [fileURLToPath(new URL("../../bin/platform-api.js", import.meta.url)), "--version"], {
    encoding: "utf8",
  });
  assert.equal(run.status, 2);
  assert.equal(run.stdout, "");
  assert.equal(
    run.stderr,
    `platform-api: Node.js ${version} is not supported; run it on Node.js 24 LTS, or 22.14 or later (README: Prerequisites)\n`,
  );
});
