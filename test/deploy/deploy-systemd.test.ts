/**
 * deploy/platform-api.service, the systemd unit (issue 24): `systemd-analyze verify` accepts it, `systemd-analyze
 * security` rates its hardening OK, it stops with SIGTERM and waits longer than the drain and the grace period,
 * and its ExecStart, run with its environment (the install path pointed at this checkout, the state directory
 * at a temporary one, settings from an EnvironmentFile), serves and stops with exit 0 on its KillSignal.
 * Needs Debian's systemd package for systemd-analyze (.ci/run installs it); no systemd need be running.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ENVIRONMENT_VARIABLES } from "../../src/config.js";
import { runChild } from "../support/child-process.js";
import { admits, ENGINES } from "../support/engines.js";
import { freePort, startServeProcess } from "../support/serve-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const UNIT = join(ROOT, "deploy", "platform-api.service");
const INSTALLED_AT = "/opt/platform-api";
const dir = mkdtempSync(join(tmpdir(), "platform-systemd-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The [Service] section's settings, each key with every value it is given, in order. */
function serviceSettings(): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  let section = "";
  for (const raw of readFileSync(UNIT, "utf8").split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    if (line.startsWith("[")) section = line;
    else if (section === "[Service]") {
      const eq = line.indexOf("=");
      const key = line.slice(0, eq);
      settings.set(key, [...(settings.get(key) ?? []), line.slice(eq + 1)]);
    }
  }
  return settings;
}
const service = serviceSettings();
const one = (key: string) => {
  const values = service.get(key) ?? [];
  assert.equal(values.length, 1, `${key} is set once`);
  return values[0]!;
};

async function run(file: string, args: string[]): Promise<{ code: number | null; output: string }> {
  const { code, stdout, stderr } = await runChild([file, ...args], { cwd: dir, env: process.env, timeoutMs: 120_000 });
  return { code, output: stdout + stderr };
}

test("the unit's pointers lead somewhere: its Documentation file and the install section its header names exist", () => {
  const unit = readFileSync(UNIT, "utf8");
  const doc = /^Documentation=file:\/\/(\S+)$/m.exec(unit)?.[1] ?? "";
  assert.ok(doc.startsWith(`${INSTALLED_AT}/`), "Documentation names a file under the install path");
  const docFile = join(ROOT, doc.slice(INSTALLED_AT.length + 1));
  assert.ok(existsSync(docFile), `${docFile} exists`);
  const named = /Install \(([^,]+), "([^"]+)"\)/.exec(unit);
  assert.ok(named, "the header names where the install steps are");
  const headings = readFileSync(join(ROOT, named[1]!), "utf8")
    .split("\n")
    .filter((l) => l.startsWith("#"));
  assert.ok(
    headings.some((h) => h.replace(/^#+\s*/, "") === named[2]),
    `${named[1]} has a section "${named[2]}"`,
  );
});

test("systemd-analyze verify accepts the unit", async () => {
  const res = await run("systemd-analyze", ["verify", "--man=no", UNIT]);
  assert.deepEqual(res, { code: 0, output: "" });
});

test("systemd-analyze security rates the unit's exposure OK (below 2.0 of 10)", async () => {
  const res = await run("systemd-analyze", ["security", "--offline=true", "--no-pager", UNIT]);
  assert.equal(res.code, 0, res.output);
  const m = /Overall exposure level for platform-api\.service: (\d+\.\d) (\w+)/.exec(res.output);
  assert.ok(m, res.output);
  assert.ok(Number(m[1]) < 2, res.output);
  assert.equal(m[2], "OK");
});

test("a dedicated user, the data in its state directory, hardening, restarts, and a stop that outlasts the drain and grace", () => {
  assert.equal(one("User"), "platform-api");
  assert.equal(one("StateDirectory"), "platform-api");
  assert.equal(one("StateDirectoryMode"), "0700", "the server refuses a data directory others can read");
  assert.ok(service.get("Environment")!.includes("PLATFORM_DATA_DIR=/var/lib/platform-api"));
  assert.equal(one("EnvironmentFile"), "-/etc/platform-api/platform-api.env");
  for (const [key, value] of [
    ["NoNewPrivileges", "yes"],
    ["ProtectSystem", "strict"],
    ["ProtectHome", "yes"],
    ["PrivateTmp", "yes"],
    ["PrivateDevices", "yes"],
    ["CapabilityBoundingSet", ""],
    ["Restart", "on-failure"],
    ["KillSignal", "SIGTERM"],
  ])
    assert.equal(one(key!), value, key);
  assert.equal(service.has("MemoryDenyWriteExecute"), false, "V8 needs writable executable memory for its compiled code");
  const defaultMs = (name: string) => Number(ENVIRONMENT_VARIABLES.find((v) => v.name === name)!.default);
  const stopMs = Number(/^(\d+)s$/.exec(one("TimeoutStopSec"))![1]) * 1000;
  assert.ok(stopMs > defaultMs("PLATFORM_DRAIN_MS") + defaultMs("PLATFORM_SHUTDOWN_GRACE_MS"), `TimeoutStopSec ${stopMs} ms`);
});

test("its ExecStart, with its environment, serves, then stops on its KillSignal with exit 0", async (t) => {
  const [file, ...args] = one("ExecStart").split(" ");
  assert.equal(file, "/usr/bin/node");
  assert.equal(existsSync(file!), true, "node where the unit runs it");
  const argv = args.map((a) => a.replace(INSTALLED_AT, ROOT));
  assert.deepEqual(argv.slice(-1), ["serve"]);
  assert.ok(statSync(argv[0]!).isFile(), `${argv[0]} is this checkout's command`);

  const stateDir = join(dir, "state");
  const environment = Object.fromEntries(
    service.get("Environment")!.map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]),
  );
  environment.PLATFORM_DATA_DIR = environment.PLATFORM_DATA_DIR!.replace("/var/lib/platform-api", stateDir);
  // What an operator puts in the EnvironmentFile: the port, and the address the tokens name.
  const port = await freePort();
  const envFile = join(dir, "platform-api.env");
  writeFileSync(envFile, `PORT=${port}\nPLATFORM_BASE_URL=http://localhost:${port}\nPLATFORM_DRAIN_MS=0\n`);
  const fromFile = Object.fromEntries(
    readFileSync(envFile, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split("=", 2) as [string, string]),
  );
  // The unit runs the distribution's node. Where that one is older than engines admits (this machine's may be
  // Node 20, with Node 24 installed beside it for the suite), the same command line runs on the node running this.
  const version = execFileSync(file!, ["-p", "process.versions.node"], { encoding: "utf8" }).trim();
  const node = admits(ENGINES, version) ? file! : process.execPath;
  if (node !== file) t.diagnostic(`${file} is node ${version}, outside engines (${ENGINES}): ran ${process.execPath} instead`);
  // The unit's own command line and environment: none of the test defaults.
  const server = await startServeProcess({ ...environment, ...fromFile }, { bare: true, command: [node, ...argv] });
  t.after(() => server.stop());
  assert.equal(statSync(stateDir).mode & 0o777, 0o700);
  server.kill(one("KillSignal") as NodeJS.Signals);
  const { code } = await server.exited;
  assert.equal(code, 0, server.output());
  assert.match(server.output(), /"msg":"platform-api stopped"/);
});
