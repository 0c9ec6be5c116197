/**
 * Log lines are buffered and written once per event-loop turn (see
 * src/server/observe/logging.ts): none may be lost when the process stops.
 * `platform-api serve` runs as users run it, compiled, at the default level,
 * with its stdout redirected to a file.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { within } from "../support/assertions.js";
import { platformCli } from "../support/platform-cli.js";
import { cleanEnv, freePort } from "../support/serve-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BASE_URL = "http://logs-on-exit.invalid";
const dirs: string[] = [];
const children = new Set<ChildProcess>();
after(() => {
  for (const child of children) child.kill("SIGKILL");
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "platform-logs-exit-"));
  dirs.push(dir);
  return dir;
}

/** Runs node with args from the repository root, stdout appended to logFile; resolves with the exit and what it wrote on stderr. */
function run(args: string[], env: Record<string, string>, logFile: string) {
  const fd = openSync(logFile, "a");
  const child = spawn(process.execPath, args, { cwd: ROOT, env: cleanEnv(env), stdio: ["ignore", fd, "pipe"] });
  closeSync(fd);
  children.add(child);
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const exit = once(child, "close").then(([code, signal]) => {
    children.delete(child);
    return { code: code as number | null, signal: signal as NodeJS.Signals | null, stderr };
  });
  return { child, exit };
}

/** The parsed lines of a log file; each must be one JSON object. */
function logLines(file: string): { msg: string; reqId?: string; [key: string]: unknown }[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => {
      try {
        return JSON.parse(l) as { msg: string; reqId?: string };
      } catch {
        assert.fail(`not a JSON line: ${l}`);
      }
    });
}

test("SIGTERM while calls are answered: every call answered has its rpc line in the log file once the process has exited", async () => {
  const dataDir = tempDir();
  const logFile = join(tempDir(), "serve.log");
  const port = await freePort();
  // No LOG_LEVEL: the default, info.
  const env = {
    PLATFORM_DATA_DIR: dataDir,
    PORT: String(port),
    HOST: "127.0.0.1",
    PLATFORM_BASE_URL: BASE_URL,
    PLATFORM_AUTH_URL: BASE_URL,
    PLATFORM_SHUTDOWN_GRACE_MS: "2000",
  };
  const server = run(["bin/platform-api.js", "serve"], env, logFile);
  const base = `http://127.0.0.1:${port}`;
  await within(
    30_000,
    (async () => {
      while (
        !(await fetch(`${base}/readyz`).then(
          (r) => r.ok,
          () => false,
        ))
      ) {
        if (server.child.exitCode !== null) assert.fail(`serve exited: ${(await server.exit).stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    })(),
    "the server is ready",
  );
  const minted = await platformCli(dataDir, ["admin-token"], { PLATFORM_BASE_URL: BASE_URL, PLATFORM_AUTH_URL: BASE_URL });
  assert.equal(minted.code, 0, minted.stderr);
  const authorization = `Bearer ${minted.stdout.trim()}`;

  // 400 calls at once; SIGTERM as soon as 100 are answered, while the rest are still being answered.
  const answered: string[] = [];
  let stopped = false;
  const calls = Array.from({ length: 400 }, async (_, i) => {
    const reqId = `exit-${i}`;
    const res = await fetch(`${base}/iam/v2beta1/groups?page_size=5`, { headers: { authorization, "x-request-id": reqId } }).catch(
      () => null,
    );
    await res?.arrayBuffer().catch(() => null);
    // 503 is the load shedding of a closing server, before any RPC: no line. Anything else is an answered call.
    if (res && res.status !== 503) {
      assert.equal(res.status, 200);
      answered.push(reqId);
    }
    if (answered.length >= 100 && !stopped) {
      stopped = true;
      server.child.kill("SIGTERM");
    }
  });
  await within(30_000, Promise.all(calls), "every call settles");
  const exit = await within(30_000, server.exit, "serve exits on SIGTERM");
  assert.deepEqual([exit.code, exit.signal], [0, null], exit.stderr);
  assert.ok(answered.length >= 100, `${answered.length} calls answered`);

  const rpcLines = logLines(logFile).filter((l) => l.msg === "rpc");
  const logged = new Map<string, number>();
  for (const l of rpcLines) logged.set(l.reqId!, (logged.get(l.reqId!) ?? 0) + 1);
  const missing = answered.filter((id) => logged.get(id) !== 1);
  assert.deepEqual(missing, [], `of ${answered.length} answered calls, these have no (or more than one) rpc line`);
  for (const l of rpcLines.filter((l) => answered.includes(l.reqId!))) {
    assert.equal(l.rpc, "platformapi.iam.v2beta1.GroupsService/ListGroups");
    assert.equal(l.code, "ok");
  }
});

test("an uncaught exception in the turn that logged: the lines are in the file before the process dies", async () => {
  const dir = tempDir();
  const logFile = join(dir, "fatal.log");
  // The server's logging, as startServer sets it up for a non-terminal stdout; then a crash before the turn ends.
  const script = `
    import Fastify from "fastify";
    import { serverLogging } from "./src/server/observe/logging.ts";
    const logging = serverLogging("info");
    const app = Fastify({ logger: logging.options });
    for (let i = 0; i < 500; i++) {
      logging.rpc(app.log, { reqId: "fatal-" + i, principal: "", remoteAddress: "", rpc: "s/M", protocol: "rest", code: "ok", durationMs: 1 });
    }
    app.log.error("about to fail");
    throw new Error("injected fatal error");
  `;
  const { exit } = run(["--import", "tsx", "--input-type=module", "-e", script], {}, logFile);
  const { code, stderr } = await within(30_000, exit, "the process dies");
  assert.equal(code, 1);
  assert.match(stderr, /injected fatal error/);
  const lines = logLines(logFile);
  assert.deepEqual(
    lines.filter((l) => l.msg === "rpc").map((l) => l.reqId),
    Array.from({ length: 500 }, (_, i) => `fatal-${i}`),
    "every line, in order, once",
  );
  assert.equal(lines.at(-1)?.msg, "about to fail");
});
