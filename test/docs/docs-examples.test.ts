/**
 * The shell examples of README.md and docs/*.md, run as a reader runs them: each page's ```sh blocks not marked
 * `<!-- doc-test: skip (reason) -->`, in order, in one bash session per page (later blocks use the variables
 * earlier ones set), from the repository root, against a fresh `platform-api serve` on a free port with
 * localhost:8080 rewritten to it, as the README says to. Blocks marked `<!-- doc-test: postgres -->` run in a
 * session of their own against a server on a throwaway PostgreSQL cluster, with PLATFORM_DATABASE_URL set. curl
 * fails on HTTP errors here, so a block that gets one fails. Then what the walkthroughs claim is checked: the
 * workload's exchanged token works, the invite was redeemed, a restored backup serves what was there before it.
 * Needs the compiled server (npm run build; npm test does it).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { shellBlocks, type ShellBlock } from "../support/doc-blocks.js";
import { docPages, readPage } from "../support/markdown.js";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { cleanEnv, startServeProcess, type ServeProcess } from "../support/serve-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MARK = "@@doc-block";
const DONE = "@@doc-done";
/** Generous for a shared 2-core machine: the longest page runs about 40 commands, a dozen of them node or buf processes. */
const SESSION_TIMEOUT_MS = 240_000;

type Backend = "sqlite" | "postgres";

/** A page's session as it ran: its server, the variables its blocks set, and what each block printed. */
interface Session {
  backend: Backend;
  server: ServeProcess;
  /** The server's storage, for commands run beside it. */
  storage: { dataDir: string; databaseUrl: string };
  vars: Record<string, string>;
  /** What the blocks whose text includes `fragment` printed on stdout. */
  printed(fragment: string): string[];
  /** Starts another server with env (its own port), stopped at the end of the test. */
  startServer(env: Record<string, string>): Promise<ServeProcess>;
  /** What `prepare` returned. */
  prepared: Record<string, string>;
}

/** What a page's walkthroughs claim beyond their blocks running: prepared before its session, checked after. */
interface PageChecks {
  prepare?(server: ServeProcess, storage: Session["storage"]): Promise<Record<string, string>>;
  check(session: Session): Promise<void>;
}

/** A GET with a bearer token, JSON out; fails the test on an HTTP error. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function getJson(port: number, path: string, token: string): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  assert.equal(res.status, 200, `GET ${path}: ${text}`);
  return JSON.parse(text);
}

/** An organization made before a page's blocks run, with the administrator token it was made with. */
async function seedOrganization(server: ServeProcess, name: string): Promise<Record<string, string>> {
  const token = await server.adminToken();
  const res = await fetch(`http://127.0.0.1:${server.port}/iam/v2beta1/groups`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ name }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const { uid } = (await res.json()) as { uid: string };
  return { token, uid, name };
}

/** The restored copy serves what was there before the backup, to a token minted before it, under the same base URL. */
async function checkRestored(session: Session, env: Record<string, string>): Promise<void> {
  await session.server.stop(); // the operator stops every server before starting one on the copy
  const restored = await session.startServer({ ...env, PLATFORM_BASE_URL: `http://localhost:${session.server.port}` });
  const group = await getJson(restored.port, `/iam/v2beta1/groups/${session.prepared.uid}`, session.prepared.token!);
  assert.equal(group.name, session.prepared.name);
}

/** Users whose capabilities at acme include the viewer role. */
const viewerIn = (who: { capabilities: { group: { id: string }; role: { name: string } }[] }, org: string) =>
  who.capabilities.some((c) => c.group.id === org && c.role.name === "viewer");

