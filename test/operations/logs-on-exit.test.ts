/**
 * Log lines are buffered and written once per event-loop turn (see
 * src/server/observe/logging.ts): none may be lost when the process stops.
 * `platform-api serve` runs as users run it, compiled, at the default level,
 * with its stdout redirected to a file.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { within } from "../support/assertions.js";
import { cleanEnv, runChild } from "../support/child-process.js";
import { startServeProcess } from "../support/serve-process.js";
import { tempDirs } from "../support/temp-dirs.js";

const BASE_URL = "http://logs-on-exit.invalid";
const tempDir = tempDirs("platform-logs-exit-");

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
  // No LOG_LEVEL, and the default drain: serve as users run it, none of the test defaults; stdout appended to the file.
  const server = await startServeProcess(
    {
      PLATFORM_DATA_DIR: dataDir,
      HOST: "127.0.0.1",
      PLATFORM_BASE_URL: BASE_URL,
      PLATFORM_AUTH_URL: BASE_URL,
      PLATFORM_SHUTDOWN_GRACE_MS: "2000",
    },
    { bare: true, stdoutFile: logFile },
  );
  const base = server.url;
  const authorization = `Bearer ${await server.adminToken()}`;

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
      server.kill("SIGTERM");
    }
  });
  await within(30_000, Promise.all(calls), "every call settles");
  const exit = await within(30_000, server.exited, "serve exits on SIGTERM");
  assert.deepEqual([exit.code, exit.signal], [0, null], server.stderr());
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
  const { code, stderr } = await runChild([process.execPath, "--import", "tsx", "--input-type=module", "-e", script], {
    env: cleanEnv({}),
    stdoutFile: logFile,
    timeoutMs: 60_000,
  });
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
