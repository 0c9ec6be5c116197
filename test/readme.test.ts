/**
 * README.md's shell examples, run as a reader runs them: every ```sh block
 * not marked `<!-- readme-test: skip (reason) -->`, in order, in one bash
 * session (later blocks use the variables earlier ones set), from the
 * repository root, against `platform-api serve` on a free port with
 * localhost:8080 rewritten to it, as the README says to. curl fails on HTTP
 * errors here, so a block that gets one fails. Then the walkthroughs' results
 * are checked: the workload's exchanged token works, the invite was redeemed.
 * Needs the compiled server (npm run build; npm test does it).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { shellBlocks, type ShellBlock } from "./support/readme-blocks.js";
import { cleanEnv, startServeProcess } from "./support/serve-process.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const README = readFileSync(join(ROOT, "README.md"), "utf8");
const MARK = "@@readme-block";
const DONE = "@@readme-done";
/** The README's variables whose values the checks below read (set by the quick start, Calling it and the walkthroughs). */
const VARIABLES = ["TOKEN", "ORG", "OTHER", "BUILDER", "WORKLOAD_TOKEN", "RELEASER", "INVITEE_TOKEN", "CODE"] as const;
/** Generous for a shared 2-core machine: the blocks run about 40 commands, a dozen of them node or buf processes. */
const BLOCKS_TIMEOUT_MS = 240_000;

/** One bash script: the runnable blocks with their port rewritten, each announced on stdout and stderr, then the variables. */
function sessionScript(blocks: readonly ShellBlock[], port: number, variablesFile: string): string {
  const parts = [
    "set -euo pipefail",
    "# the README says curl -s; here an HTTP error fails the block (and prints the error body)",
    'curl() { command curl --fail-with-body "$@"; }',
  ];
  blocks.forEach((block, i) => {
    parts.push(
      `printf '\\n${MARK} %d\\n' ${i}; printf '${MARK} %d\\n' ${i} >&2`,
      block.text.replaceAll("localhost:8080", `localhost:${port}`),
    );
  });
  parts.push(`printf '\\n${DONE}\\n'`, `for v in ${VARIABLES.join(" ")}; do printf '%s=%s\\n' "$v" "\${!v-}"; done > '${variablesFile}'`);
  return `${parts.join("\n")}\n`;
}

/** Runs bash on script from the repository root; kills its whole process group if it outlives the timeout. */
function runBash(script: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [script], { cwd: ROOT, env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => (stdout += s));
    child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s));
    const timer = setTimeout(() => {
      stderr += `\n(killed after ${BLOCKS_TIMEOUT_MS} ms)`;
      process.kill(-child.pid!, "SIGKILL");
    }, BLOCKS_TIMEOUT_MS);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Each block's share of an output stream, by the markers printed before each. */
function perBlock(output: string): Map<number, string> {
  const parts = output.split(new RegExp(`^${MARK} (\\d+)$`, "m"));
  const out = new Map<number, string>();
  for (let i = 1; i < parts.length; i += 2) out.set(Number(parts[i]), parts[i + 1]!.replace(DONE, "").trim());
  return out;
}

