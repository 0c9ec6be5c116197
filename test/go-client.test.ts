/**
 * The API from Go: every proto of ours names its Go import path (go_package)
 * and the packages other languages' generators want, so stubs build without
 * per-file M mappings. With Debian's protoc, protoc-gen-go, protoc-gen-go-grpc
 * and grpc-go, the test generates the stubs from proto/ exactly as
 * docs/go-client.md says, builds them and test/go/client.go offline (GOPATH
 * mode over /usr/share/gocode, GOPROXY=off), and runs the client against a
 * real server: Create and Get a group, decode a rich error, be refused without
 * a token.
 */
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { DescFile } from "@bufbuild/protobuf";
import { CONTRACT_FILES } from "../src/services/index.js";
import { startTestServer, type TestServer } from "./support/server.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** The module the Go stubs belong to: the prefix of every go_package (docs/go-client.md). */
const GO_STUBS_MODULE = "github.com/platform-api/platform-api/gen/go";
const START = Date.parse("2030-01-02T03:04:05.678Z");
const PACKAGES =
  "golang-go protobuf-compiler protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-protobuf-dev golang-google-genproto-dev golang-github-golang-protobuf-1-5-dev";

/** The path of a command on PATH, or undefined. */
function which(command: string): string | undefined {
  try {
    return execFileSync("sh", ["-c", `command -v ${command}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

const TOOLS = ["go", "protoc", "protoc-gen-go", "protoc-gen-go-grpc"];
/** Go sources the build needs, by a file only the right package installs (golang/protobuf 1.3 has no registry.go). */
const SOURCES: Record<string, string> = {
  "golang-google-grpc-dev": "google.golang.org/grpc/server.go",
  "golang-google-genproto-dev": "google.golang.org/genproto/googleapis/api/annotations/annotations.pb.go",
  "golang-github-golang-protobuf-1-5-dev": "github.com/golang/protobuf/proto/registry.go",
};
const MISSING = [
  ...TOOLS.filter((tool) => !which(tool)),
  ...Object.entries(SOURCES)
    .filter(([, file]) => !existsSync(join("/usr/share/gocode/src", file)))
    .map(([pkg]) => pkg),
];
const REASON = MISSING.length ? `${MISSING.join(", ")} not installed (apt-get install ${PACKAGES}; .ci/run does)` : "";

/** The .proto files under proto/, relative to it. */
function ourProtos(): string[] {
  return readdirSync(join(ROOT, "proto"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".proto"))
    .map((f) => f.split("\\").join("/"))
    .sort();
}

/** The contract's files and everything they import, as reflection serves them. */
function servedFiles(): Map<string, DescFile> {
  const files = new Map<string, DescFile>();
  const visit = (file: DescFile): void => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    file.dependencies.forEach(visit);
  };
  CONTRACT_FILES.forEach(visit);
  return files;
}

const pascal = (word: string): string => word.replace(/(^|_)([a-z0-9])/g, (_, __, c: string) => c.toUpperCase());

describe("language options of proto/", () => {
  const files = [...servedFiles().values()].filter((f) => f.proto.package.startsWith("platformapi."));

  test("reflection serves every proto of ours (the options below reach dynamic clients too)", () => {
    assert.deepEqual(files.map((f) => f.proto.name).sort(), ourProtos());
  });

  test("each file's options follow the package: Go import path and name, Java, C#, PHP, Ruby", () => {
    for (const file of files) {
      const parts = file.proto.package.split(".");
      const [, area, version] = parts;
      const stem = file.proto.name
        .split("/")
        .pop()!
        .replace(/\.proto$/, "");
      const o = file.proto.options!;
      assert.deepEqual(
        {
          goPackage: o.goPackage,
          javaPackage: o.javaPackage,
          javaMultipleFiles: o.javaMultipleFiles,
          javaOuterClassname: o.javaOuterClassname,
          csharpNamespace: o.csharpNamespace,
          phpNamespace: o.phpNamespace,
          rubyPackage: o.rubyPackage,
        },
        {
          goPackage: `${GO_STUBS_MODULE}/${parts.join("/")};${area}${version}`,
          javaPackage: `com.${file.proto.package}`,
          javaMultipleFiles: true,
          javaOuterClassname: `${pascal(stem)}Proto`,
          csharpNamespace: parts.map(pascal).join("."),
          phpNamespace: parts.map(pascal).join("\\"),
          rubyPackage: parts.map(pascal).join("::"),
        },
        file.proto.name,
      );
    }
  });

  test("objc_class_prefix is one per package and no two packages share one (auth.v1 links iam.v1 and iam.v2beta1)", () => {
    const byPackage = new Map<string, Set<string>>();
    for (const file of files) {
      const prefixes = byPackage.get(file.proto.package) ?? new Set();
      prefixes.add(file.proto.options!.objcClassPrefix);
      byPackage.set(file.proto.package, prefixes);
    }
    const prefixes = [...byPackage.values()].map((set) => [...set]);
    assert.ok(
      prefixes.every((p) => p.length === 1 && /^P[A-Z0-9]{3,}$/.test(p[0]!)),
      JSON.stringify(prefixes),
    );
    assert.equal(new Set(prefixes.flat()).size, byPackage.size);
    assert.equal(byPackage.get("platformapi.iam.v2beta1")?.values().next().value, "PIAMV2B1");
  });
});

function run(file: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: ROOT, timeout: 300_000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${file} ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

interface GoGroup {
  uid: string;
  name: string;
  description: string;
  createTime: string;
}
interface GoFailure {
  code: string;
  message: string;
  reason?: string;
  domain?: string;
  metadata?: Record<string, string>;
  violations?: string[];
}
/** What test/go/client.go prints. */
interface GoResult {
  stubPackage: string;
  created: GoGroup;
  child: GoGroup;
  got: GoGroup;
  getMissing: GoFailure;
  invalidName: GoFailure;
  withoutToken: GoFailure;
}

describe("grpc-go client from stubs generated from proto/ without M mappings", { skip: process.env.CI ? false : REASON || false }, () => {
  let srv: TestServer;
  let work: string;
  let result: GoResult;
  let goEnv: Record<string, string>;

  before(async () => {
    // CI installs the packages: a missing one there is a failure, not a skip.
    if (REASON) assert.fail(REASON);
    work = mkdtempSync(join(tmpdir(), "platform-go-"));
    // Offline: GOPATH mode over Debian's Go sources, no module proxy, a cache of our own.
    goEnv = {
      GO111MODULE: "off",
      GOPATH: `${work}:/usr/share/gocode`,
      GOPROXY: "off",
      GOFLAGS: "",
      GOENV: "off",
      GOCACHE: join(work, "cache"),
    };
    const src = join(work, "src");
    mkdirSync(src);
    const protos = ourProtos();
    await run("protoc", ["-I", "proto", "-I", "third_party", `--go_out=${src}`, `--go-grpc_out=${src}`, ...protos]);
    await run("go", ["build", `${GO_STUBS_MODULE}/...`], goEnv);
    await run("go", ["build", "-o", join(work, "client"), "./test/go/client.go"], goEnv);
    srv = await startTestServer({ now: () => START });
    const stdout = await run(join(work, "client"), [`127.0.0.1:${srv.port}`], { PLATFORM_TOKEN: srv.adminToken });
    result = JSON.parse(stdout) as GoResult;
  });
  after(async () => {
    if (work) rmSync(work, { recursive: true, force: true });
    await srv?.close();
  });

  test("protoc writes each file's stubs at its go_package path, and every stub package builds", async () => {
    const written = readdirSync(join(work, "src", GO_STUBS_MODULE), { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".go"))
      .sort();
    const expected = ourProtos().flatMap((f) => {
      const base = f.replace(/\.proto$/, "");
      const service = servedFiles().get(f)!.services.length > 0;
      return service ? [`${base}.pb.go`, `${base}_grpc.pb.go`] : [`${base}.pb.go`];
    });
    assert.deepEqual(written, expected.sort());
    assert.equal(result.stubPackage, `${GO_STUBS_MODULE}/platformapi/iam/v2beta1`);
    const listed = await run("go", ["list", `${GO_STUBS_MODULE}/...`], goEnv);
    assert.equal(listed.trim().split("\n").length, new Set(expected.map((f) => f.slice(0, f.lastIndexOf("/")))).size);
  });

  test("CreateGroup and GetGroup", () => {
    const { created, child, got } = result;
    const time = new Date(START).toISOString();
    assert.match(created.uid, /^[0-9a-f]{40}$/);
    assert.deepEqual(created, { uid: created.uid, name: "go org", description: "from grpc-go", createTime: time });
    assert.match(child.uid, new RegExp(`^${created.uid}/[0-9a-f]{16}$`));
    assert.deepEqual(got, child);
  });

  test("a missing group is NOT_FOUND with an ErrorInfo decoded from grpc-status-details-bin", () => {
    const missing = `${result.created.uid}/0123456789abcdef`;
    assert.deepEqual(result.getMissing, {
      code: "NotFound",
      message: `Not found: group ${missing} does not exist`,
      reason: "NOT_FOUND",
      domain: "iam.platform.api",
      metadata: { ...result.getMissing.metadata, uid: missing },
    });
  });

  test("an invalid name is INVALID_ARGUMENT with a BadRequest naming the field", () => {
    const err = result.invalidName;
    assert.equal(err.code, "InvalidArgument");
    assert.match(err.message, /^Invalid argument: name: /);
    assert.equal(err.reason, "INVALID_ARGUMENT");
    assert.equal(err.domain, "iam.platform.api");
    assert.deepEqual(err.violations, ["name"]);
  });

  test("a call without the bearer token is UNAUTHENTICATED", () => {
    assert.equal(result.withoutToken.code, "Unauthenticated");
  });
});
