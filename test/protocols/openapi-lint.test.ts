/**
 * /openapi.json under a third-party linter: @redocly/cli's recommended rules
 * report no error (identical paths, duplicate operationIds, bad references…).
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { startTestServer, type TestServer } from "../support/server.js";

const REDOCLY = new URL("../../node_modules/.bin/redocly", import.meta.url).pathname;

interface LintReport {
  totals: { errors: number; warnings: number };
  problems: { ruleId: string; severity: string; message: string }[];
}

let srv: TestServer;
let dir: string;
before(async () => {
  srv = await startTestServer();
  dir = mkdtempSync(join(tmpdir(), "openapi-lint-"));
});
after(async () => {
  await srv.close();
  rmSync(dir, { recursive: true, force: true });
});

test("redocly lint reports 0 errors on the live /openapi.json", async () => {
  const res = await fetch(`${srv.url}/openapi.json`);
  assert.equal(res.status, 200);
  const file = join(dir, "openapi.json");
  writeFileSync(file, await res.text());
  // Exit code 1 on errors: read the report either way.
  const run = await promisify(execFile)(REDOCLY, ["lint", file, "--format=json"], {
    env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
    maxBuffer: 16 << 20,
  }).catch((err: { stdout?: string; stderr?: string }) => ({ stdout: err.stdout ?? "", stderr: err.stderr ?? "" }));
  const report = JSON.parse(run.stdout) as LintReport;
  const errors = report.problems.filter((p) => p.severity === "error").map((p) => `${p.ruleId}: ${p.message}`);
  assert.deepEqual(errors, []);
  assert.equal(report.totals.errors, 0);
  // The one warning allowed: the test server's URL is 127.0.0.1 (no-server-example.com).
  const warnings = report.problems.filter((p) => p.severity !== "error").map((p) => p.ruleId);
  assert.deepEqual(
    warnings.filter((rule) => rule !== "no-server-example.com"),
    [],
  );
});