/** A GET with a bearer token, JSON out; fails the test on an HTTP error. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function getJson(port: number, path: string, token: string): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  assert.equal(res.status, 200, `GET ${path}: ${text}`);
  return JSON.parse(text);
}

test("every skip marker in README.md names a reason and stands right above a shell block", () => {
  const blocks = shellBlocks(README); // throws on a stray or malformed marker
  for (const b of blocks.filter((b) => b.skip !== null)) assert.ok(b.skip!.trim().length >= 10, `line ${b.line}: say why it is skipped`);
  const run = blocks.filter((b) => b.skip === null);
  assert.ok(run.length >= 8, `most examples run (${run.length} of ${blocks.length})`);
  for (const needed of ["admin-token", "/sts/exchange", "/auth/v1/register", "keygen", "sign-jwt", "npx buf curl"]) {
    assert.ok(
      run.some((b) => b.text.includes(needed)),
      `a block that runs uses ${needed}`,
    );
  }
  for (const b of run) {
    assert.doesNotMatch(
      b.text.replaceAll("localhost:8080", ""),
      /:8080\b/,
      `line ${b.line}: the port is written localhost:8080, as the README tells readers to substitute`,
    );
  }
});

test("README.md's shell blocks run in order against a fresh server, and the walkthroughs work", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "platform-readme-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const dataDir = join(dir, "data");
  const scratch = join(dir, "tmp"); // TMPDIR of the session: the README's mktemp -d lands here
  mkdirSync(scratch);
  const server = await startServeProcess({ PLATFORM_DATA_DIR: dataDir, PLATFORM_SHUTDOWN_GRACE_MS: "2000" });
  t.after(() => server.stop());

  const blocks = shellBlocks(README).filter((b) => b.skip === null);
  const script = join(dir, "readme.sh");
  const variablesFile = join(dir, "variables");
  writeFileSync(script, sessionScript(blocks, server.port, variablesFile));
  const started = Date.now();
  const run = await runBash(script, {
    PORT: String(server.port),
    PLATFORM_DATA_DIR: dataDir,
    TMPDIR: scratch,
    PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`,
  });
  t.diagnostic(`${blocks.length} blocks ran in ${Date.now() - started} ms`);
  const stdout = perBlock(run.stdout);
  const stderr = perBlock(run.stderr);
  if (run.code !== 0 || !run.stdout.includes(DONE)) {
    const failed = Math.max(-1, ...stderr.keys());
    const block = blocks[failed];
    assert.fail(
      block
        ? `README.md's block at line ${block.line} failed (bash exit ${run.code}):\n${block.text}\n--- stdout ---\n${stdout.get(failed)}\n--- stderr ---\n${stderr.get(failed)}\n--- server ---\n${server.output()}`
        : `bash exit ${run.code} before the first block:\n${run.stderr}`,
    );
  }

  const vars = Object.fromEntries(
    readFileSync(variablesFile, "utf8")
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  ) as Record<(typeof VARIABLES)[number], string>;
  for (const name of VARIABLES) assert.notEqual(vars[name] ?? "", "", `README sets $${name}`);
  const at = (block: string) => [...stdout.entries()].filter(([i]) => blocks[i]!.text.includes(block)).map(([, out]) => out);

  // The organizations the examples create have distinct names.
  const roots = await getJson(server.port, "/iam/v2beta1/groups?uidp.in_root=true", vars.TOKEN);
  const names = (roots.groups as { name: string }[]).map((g) => g.name).sort();
  assert.deepEqual(names, [...new Set(names)], `one organization per name: ${names.join(", ")}`);
  assert.ok(names.includes("acme") && names.includes("globex"), names.join(", "));

  // The workload walkthrough: the static-keys identity's exchanged token is an API token that holds viewer on acme.
  assert.ok(vars.BUILDER.startsWith(`${vars.ORG}/`), "the workload identity lives in acme");
  const workload = await getJson(server.port, "/auth/v1/ok", vars.WORKLOAD_TOKEN);
  assert.equal(workload.subject, vars.BUILDER);
  assert.ok(
    workload.capabilities.some(
      (c: { group: { id: string }; role: { name: string } }) => c.group.id === vars.ORG && c.role.name === "viewer",
    ),
  );
  assert.equal((await getJson(server.port, `/iam/v2beta1/groups/${vars.ORG}`, vars.WORKLOAD_TOKEN)).name, "acme");

  // The invite walkthrough: globex's robot redeemed acme's code and now holds the invite's role there.
  assert.ok(vars.RELEASER.startsWith(`${vars.OTHER}/`), "the invitee lives in the other organization");
  assert.ok(
    at("/auth/v1/register").some((out) => out.includes(`"group":{"uid":"${vars.ORG}"`)),
    "register answered with acme as the group joined",
  );
  const invitee = await getJson(server.port, "/auth/v1/ok", vars.INVITEE_TOKEN);
  assert.equal(invitee.subject, vars.RELEASER);
  assert.ok(
    invitee.capabilities.some(
      (c: { group: { id: string }; role: { name: string } }) => c.group.id === vars.ORG && c.role.name === "viewer",
    ),
  );
  const again = await fetch(`http://127.0.0.1:${server.port}/auth/v1/register`, {
    method: "POST",
    headers: { authorization: `Bearer ${vars.INVITEE_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ code: vars.CODE }),
  });
  assert.equal(again.status, 403, "the single-use code was used up by the README's redemption");

  // The advisories example imports the sample records.
  assert.ok(
    at("import-advisories").some((out) => /^created: 12$/m.test(out)),
    "import-advisories created the 12 sample advisories",
  );
});
