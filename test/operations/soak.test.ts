import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** A liveness bound for the quick soak: ~30 s of load plus the server's start and stop. */
const SCRIPT_TIMEOUT_MS = 120_000;

/** Runs scripts/soak.ts with tsx from the repository root (WebSocket for its heap probe); resolves with its exit code and output. */
function runSoak(args: readonly string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // SIGTERM before the test's own bound, so the script stops the server it started.
    const child = spawn(process.execPath, ["--import", "tsx", "scripts/soak.ts", ...args], {
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

test(
  "mixed REST and gRPC load: no errors, no memory growth once warm, and SIGTERM under load drains without resets",
  { timeout: SCRIPT_TIMEOUT_MS },
  async () => {
    const run = await runSoak(["--quick"]);
    assert.equal(run.code, 0, run.output);
    assert.match(run.output, /^errors: 0$/m);
    assert.match(run.output, /^resets: 0$/m);
    assert.match(run.output, /^server exit: 0,/m);
    const inFlight = /^drain: SIGTERM with (\d+) calls in flight/m.exec(run.output);
    assert.ok(inFlight && Number(inFlight[1]) > 0, `the signal must land on calls in flight:\n${run.output}`);
    const calls = /^calls: [\d,]+ \(REST ([\d,]+), gRPC ([\d,]+)\)/m.exec(run.output);
    assert.ok(calls, run.output);
    for (const n of calls.slice(1)) assert.ok(Number(n!.replace(/,/g, "")) > 0, `both protocols carry load:\n${run.output}`);
  },
);
