/**
 * A process that served on SQLite runs on, and exits 0, once the garbage
 * collector has finalized the driver's statement objects. With
 * better-sqlite3 12 (a node::ObjectWrap addon) on Node 24.19 to 24.21, a
 * collection that met a dropped statement aborted the process (`Assertion
 * failed: (env) != nullptr` in node::RemoveEnvironmentCleanupHook, from
 * Statement::~Statement): test processes and servers alike, whenever the
 * collector ran, often near the end of a run. better-sqlite3 13 is a
 * Node-API addon, whose objects carry no such hook. The child
 * (support/serve-and-collect.ts) forces full collections between server
 * lifetimes, so the check does not wait for the collector's own timing.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { cleanEnv } from "../support/serve-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

test("a process that served on SQLite exits 0 after its statements are collected", async () => {
  const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", "test/support/serve-and-collect.ts"], {
    cwd: ROOT,
    env: cleanEnv({}),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s));
  child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const [code, signal] = (await once(child, "close")) as [number | null, NodeJS.Signals | null];
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
  assert.equal(stdout, "collected\n");
  assert.doesNotMatch(stderr, /Assertion failed/);
});
