import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { runScript } from "../support/child-process.js";

/** A liveness bound for one script run: it starts the real server several times. */
const SCRIPT_TIMEOUT_MS = 240_000;

/** Runs a script under scripts/, stopped with SIGTERM before the test's own bound so that it stops the servers it started. */
const runBounded = (script: string, args: readonly string[]) => runScript(script, args, SCRIPT_TIMEOUT_MS - 10_000);

/** The number on a "label: N" line of a script's summary. */
function figure(output: string, label: string): number {
  const m = new RegExp(`^${label}: (\\d+(?:\\.\\d+)?)`, "m").exec(output);
  assert.ok(m, `no "${label}:" line in:\n${output}`);
  return Number(m[1]);
}

test("SIGKILL during concurrent REST and gRPC creates loses no acknowledged write", { timeout: SCRIPT_TIMEOUT_MS }, async () => {
  const run = await runBounded("durability-kill.ts", ["--quick"]);
  assert.equal(run.code, 0, run.output);
  assert.match(run.output, /^lost: 0$/m);
  assert.match(run.output, /^integrity ok: 3\/3 after kills, ok after a clean stop$/m);
  assert.ok(figure(run.output, "acknowledged") > 3 * 100, "each round acknowledges at least half its ~200 writes before the kill");
});

test("the kill check reports an acknowledged write that is not there", { timeout: SCRIPT_TIMEOUT_MS }, async () => {
  const run = await runBounded("durability-kill.ts", ["--rounds", "1", "--writes", "20", "--inject-loss"]);
  assert.equal(run.code, 1, run.output);
  assert.match(run.output, /^lost: 1$/m);
});

const straceWorks = spawnSync("strace", ["-f", "-o", "/dev/null", "true"]).status === 0;

test(
  "synchronous=FULL: every create syncs, reads do not",
  { timeout: SCRIPT_TIMEOUT_MS, skip: !straceWorks && "strace is missing or cannot trace here" },
  async () => {
    const run = await runBounded("fsync-per-commit.ts", ["--creates", "30", "--reads", "30"]);
    assert.equal(run.code, 0, run.output);
    const m = /^fsyncs per commit: (\d+\.\d+) \(30 creates\), reads: (\d+\.\d+) per request$/m.exec(run.output);
    assert.ok(m, run.output);
    assert.ok(Number(m[1]) >= 1, `fsyncs per commit ${m[1]}`);
    assert.ok(Number(m[2]) < 1, `reads sync ${m[2]} times per request`);
  },
);
