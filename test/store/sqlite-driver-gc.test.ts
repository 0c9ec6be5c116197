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
import { test } from "node:test";
import { cleanEnv, runChild } from "../support/child-process.js";

test("a process that served on SQLite exits 0 after its statements are collected", async () => {
  // Not a server fixture: the process under test is one that ran in-process servers (startTestServer) and then
  // collected them, with --expose-gc; what counts is how that process ends.
  const { code, signal, stdout, stderr } = await runChild(
    [process.execPath, "--expose-gc", "--import", "tsx", "test/support/serve-and-collect.ts"],
    { env: cleanEnv({}), timeoutMs: 300_000 },
  );
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, stderr);
  assert.equal(stdout, "collected\n");
  assert.doesNotMatch(stderr, /Assertion failed/);
});
