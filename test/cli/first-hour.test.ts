/**
 * What a new user and an operator meet in their first hour, run as they run it: the real `platform-api`
 * command (compiled, bin/platform-api.js) in child processes. Commands refuse a data directory without a
 * database and create nothing; start-up failures are one line and exit code 2; the start-up and shutdown
 * lines; two servers on one data directory stay coherent; `/` and `/docs/` lead to the docs; JSON ends
 * with a newline; WhoAmI shows the administrator's capabilities; `serve --help` lists the environment.
 */
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import pg from "pg";
import { ENVIRONMENT_VARIABLES } from "../../src/config.js";
import { PACKAGE_VERSION } from "../../src/package-root.js";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { platformCli } from "../support/platform-cli.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";

const scratch = mkdtempSync(join(tmpdir(), "first-hour-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

let dirs = 0;
/** A fresh path under the scratch directory (not created). */
const freshPath = (name: string) => join(scratch, `${name}-${++dirs}`);

/** `serve` at the default level (info) on loopback, ready: its start-up line written. */
const serve = (extra: Record<string, string>) => startServeProcess({ LOG_LEVEL: "info", ...extra });

/** Runs `serve` that is expected to fail at start, under the command line `wrapper` if given: its exit code and output. */
const failingServe = (extra: Record<string, string>, wrapper: readonly string[] = []) =>
  platformCli(extra.PLATFORM_DATA_DIR!, ["serve"], { HOST: "127.0.0.1", LOG_LEVEL: "info", ...extra }, { wrapper, timeoutMs: 60_000 });

/** One line on stderr, no stack trace, exit code 2. */
function assertOneLine(run: { code: number | null; stderr: string }, pattern: RegExp): void {
  assert.equal(run.code, 2, run.stderr);
  const lines = run.stderr.trimEnd().split("\n");
  assert.equal(lines.length, 1, `one line, got:\n${run.stderr}`);
  assert.match(lines[0]!, /^platform-api: /);
  assert.match(lines[0]!, pattern);
  assert.doesNotMatch(run.stderr, /\n\s+at /, "no stack trace");
}

describe("commands other than serve refuse a data directory without a database, creating nothing", () => {
  for (const args of [["admin-token"], ["rotate-key"], ["import-advisories", "--group", "a".repeat(40), "test/data"]]) {
    test(args[0]!, async () => {
      const missing = freshPath("never-served");
      const run = await platformCli(missing, args);
      assertOneLine(run, new RegExp(`no database in ${missing}; start the server first, or set PLATFORM_DATA_DIR`));
      assert.equal(run.stdout, "", "no token printed");
      assert.equal(existsSync(missing), false, "the directory was not created");
      // An existing but empty directory (a typo'd path that happens to exist) stays empty.
      const empty = freshPath("empty");
      mkdirSync(empty, { mode: 0o700 });
      assertOneLine(await platformCli(empty, args), /no database in/);
      assert.deepEqual(readdirSync(empty), []);
    });
  }

  test("migrate-to-postgres with no SQLite database to copy", async () => {
    const missing = freshPath("no-source");
    const run = await platformCli(missing, ["migrate-to-postgres"], { PLATFORM_DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" });
    assertOneLine(run, /no database in/);
    assert.equal(existsSync(missing), false);
  });

  test("admin-token on a PostgreSQL database no server has set up refuses and creates no schema", { skip: PG_SKIP }, async () => {
    const url = await freshPgDatabase();
    const run = await platformCli(freshPath("pg"), ["admin-token"], { PLATFORM_DATABASE_URL: url });
    assertOneLine(run, /no platform-api schema in the PostgreSQL database at postgres:\/\/.*; start the server first/);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'");
      assert.equal(rows[0]!.n, 0, "no table was created");
    } finally {
      await client.end();
    }
  });

  test("a PostgreSQL server that cannot be reached is one line naming it, the password left out", async () => {
    const run = await platformCli(freshPath("unused"), ["admin-token"], {
      PLATFORM_DATABASE_URL: "postgres://platform:hunter2@127.0.0.1:1/platform",
    });
    assertOneLine(run, /cannot use PostgreSQL at postgres:\/\/platform:\*\*\*@127\.0\.0\.1:1\/platform: .*ECONNREFUSED/);
    assert.doesNotMatch(run.stderr, /hunter2/);
  });
});

describe("start-up failures are one line and exit code 2", () => {
  test("the port is in use", async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    try {
      const port = (holder.address() as { port: number }).port;
      const run = await failingServe({ PORT: String(port), PLATFORM_DATA_DIR: freshPath("port-in-use") });
      assertOneLine(run, new RegExp(`port ${port} is already in use \\(127\\.0\\.0\\.1:${port}, EADDRINUSE\\)`));
    } finally {
      holder.close();
    }
  });

  test("the data directory is a file", async () => {
    const file = freshPath("a-file");
    writeFileSync(file, "not a directory");
    assertOneLine(await failingServe({ PORT: "0", PLATFORM_DATA_DIR: file }), new RegExp(`data directory ${file} is not a directory`));
    const below = join(file, "data");
    assertOneLine(await failingServe({ PORT: "0", PLATFORM_DATA_DIR: below }), new RegExp(`cannot use data directory ${below}: .*ENOTDIR`));
  });

  test("the data directory is not writable by the server's user", async () => {
    const dir = freshPath("read-only");
    mkdirSync(dir, { mode: 0o700 });
    chmodSync(dir, 0o500);
    // Root writes anywhere through CAP_DAC_OVERRIDE: as root, the server runs without capabilities (still uid 0, so it
    // reads the checkout wherever it is cloned), and the directory's owner bits apply to it as to anyone.
    const withoutCapabilities = process.getuid?.() === 0 ? ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"] : [];
    const run = await failingServe({ PORT: "0", PLATFORM_DATA_DIR: dir }, withoutCapabilities);
    assertOneLine(run, new RegExp(`cannot use data directory ${dir}: permission denied \\(EACCES\\)`));
  });

  test("a database file SQLite cannot read", async () => {
    const dir = freshPath("not-sqlite");
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(join(dir, "platform.db"), "this is not an SQLite database, just text long enough to have a header", { mode: 0o600 });
    assertOneLine(
      await failingServe({ PORT: "0", PLATFORM_DATA_DIR: dir }),
      new RegExp(`cannot open database ${dir}/platform.db: .*SQLITE_NOTADB`),
    );
  });

  test("with workers, a worker's start-up failure stops the server with code 2 instead of restarting forever", async () => {
    const holder: Server = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    try {
      const port = (holder.address() as { port: number }).port;
      const run = await failingServe({ PORT: String(port), PLATFORM_DATA_DIR: freshPath("workers-port"), PLATFORM_WORKERS: "2" });
      assert.equal(run.code, 2, run.stdout + run.stderr);
      assert.match(run.stderr, /EADDRINUSE/);
      assert.doesNotMatch(run.stderr, /\n\s+at /, "no stack trace");
    } finally {
      holder.close();
    }
  });
});

describe("a running server", () => {
  const dataDir = freshPath("shared");
  let a: ServeProcess;
  let b: ServeProcess;
  let token = "";
  const baseUrl = "http://api.test";
  const call = (s: ServeProcess, path: string, init: RequestInit = {}) =>
    fetch(`http://127.0.0.1:${s.port}${path}`, {
      redirect: "manual",
      ...init,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...init.headers },
    });

  test("says in one line what it is, where it listens, where its data and docs are", async () => {
    a = await serve({ PLATFORM_DATA_DIR: dataDir, PLATFORM_BASE_URL: baseUrl });
    const version = PACKAGE_VERSION;
    const start = a.lines().filter((l) => /listening/i.test(l.msg ?? ""));
    assert.equal(start.length, 1, "exactly one start-up line");
    const line = start[0]!;
    assert.equal(
      line.msg,
      `platform-api ${version} listening on http://127.0.0.1:${a.port} (REST, gRPC, Connect, gRPC-Web) · SQLite ${dataDir}/platform.db · docs ${baseUrl}/docs`,
    );
    assert.deepEqual(
      { version: line.version, listen: line.listen, backend: line.backend, data: line.data, docs: line.docs },
      { version, listen: `http://127.0.0.1:${a.port}`, backend: "sqlite", data: `${dataDir}/platform.db`, docs: `${baseUrl}/docs` },
    );
    token = await a.adminToken();
  });

  test("a second server on the same data directory shares it: each sees the other's writes at once", async () => {
    b = await serve({ PLATFORM_DATA_DIR: dataDir, PLATFORM_BASE_URL: baseUrl });
    const created = await call(a, "/iam/v2beta1/groups", { method: "POST", body: JSON.stringify({ name: "first-hour" }) });
    assert.equal(created.status, 200);
    const { uid } = (await created.json()) as { uid: string };
    assert.equal((await call(b, `/iam/v2beta1/groups/${uid}`)).status, 200, "created on A, read on B");
    const patched = await call(b, `/iam/v2beta1/groups/${uid}`, { method: "PATCH", body: JSON.stringify({ description: "from B" }) });
    assert.equal(patched.status, 200);
    assert.equal(((await (await call(a, `/iam/v2beta1/groups/${uid}`)).json()) as { description: string }).description, "from B");
    const listed = (await (await call(a, "/iam/v2beta1/groups?uidp.in_root=true")).json()) as { groups: { uid: string }[] };
    assert.ok(listed.groups.some((g) => g.uid === uid));
    assert.equal((await call(a, `/iam/v2beta1/groups/${uid}`, { method: "DELETE" })).status, 200);
    assert.equal((await call(b, `/iam/v2beta1/groups/${uid}`)).status, 404, "deleted on A, gone on B");
  });

  test("/ and /docs/ lead to /docs", async () => {
    const root = await call(a, "/");
    assert.equal(root.status, 302);
    assert.equal(
      new URL(root.headers.get("location")!, `${baseUrl}/`).pathname,
      "/docs",
      "relative: /platform/ leads to /platform/docs behind a prefix",
    );
    const slash = await call(a, "/docs/");
    assert.equal(slash.status, 301);
    assert.equal(new URL(slash.headers.get("location")!, `${baseUrl}/docs/`).pathname, "/docs");
    assert.equal((await call(a, "/docs")).status, 200);
  });

  test("JSON responses end with a newline: resources, errors, health, discovery, OpenAPI", async () => {
    for (const path of [
      "/iam/v2beta1/groups?uidp.in_root=true",
      "/iam/v2beta1/groups/nope",
      "/healthz",
      "/readyz",
      "/.well-known/jwks.json",
      "/openapi.json",
    ]) {
      const res = await call(a, path);
      assert.match(res.headers.get("content-type") ?? "", /application\/json/, path);
      const text = await res.text();
      assert.ok(text.endsWith("}\n"), `${path} ends with a newline: ${JSON.stringify(text.slice(-20))}`);
      JSON.parse(text);
    }
  });

  test("WhoAmI shows the administrator holding every capability across the whole hierarchy", async () => {
    const res = await call(a, "/auth/v1/ok");
    assert.equal(res.status, 200);
    const who = (await res.json()) as { capabilities: { group?: unknown; role?: unknown; capabilities?: string[] }[] };
    assert.equal(who.capabilities.length, 1);
    const [everywhere] = who.capabilities;
    assert.equal(everywhere!.group, undefined, "no group: the whole hierarchy");
    assert.equal(everywhere!.role, undefined);
    for (const name of ["groups.create", "identity.delete", "repo.list", "advisories.list"])
      assert.ok(everywhere!.capabilities!.includes(name), name);
  });

  test("stops with a final line", async () => {
    const exits = await Promise.all([a.stop(), b.stop()]);
    assert.deepEqual(
      exits.map((e) => e.code),
      [0, 0],
    );
    for (const s of [a, b]) {
      const last = s.lines().at(-1)!;
      assert.equal(last.msg, "platform-api stopped");
      assert.equal(typeof last.durationMs, "number");
    }
  });
});

test("serve --help lists every environment variable with its default", async () => {
  const run = await platformCli(freshPath("help"), ["serve", "--help"]);
  assert.equal(run.code, 0, run.stderr);
  for (const v of ENVIRONMENT_VARIABLES)
    assert.match(run.stdout, new RegExp(`^  ${v.name}=${v.default.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `, "m"));
});
