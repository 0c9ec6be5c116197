/**
 * The API from Go: every proto of ours names its Go import path (go_package)
 * and the packages other languages' generators want, so stubs build without
 * per-file M mappings. With Debian's protoc, protoc-gen-go, protoc-gen-go-grpc
 * and grpc-go, the test generates the stubs from proto/ exactly as
 * docs/go-client.md says, builds them and test/go/client.go offline (GOPATH
 * mode over /usr/share/gocode, GOPROXY=off), and runs the client against a
 * real server: Create and Get a group, decode a rich error, be refused without
 * a token. The commands run in a copy of the checkout and leave it as git has
 * it, writing only in a temporary directory.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { DescFile } from "@bufbuild/protobuf";
import { CONTRACT_FILES } from "../../src/services/index.js";
import { outputOf } from "../support/child-process.js";
import { scratchCheckout, type ScratchCheckout } from "../support/scratch-checkout.js";
import { startTestServer, type TestServer } from "../support/server.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
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

const run = (file: string, args: string[], env: Record<string, string> = {}, cwd = ROOT) =>
  outputOf([file, ...args], { cwd, env: { ...process.env, ...env }, timeoutMs: 300_000 });

/**
 * docs/go-client.md's offline build and run, line for line: the stubs, Go's build cache and the client all go to
 * $work, a temporary directory, so nothing is left in the checkout (a `go build -o` there left an untracked
 * binary) or in the home directory (GOPATH and the build cache were under it).
 */
const GO_EXAMPLE = [
  "work=$(mktemp -d)   # the stubs, Go's build cache and the client: nothing lands in the checkout or in your home",
  "export GO111MODULE=off GOPROXY=off GOPATH=$work:/usr/share/gocode GOCACHE=$work/cache",
  "mkdir -p $work/src",
  "protoc -I proto -I third_party --go_out=$work/src --go-grpc_out=$work/src \\",
  "  $(cd proto && find platformapi -name '*.proto')",
  "go build -o $work/platform-go-client ./test/go/client.go",
  "$work/platform-go-client localhost:8080   # with the bearer token in PLATFORM_TOKEN",
];
/** Printed after the commands, before the directory they built in. */
const WORK_MARK = "@@work ";

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
  let scratch: ScratchCheckout;
  let work: string;
  let result: GoResult;
  let goEnv: Record<string, string>;

  before(async () => {
    // CI installs the packages: a missing one there is a failure, not a skip.
    if (REASON) assert.fail(REASON);
    srv = await startTestServer({ now: () => START });
    // docs/go-client.md's commands, from the root of a copy of the checkout, with the server's port.
    scratch = scratchCheckout(["proto", "third_party", "test/go"]);
    const script = [
      "set -euo pipefail",
      GO_EXAMPLE.join("\n").replaceAll("localhost:8080", `127.0.0.1:${srv.port}`),
      `printf '\\n${WORK_MARK}%s\\n' "$work"`,
    ].join("\n");
    const stdout = await run("bash", ["-c", script], { ...scratch.env, PLATFORM_TOKEN: srv.adminToken }, scratch.root);
    const at = stdout.lastIndexOf(`\n${WORK_MARK}`);
    work = stdout.slice(at + WORK_MARK.length + 1).trim();
    result = JSON.parse(stdout.slice(0, at)) as GoResult;
    // For the checks below: GOPATH mode over the stubs the commands wrote, no module proxy; every stub package builds.
    goEnv = {
      GO111MODULE: "off",
      GOPATH: `${work}:/usr/share/gocode`,
      GOPROXY: "off",
      GOFLAGS: "",
      GOENV: "off",
      GOCACHE: join(work, "cache"),
    };
    await run("go", ["build", `${GO_STUBS_MODULE}/...`], goEnv, scratch.root);
  });
  after(async () => {
    scratch?.remove();
    await srv?.close();
  });

  test("the commands leave the checkout as git has it and write nothing in the home directory or beside the checkout", () => {
    assert.ok(work.startsWith(scratch.env.TMPDIR!), `the build is in a temporary directory: ${work}`);
    assert.equal(scratch.status(), "", "git status --porcelain");
    assert.deepEqual(scratch.writtenOutside(), []);
  });

  test("docs/go-client.md gives the commands this test runs", () => {
    const doc = readFileSync(join(ROOT, "docs", "go-client.md"), "utf8");
    assert.ok(doc.includes(GO_EXAMPLE.join("\n")), `docs/go-client.md has, line for line:\n${GO_EXAMPLE.join("\n")}`);
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