const CHECKS: Record<string, Partial<Record<Backend, PageChecks>>> = {
  "README.md": {
    sqlite: {
      async check({ server, vars }) {
        const roots = await getJson(server.port, "/iam/v2beta1/groups?uidp.in_root=true", vars.TOKEN!);
        assert.deepEqual(
          roots.groups.map((g: { name: string }) => g.name),
          ["quickstart"],
        );
      },
    },
  },
  "docs/calling-the-api.md": {
    sqlite: {
      async check({ server, vars, printed }) {
        const token = vars.AUTH!.replace(/^Authorization: Bearer /, "");
        const org = await getJson(server.port, `/iam/v2beta1/groups/${vars.ORG}`, token);
        assert.deepEqual([org.name, org.description], ["acme", "the org"]);
        // buf curl over gRPC, Connect and gRPC-Web each printed the group.
        const got = printed("GetGroup").join("\n");
        assert.equal(got.match(new RegExp(`"uid": "${vars.ORG}"`, "g"))?.length, 3, got);
      },
    },
  },
  "docs/resources.md": {
    sqlite: {
      async check({ printed }) {
        assert.ok(
          printed("import-advisories").some((out) => /^created: 12$/m.test(out)),
          "import-advisories created the 12 sample advisories",
        );
        assert.ok(
          printed("registry/v2beta1/tags").some((out) => out.includes('"name":"latest"')),
          "the tag is listed",
        );
      },
    },
  },
  "docs/events.md": {
    sqlite: {
      async check({ vars, printed }) {
        const feed = printed("events/v1/events?uidp.descendants_of")
          .flatMap((out) => out.split("\n"))
          .find((line) => line.startsWith('{"events"'));
        assert.ok(feed, "the feed was listed");
        // Below acme (not acme itself): the folder the first block made.
        const events = (JSON.parse(feed) as { events: { type: string; subject: string }[] }).events;
        assert.deepEqual(
          events.map((e) => e.type),
          ["api.platform.iam.group.created.v1"],
        );
        assert.ok(events[0]!.subject.startsWith(`${vars.ORG}/`));
        assert.match(vars.SUB ?? "", /"secret":"whsec_/, "the subscription's secret was shown once");
      },
    },
  },
  "docs/authentication.md": {
    sqlite: {
      async check({ server, vars, printed }) {
        // The workload walkthrough: the static-keys identity's exchanged token is an API token that holds viewer on acme.
        assert.ok(vars.BUILDER!.startsWith(`${vars.ORG}/`), "the workload identity lives in acme");
        const workload = await getJson(server.port, "/auth/v1/ok", vars.WORKLOAD_TOKEN!);
        assert.equal(workload.subject, vars.BUILDER);
        assert.ok(viewerIn(workload, vars.ORG!));
        assert.equal((await getJson(server.port, `/iam/v2beta1/groups/${vars.ORG}`, vars.WORKLOAD_TOKEN!)).name, "acme");

        // The invite walkthrough: globex's robot redeemed acme's code and now holds the invite's role there.
        assert.ok(vars.RELEASER!.startsWith(`${vars.OTHER}/`), "the invitee lives in the other organization");
        assert.ok(
          printed("/auth/v1/register").some((out) => out.includes(`"group":{"uid":"${vars.ORG}"`)),
          "register answered with acme as the group joined",
        );
        const invitee = await getJson(server.port, "/auth/v1/ok", vars.INVITEE_TOKEN!);
        assert.equal(invitee.subject, vars.RELEASER);
        assert.ok(viewerIn(invitee, vars.ORG!));
        const again = await fetch(`http://127.0.0.1:${server.port}/auth/v1/register`, {
          method: "POST",
          headers: { authorization: `Bearer ${vars.INVITEE_TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ code: vars.CODE }),
        });
        assert.equal(again.status, 403, "the single-use code was used up by the page's redemption");
      },
    },
  },
  "docs/operations.md": {
    sqlite: {
      prepare: (server) => seedOrganization(server, "before the backup"),
      check: (session) => checkRestored(session, { PLATFORM_DATA_DIR: session.vars.RESTORED! }),
    },
    postgres: {
      prepare: (server) => seedOrganization(server, "before the dump"),
      check: (session) => checkRestored(session, { PLATFORM_DATABASE_URL: session.vars.RESTORED_URL! }),
    },
  },
};

/** The names the blocks assign (`NAME=…`, `export NAME=…`), in order of first assignment. */
function assignedVariables(blocks: readonly ShellBlock[]): string[] {
  const names = blocks.flatMap((b) => [...b.text.matchAll(/^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=/gm)].map((m) => m[1]!));
  return [...new Set(names)];
}

/** One bash script: the blocks with their port rewritten, each announced on stdout and stderr, then the variables. */
function sessionScript(blocks: readonly ShellBlock[], port: number, variablesFile: string): string {
  const parts = [
    "set -euo pipefail",
    "# the pages say curl -s; here an HTTP error fails the block (and prints the error body)",
    'curl() { command curl --fail-with-body "$@"; }',
  ];
  blocks.forEach((block, i) => {
    parts.push(
      `printf '\\n${MARK} %d\\n' ${i}; printf '${MARK} %d\\n' ${i} >&2`,
      block.text.replaceAll("localhost:8080", `localhost:${port}`),
    );
  });
  const names = assignedVariables(blocks);
  parts.push(`printf '\\n${DONE}\\n'`);
  // One line per variable, its value JSON-encoded by node so that newlines survive.
  if (names.length > 0)
    parts.push(
      `for v in ${names.join(" ")}; do printf '%s\\0%s\\0' "$v" "\${!v-}"; done | node -e 'const p = require("fs").readFileSync(0, "utf8").split("\\0"); const o = {}; for (let i = 0; i + 1 < p.length; i += 2) o[p[i]] = p[i + 1]; require("fs").writeFileSync(process.argv[1], JSON.stringify(o))' '${variablesFile}'`,
    );
  else parts.push(`echo '{}' > '${variablesFile}'`);
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
      stderr += `\n(killed after ${SESSION_TIMEOUT_MS} ms)`;
      process.kill(-child.pid!, "SIGKILL");
    }, SESSION_TIMEOUT_MS);
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

/** Runs a page's blocks of one backend against a fresh server, then the page's checks. */
async function runSession(t: TestContext, page: string, backend: Backend, blocks: readonly ShellBlock[]): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "platform-docs-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const scratch = join(dir, "tmp"); // TMPDIR of the session: the pages' mktemp -d lands here
  mkdirSync(scratch);
  const storage = { dataDir: join(dir, "data"), databaseUrl: backend === "postgres" ? await freshPgDatabase() : "" };
  const storageEnv: Record<string, string> = { PLATFORM_DATA_DIR: storage.dataDir };
  if (storage.databaseUrl) storageEnv.PLATFORM_DATABASE_URL = storage.databaseUrl;
  const servers: ServeProcess[] = [];
  t.after(() => Promise.all(servers.map((s) => s.stop())));
  const startServer = async (env: Record<string, string>) => {
    const server = await startServeProcess({ PLATFORM_SHUTDOWN_GRACE_MS: "2000", ...env });
    servers.push(server);
    return server;
  };
  const server = await startServer(storageEnv);
  const checks = CHECKS[page]?.[backend];
  const prepared = (await checks?.prepare?.(server, storage)) ?? {};

  const script = join(dir, "session.sh");
  const variablesFile = join(dir, "variables.json");
  writeFileSync(script, sessionScript(blocks, server.port, variablesFile));
  const started = Date.now();
  const run = await runBash(script, {
    ...storageEnv,
    PORT: String(server.port),
    TMPDIR: scratch,
    PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`,
  });
  t.diagnostic(`${page} (${backend}): ${blocks.length} blocks ran in ${Date.now() - started} ms`);
  const stdout = perBlock(run.stdout);
  const stderr = perBlock(run.stderr);
  if (run.code !== 0 || !run.stdout.includes(DONE)) {
    const failed = Math.max(-1, ...stderr.keys());
    const block = blocks[failed];
    assert.fail(
      block
        ? `${page}'s block at line ${block.line} failed (bash exit ${run.code}):\n${block.text}\n--- stdout ---\n${stdout.get(failed)}\n--- stderr ---\n${stderr.get(failed)}\n--- server ---\n${server.output()}`
        : `bash exit ${run.code} before the first block of ${page}:\n${run.stderr}`,
    );
  }
  const vars = JSON.parse(readFileSync(variablesFile, "utf8")) as Record<string, string>;
  for (const [name, value] of Object.entries(vars)) assert.notEqual(value, "", `${page} sets $${name}`);
  const printed = (fragment: string) => [...stdout.entries()].filter(([i]) => blocks[i]!.text.includes(fragment)).map(([, out]) => out);
  await checks?.check({ backend, server, storage, vars, printed, startServer, prepared });
}

/** A page's shell blocks; a marker it gets wrong fails the whole file, naming the page. */
function blocksOf(page: string): ShellBlock[] {
  try {
    return shellBlocks(readPage(page));
  } catch (err) {
    throw new Error(`${page}: ${(err as Error).message}`, { cause: err });
  }
}

const PAGES = docPages().map((page) => ({ page, blocks: blocksOf(page) }));
const runs = (mode: ShellBlock["mode"], backend: Backend) => "run" in mode && mode.run === backend;

test("every page's doc-test markers are well formed, most examples run, and they cover the walkthroughs", () => {
  const all = PAGES.flatMap(({ page, blocks }) => blocks.map((b) => ({ page, ...b })));
  const skipped = all.filter((b) => "skip" in b.mode);
  const run = all.filter((b) => !("skip" in b.mode));
  assert.ok(run.length > skipped.length, `more examples run (${run.length}) than are skipped (${skipped.length})`);
  for (const needed of [
    "admin-token",
    "/sts/exchange",
    "/auth/v1/register",
    "keygen",
    "sign-jwt",
    "npx buf curl",
    "backup",
    "pg_dump",
    "pg_restore",
  ]) {
    assert.ok(
      run.some((b) => b.text.includes(needed)),
      `a block that runs uses ${needed}`,
    );
  }
  for (const b of run) {
    assert.doesNotMatch(
      b.text.replaceAll("localhost:8080", ""),
      /:8080\b/,
      `${b.page}:${b.line}: the port is written localhost:8080, as the README tells readers to substitute`,
    );
  }
  for (const [page, checks] of Object.entries(CHECKS))
    for (const backend of Object.keys(checks) as Backend[])
      assert.ok(
        PAGES.find((p) => p.page === page)?.blocks.some((b) => runs(b.mode, backend)),
        `${page} has ${backend} blocks for its checks`,
      );
});

describe("each page's shell blocks run in order against a fresh server, and its walkthroughs work", () => {
  for (const { page, blocks } of PAGES) {
    for (const backend of ["sqlite", "postgres"] as const) {
      const mine = blocks.filter((b) => runs(b.mode, backend));
      if (mine.length === 0) continue;
      const skip = backend === "postgres" && PG_SKIP;
      test(`${page} (${backend})`, { skip }, (t) => runSession(t, page, backend, mine));
    }
  }
});
