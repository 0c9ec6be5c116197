import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** A liveness bound for one script run: it starts the real server several times. */
const SCRIPT_TIMEOUT_MS = 240_000;

/** Runs a script under scripts/ with tsx from the repository root; resolves with its exit code and output. */
function runScript(script: string, args: readonly string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // SIGTERM before the test's own bound, so the script stops the servers it started.
    const child = spawn(process.execPath, ["--import", "tsx", `scripts/${script}`, ...args], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      timeout: SCRIPT_TIMEOUT_MS - 10_000,
      killSignal: "SIGTERM",
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code: code ?? -1, output }));
  });
}

/** The number on a "label: N" line of a script's summary. */
function figure(output: string, label: string): number {
  const m = new RegExp(`^${label}: (\\d+(?:\\.\\d+)?)`, "m").exec(output);
  assert.ok(m, `no "${label}:" line in:\n${output}`);
  return Number(m[1]);
}

test("SIGKILL during concurrent REST and gRPC creates loses no acknowledged write", { timeout: SCRIPT_TIMEOUT_MS }, async () => {
  const run = await runScript("durability-kill.ts", ["--quick"]);
  assert.equal(run.code, 0, run.output);
  assert.match(run.output, /^lost: 0$/m);
  assert.match(run.output, /^integrity ok: 3\/3 after kills, ok after a clean stop$/m);
  assert.ok(figure(run.output, "acknowledged") > 3 * 100, "each round acknowledges at least half its ~200 writes before the kill");
});

test("the kill check reports an acknowledged write that is not there", { timeout: SCRIPT_TIMEOUT_MS }, async () => {
  const run = await runScript("durability-kill.ts", ["--rounds", "1", "--writes", "20", "--inject-loss"]);
  assert.equal(run.code, 1, run.output);
  assert.match(run.output, /^lost: 1$/m);
});

const straceWorks = spawnSync("strace", ["-f", "-o", "/dev/null", "true"]).status === 0;

test(
  "synchronous=FULL: every create syncs, reads do not",
  { timeout: SCRIPT_TIMEOUT_MS, skip: !straceWorks && "strace is missing or cannot trace here" },
  async () => {
    const run = await runScript("fsync-per-commit.ts", ["--creates", "30", "--reads", "30"]);
    assert.equal(run.code, 0, run.output);
    const m = /^fsyncs per commit: (\d+\.\d+) \(30 creates\), reads: (\d+\.\d+) per request$/m.exec(run.output);
    assert.ok(m, run.output);
    assert.ok(Number(m[1]) >= 1, `fsyncs per commit ${m[1]}`);
    assert.ok(Number(m[2]) < 1, `reads sync ${m[2]} times per request`);
  },
);
