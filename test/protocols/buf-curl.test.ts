import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { runChild } from "../support/child-process.js";
import { defaultToken, startTestServer, type TestServer } from "../support/server.js";

const BUF = fileURLToPath(new URL("../../node_modules/.bin/buf", import.meta.url));
const GROUPS = "platformapi.iam.v2beta1.GroupsService";

let srv: TestServer;
before(async () => {
  srv = await startTestServer();
});
after(async () => {
  await srv.close();
});

interface BufResult {
  /** buf's exit code: 0 on success, the gRPC code shifted left by 3 when the RPC fails. */
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs `buf curl <args>` from the repository root, where buf.yaml makes `--schema .` the contract's own module (offline; no BSR access needed). */
async function bufCurl(...args: string[]): Promise<BufResult> {
  // The administrator's token for the target server (the URL is the last argument).
  const token = defaultToken(args[args.length - 1]!.split("/").slice(0, 3).join("/"));
  const auth = token ? ["-H", `Authorization: Bearer ${token}`] : [];
  const { code, stdout, stderr } = await runChild([BUF, "curl", ...auth, ...args], { env: process.env, timeoutMs: 60_000 });
  return { exitCode: code ?? -1, stdout, stderr };
}

function lines(text: string): string[] {
  return text.split("\n").filter((l) => l !== "");
}

/** The JSON buf prints for a successful unary call. */
function created(res: BufResult, name: string): { uid: string; name: string } {
  assert.equal(res.exitCode, 0, res.stderr);
  const group = JSON.parse(res.stdout) as { uid: string; name: string };
  assert.match(group.uid, /^[0-9a-f]{40}$/);
  assert.equal(group.name, name);
  return group;
}

/** The error buf prints to stderr for a failed call, with its ErrorInfo details decoded. */
function printedError(res: BufResult) {
  assert.equal(res.stdout, "");
  const err = JSON.parse(res.stderr) as { code: string; message: string; details: { type: string; value: string }[] };
  const infos = err.details.filter((d) => d.type === "google.rpc.ErrorInfo").map((d) => fromBinary(ErrorInfoSchema, base64Decode(d.value)));
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  return { ...err, info: infos[0]! };
}

const grpc = ["--protocol", "grpc", "--http2-prior-knowledge"];

describe("buf curl, gRPC over h2c with server reflection (no --schema)", () => {
  test("--list-services lists the API, health and both reflection versions", async () => {
    const res = await bufCurl(...grpc, "--list-services", srv.url);
    assert.equal(res.exitCode, 0, res.stderr);
    const services = lines(res.stdout);
    for (const name of [
      GROUPS,
      "platformapi.iam.v1.GroupsService",
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
    ]) {
      assert.ok(services.includes(name), `${name} in ${services.join(", ")}`);
    }
  });

  test("--list-methods resolves every listed service, including v1alpha reflection", async () => {
    const res = await bufCurl(...grpc, "--list-methods", srv.url);
    assert.equal(res.exitCode, 0, res.stderr);
    const methods = lines(res.stdout);
    for (const name of [
      `${GROUPS}/CreateGroup`,
      `${GROUPS}/GetGroup`,
      `${GROUPS}/ListGroups`,
      `${GROUPS}/UpdateGroup`,
      `${GROUPS}/DeleteGroup`,
      "grpc.health.v1.Health/Check",
      "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    ]) {
      assert.ok(methods.includes(name), `${name} in ${methods.join(", ")}`);
    }
  });

  test("CreateGroup prints the new group as JSON; GetGroup reads it back", async () => {
    const group = created(
      await bufCurl(...grpc, "-d", JSON.stringify({ group: { name: "buf org" } }), `${srv.url}/${GROUPS}/CreateGroup`),
      "buf org",
    );
    const got = await bufCurl(...grpc, "-d", JSON.stringify({ uid: group.uid }), `${srv.url}/${GROUPS}/GetGroup`);
    assert.equal(got.exitCode, 0, got.stderr);
    assert.deepEqual(JSON.parse(got.stdout), group);
  });

  test("GetGroup of a missing uid prints a not_found error carrying an ErrorInfo", async () => {
    const res = await bufCurl(...grpc, "-d", JSON.stringify({ uid: "a".repeat(40) }), `${srv.url}/${GROUPS}/GetGroup`);
    assert.equal(res.exitCode, 5 << 3, "exit code is the gRPC code NOT_FOUND shifted by 3");
    const err = printedError(res);
    assert.equal(err.code, "not_found");
    assert.match(err.message, /does not exist/);
    assert.equal(err.info.reason, "NOT_FOUND");
    assert.equal(err.info.domain, "iam.platform.api");
  });

  test("--reflect-protocol grpc-v1alpha lists services and drives a call", async () => {
    const alpha = [...grpc, "--reflect-protocol", "grpc-v1alpha"];
    const listed = await bufCurl(...alpha, "--list-services", srv.url);
    assert.equal(listed.exitCode, 0, listed.stderr);
    assert.ok(lines(listed.stdout).includes(GROUPS));
    created(
      await bufCurl(...alpha, "-d", JSON.stringify({ group: { name: "alpha org" } }), `${srv.url}/${GROUPS}/CreateGroup`),
      "alpha org",
    );
  });
});

// buf curl needs HTTP/2 for reflection (a bidi stream), and h2c on this port
// is native gRPC only; so gRPC-Web and Connect take the schema from the repo.
describe("buf curl over HTTP/1.1 with --schema . (no reflection)", () => {
  for (const protocol of ["grpcweb", "connect"]) {
    test(`--protocol ${protocol} creates and reads a group`, async () => {
      const args = ["--schema", ".", "--protocol", protocol];
      const group = created(
        await bufCurl(...args, "-d", JSON.stringify({ group: { name: `${protocol} org` } }), `${srv.url}/${GROUPS}/CreateGroup`),
        `${protocol} org`,
      );
      const got = await bufCurl(...args, "-d", JSON.stringify({ uid: group.uid }), `${srv.url}/${GROUPS}/GetGroup`);
      assert.equal(got.exitCode, 0, got.stderr);
      assert.equal(JSON.parse(got.stdout).uid, group.uid);

      const missing = await bufCurl(...args, "-d", JSON.stringify({ uid: "b".repeat(40) }), `${srv.url}/${GROUPS}/GetGroup`);
      assert.equal(missing.exitCode, 5 << 3);
      const err = printedError(missing);
      assert.equal(err.code, "not_found");
      assert.equal(err.info.reason, "NOT_FOUND");
    });
  }
});
