/**
 * The API from Python: stubs that Debian's protoc and grpc_python_plugin
 * generate from proto/ are imported by Debian's python3-grpcio, which calls
 * GroupsService, decodes a rich error, checks health and lists the services by
 * reflection (test/python/client.py). Proves the proto packages shadow nothing
 * in Python (a top-level `platform` package did: it is a standard module).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { outputOf } from "../support/child-process.js";
import { startTestServer, type TestServer } from "../support/server.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const CLIENT = join(ROOT, "test/python/client.py");
const GROUPS = "platformapi.iam.v2beta1.GroupsService";
const START = Date.parse("2030-01-02T03:04:05.678Z");
const PACKAGES = "python3-grpcio protobuf-compiler protobuf-compiler-grpc";

/** The path of a command on PATH, or undefined. */
function which(command: string): string | undefined {
  try {
    return execFileSync("sh", ["-c", `command -v ${command}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The first interpreter that imports grpc: Debian's packages serve /usr/bin/python3, which a pyenv shim may hide. */
function findPython(): string | undefined {
  return ["/usr/bin/python3", "python3"].find((python) => {
    try {
      execFileSync(python, ["-c", "import grpc, google.protobuf"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  });
}

const PYTHON = findPython();
const PROTOC = which("protoc");
const PLUGIN = which("grpc_python_plugin");
const MISSING = [!PYTHON && "python3 with grpc", !PROTOC && "protoc", !PLUGIN && "grpc_python_plugin"].filter(Boolean);
const REASON = MISSING.length ? `${MISSING.join(", ")} not installed (apt-get install ${PACKAGES}; .ci/run does)` : "";

/** The .proto files under dir, relative to it. */
function protosUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".proto"))
    .map((f) => f.split("\\").join("/"))
    .sort();
}

const run = (file: string, args: string[], env: Record<string, string> = {}) =>
  outputOf([file, ...args], { env: { ...process.env, ...env }, timeoutMs: 60_000 });

/**
 * Generates the stubs as the README says: proto/ with the google/api and
 * google/rpc protos it imports, and health and reflection rooted at
 * third_party/grpc so they import as health.v1 and reflection.v1 (the
 * installed `grpc` package would hide grpc.health and grpc.reflection).
 */
async function generateStubs(out: string): Promise<void> {
  const plugin = [`--plugin=protoc-gen-grpc=${PLUGIN}`, `--python_out=${out}`, `--grpc_out=${out}`];
  const google = protosUnder("third_party").filter((f) => f.startsWith("google/"));
  await run(PROTOC!, ["-I", "proto", "-I", "third_party", ...plugin, ...protosUnder("proto"), ...google]);
  await run(PROTOC!, ["-I", "third_party/grpc", ...plugin, "health/v1/health.proto", "reflection/v1/reflection.proto"]);
}

interface Failure {
  code: string;
  details: string;
  status?: {
    code: number;
    message: string;
    details: {
      typeUrl: string;
      reason?: string;
      domain?: string;
      metadata?: Record<string, string>;
      fieldViolations?: { field: string; description: string }[];
    }[];
  };
}
interface PyGroup {
  uid: string;
  name: string;
  description: string;
  createTime: string;
  updateTime: string;
}
/** What test/python/client.py prints. */
interface ClientResult {
  stubs: string[];
  groups: {
    created: PyGroup;
    child: PyGroup;
    got: PyGroup;
    listed: { names: string[]; hasTotalCount: boolean; totalCount: number; nextPageToken: string };
    updated: PyGroup;
    deleted: string;
    getDeleted: Failure;
    invalidName: Failure;
    withoutToken: string | null;
  };
  health: { server: string; groups: string; unknown: string };
  reflection: { services: string[]; file: string; package: string; methods: string[] };
}

describe("Python grpcio client from stubs generated from proto/", { skip: process.env.CI ? false : REASON || false }, () => {
  let srv: TestServer;
  let stubs: string;
  let result: ClientResult;

  before(async () => {
    // CI installs the packages: a missing one there is a failure, not a skip.
    if (REASON) assert.fail(REASON);
    srv = await startTestServer({ now: () => START });
    stubs = mkdtempSync(join(tmpdir(), "platform-python-"));
    await generateStubs(stubs);
    const stdout = await run(PYTHON!, [CLIENT, stubs, `127.0.0.1:${srv.port}`], { PLATFORM_TOKEN: srv.adminToken });
    result = JSON.parse(stdout) as ClientResult;
  });
  after(async () => {
    if (stubs) rmSync(stubs, { recursive: true, force: true });
    await srv?.close();
  });

  test("every stub generated from proto/ imports under platformapi", () => {
    const modules = protosUnder("proto").flatMap((f) => {
      const base = f
        .replace(/\.proto$/, "")
        .split("/")
        .join(".");
      return [`${base}_pb2`, `${base}_pb2_grpc`];
    });
    assert.ok(modules.includes("platformapi.iam.v2beta1.groups_pb2_grpc"), "proto/ holds GroupsService");
    assert.deepEqual(result.stubs, modules.sort());
  });

  test("Create, Get, List, Update and Delete a group", () => {
    const { created, child, got, listed, updated, deleted } = result.groups;
    const time = new Date(START).toISOString();
    assert.match(created.uid, /^[0-9a-f]{40}$/);
    assert.deepEqual(created, { uid: created.uid, name: "python org", description: "from grpcio", createTime: time, updateTime: time });
    assert.match(child.uid, new RegExp(`^${created.uid}/[0-9a-f]{16}$`));
    assert.deepEqual(got, child);
    assert.deepEqual(listed, { names: ["another team", "py team"], hasTotalCount: true, totalCount: 2, nextPageToken: "" });
    assert.deepEqual(updated, { ...child, description: "updated from python" }, "the mask keeps the name");
    assert.equal(deleted, "google.protobuf.Empty");
  });

  test("a deleted group is NOT_FOUND with an ErrorInfo naming it", () => {
    const { getDeleted, child } = result.groups;
    assert.equal(getDeleted.code, "NOT_FOUND");
    assert.equal(getDeleted.details, `Not found: group ${child.uid} does not exist`);
    const [info] = getDeleted.status!.details;
    assert.equal(info?.typeUrl, "type.googleapis.com/google.rpc.ErrorInfo");
    assert.equal(info?.reason, "NOT_FOUND");
    assert.equal(info?.metadata?.uid, child.uid);
  });

  test("INVALID_ARGUMENT's grpc-status-details-bin decodes to google.rpc.Status with ErrorInfo and BadRequest", () => {
    const err = result.groups.invalidName;
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.match(err.details, /^Invalid argument: name: /);
    assert.equal(err.status?.code, 3);
    assert.equal(err.status.message, err.details);
    const byType = new Map(err.status.details.map((d) => [d.typeUrl, d]));
    assert.deepEqual([...byType.keys()].sort(), ["type.googleapis.com/google.rpc.BadRequest", "type.googleapis.com/google.rpc.ErrorInfo"]);
    const info = byType.get("type.googleapis.com/google.rpc.ErrorInfo")!;
    assert.equal(info.reason, "INVALID_ARGUMENT");
    assert.equal(info.domain, "iam.platform.api");
    const bad = byType.get("type.googleapis.com/google.rpc.BadRequest")!;
    assert.deepEqual(
      bad.fieldViolations?.map((v) => v.field),
      ["name"],
    );
    assert.match(bad.fieldViolations[0]!.description, /\^\[a-z0-9 \._-\]/);
  });

  test("a call without the bearer token is UNAUTHENTICATED", () => {
    assert.equal(result.groups.withoutToken, "UNAUTHENTICATED");
  });

  test("grpc.health.v1 Health/Check serves the server and GroupsService, NOT_FOUND for others", () => {
    assert.deepEqual(result.health, { server: "SERVING", groups: "SERVING", unknown: "NOT_FOUND" });
  });

  test("grpc.reflection.v1 lists the services and describes GroupsService", () => {
    const { services, file, package: pkg, methods } = result.reflection;
    for (const name of [GROUPS, "platformapi.iam.v1.GroupsService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"]) {
      assert.ok(services.includes(name), `${name} in ${services.join(", ")}`);
    }
    assert.ok(
      services.every((s) => s.startsWith("platformapi.") || s.startsWith("grpc.")),
      services.join(", "),
    );
    assert.equal(file, "platformapi/iam/v2beta1/groups.proto");
    assert.equal(pkg, "platformapi.iam.v2beta1");
    assert.deepEqual(methods, ["CreateGroup", "GetGroup", "ListGroups", "UpdateGroup", "DeleteGroup"]);
  });
});
