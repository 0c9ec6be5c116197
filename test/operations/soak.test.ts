import assert from "node:assert/strict";
import { test } from "node:test";
import { runScript } from "../support/child-process.js";

/** A liveness bound for the quick soak: ~30 s of load plus the server's start and stop. */
const SCRIPT_TIMEOUT_MS = 120_000;

test(
  "mixed REST and gRPC load: no errors, no memory growth once warm, and SIGTERM under load drains without resets",
  { timeout: SCRIPT_TIMEOUT_MS },
  async () => {
    // SIGTERM before the test's own bound, so the script stops the server it started.
    const run = await runScript("soak.ts", ["--quick"], SCRIPT_TIMEOUT_MS - 10_000);
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
