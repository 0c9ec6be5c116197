#!/usr/bin/env node
/**
 * What `npm test` says before its first test (run by `pretest`, after the build): how long the run takes, and
 * which tests will skip or fail on this machine for want of a tool. Each probe below mirrors how its tests decide
 * (named beside it); docs/development.md ("Running the tests") has the same table for readers. It only reads the
 * machine and always exits 0: it informs, the tests decide.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CI = Boolean(process.env.CI);

/** Whether a command is on PATH (as test/protocols/go-client.test.ts and test/protocols/python-grpc.test.ts look). */
function onPath(command) {
  return spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;
}

/** Whether running file with args works at all (as test/support/proxies.ts probes a proxy). */
function runs(file, args) {
  return !spawnSync(file, args, { stdio: "ignore" }).error;
}

/** Whether /usr/bin/python3 (Debian's, which test/protocols/python-grpc.test.ts prefers) or python3 imports grpc. */
function pythonGrpc() {
  return ["/usr/bin/python3", "python3"].some((python) => {
    try {
      execFileSync(python, ["-c", "import grpc, google.protobuf"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  });
}

/** Debian's Go sources the Go client test builds against (test/protocols/go-client.test.ts, SOURCES). */
const GO_SOURCES = [
  "google.golang.org/grpc/server.go",
  "google.golang.org/genproto/googleapis/api/annotations/annotations.pb.go",
  "github.com/golang/protobuf/proto/registry.go",
];

/**
 * Each tool the tests use when present: how it is found, the tests that need it, and whether they skip without it
 * ("skip"), skip except under CI ("skip unless CI"), or fail ("fail").
 */
const TOOLS = [
  {
    tool: "PostgreSQL server (apt-get install postgresql)",
    present: () =>
      existsSync("/usr/lib/postgresql") &&
      readdirSync("/usr/lib/postgresql").some((v) => existsSync(join("/usr/lib/postgresql", v, "bin", "initdb"))),
    tests: "the PostgreSQL store, backups, migrations and outages, the docs' PostgreSQL examples (test/support/pg-cluster.ts)",
    without: "skip",
  },
  {
    tool: "/usr/bin/chromium (apt-get install chromium)",
    present: () => existsSync("/usr/bin/chromium"),
    tests: "test/protocols/browser.test.ts",
    without: "skip",
  },
  {
    tool: "nginx, haproxy, caddy (apt-get install nginx haproxy caddy)",
    present: () => runs("/usr/sbin/nginx", ["-v"]) && runs("/usr/sbin/haproxy", ["-v"]) && runs("/usr/bin/caddy", ["version"]),
    tests: "test/deploy/deploy-{nginx,haproxy,caddy,watch-idle}.test.ts, per proxy (test/support/proxies.ts)",
    without: "skip unless CI",
  },
  {
    tool: "promtool (apt-get install prometheus)",
    present: () => spawnSync("promtool", ["--version"], { stdio: "ignore" }).status === 0,
    tests: "test/operations/metrics-promtool.test.ts, a check in test/operations/metrics-cluster.test.ts",
    without: "skip unless CI",
  },
  {
    tool: "go, protoc, protoc-gen-go, protoc-gen-go-grpc and Debian's Go sources (docs/go-client.md)",
    present: () =>
      ["go", "protoc", "protoc-gen-go", "protoc-gen-go-grpc"].every(onPath) &&
      GO_SOURCES.every((f) => existsSync(join("/usr/share/gocode/src", f))),
    tests: "test/protocols/go-client.test.ts",
    without: "skip unless CI",
  },
  {
    tool: "python3 with grpc, protoc, grpc_python_plugin (apt-get install python3-grpcio protobuf-compiler protobuf-compiler-grpc)",
    present: () => pythonGrpc() && onPath("protoc") && onPath("grpc_python_plugin"),
    tests: "test/protocols/python-grpc.test.ts, a check in test/protocols/tls.test.ts",
    without: "skip unless CI",
  },
  {
    tool: "patroni, etcd, haproxy, pgbouncer (apt-get install patroni etcd-server etcd-client haproxy pgbouncer)",
    present: () => onPath("patroni") && onPath("etcd") && runs("/usr/sbin/haproxy", ["-v"]) && existsSync("/usr/sbin/pgbouncer"),
    tests: "test/ha/failover.test.ts",
    without: "skip unless CI",
  },
  {
    tool: "strace",
    present: () => spawnSync("strace", ["-f", "-o", "/dev/null", "true"], { stdio: "ignore" }).status === 0,
    tests: "test/store/durability.test.ts (fsyncs per commit)",
    without: "skip",
  },
  {
    tool: "script (util-linux)",
    present: () => existsSync("/usr/bin/script"),
    tests: "a check in test/operations/lifecycle.test.ts",
    without: "skip",
  },
  {
    tool: "docker-registry, skopeo, umoci (apt-get install docker-registry skopeo umoci)",
    present: () => ["docker-registry", "skopeo", "umoci"].every(onPath),
    tests: "test/registry/registry-auth.test.ts, test/registry/registry-catalogue-e2e.test.ts",
    without: "fail",
  },
  {
    tool: "systemd-analyze (apt-get install systemd)",
    present: () => onPath("systemd-analyze"),
    tests: "test/deploy/deploy-systemd.test.ts",
    without: "fail",
  },
];

// npm test's files: test/*/*.test.ts.
const files = readdirSync(join(ROOT, "test"), { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .flatMap((d) => readdirSync(join(ROOT, "test", d.name)).filter((f) => f.endsWith(".test.ts"))).length;
const lines = [
  `npm test: ${files} test files, two at a time, each starting real servers: about 8 minutes on a 2-core machine, longer while`,
  "other work shares it. Results appear file by file as each finishes. What it needs: docs/development.md#running-the-tests",
];
const missing = TOOLS.filter((t) => !t.present());
const failing = missing.filter((t) => t.without === "fail" || (t.without === "skip unless CI" && CI));
const skipping = missing.filter((t) => !failing.includes(t));
if (skipping.length > 0) {
  lines.push("Not installed here, so these tests skip:");
  for (const t of skipping) lines.push(`  - ${t.tool}: ${t.tests}`);
}
if (failing.length > 0) {
  lines.push(`Not installed here, and these tests FAIL without it${CI ? " (CI is set)" : " (they do not skip)"}:`);
  for (const t of failing) lines.push(`  - ${t.tool}: ${t.tests}`);
}
if (missing.length === 0) lines.push("Every tool the tests use is installed: nothing skips for want of one.");
if (process.env.PLATFORM_TEST_CONTAINER !== "1")
  lines.push("test/deploy/deploy-container.test.ts skips unless PLATFORM_TEST_CONTAINER=1 (about 10 minutes).");
process.stdout.write(`${lines.join("\n")}\n\n`);
