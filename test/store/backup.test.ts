/**
 * Backups and restores as an operator runs them, on both engines: `platform-api backup` of a server's SQLite
 * database while it takes writes, and `pg_dump -Fc` / `pg_restore` of its PostgreSQL database; each restored
 * where docs/operations.md says, served by a new process with the same PLATFORM_BASE_URL: the same data (a consistent
 * snapshot: exactly the writes before some point, in order), the same event feed, and a token minted before the
 * backup still accepted (and refused under another base URL). backup's refusals are one line and exit code 2.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import pg from "pg";
import { freshPgDatabase, PG_SKIP, startPgCluster } from "../support/pg-cluster.js";
import { platformCli } from "../support/platform-cli.js";
import { seedDataDir } from "../support/seed-data-dir.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";

/** The address clients use, the same for the server and its restored copy: tokens name it. */
const BASE_URL = "https://platform.example";

const scratch = mkdtempSync(join(tmpdir(), "backup-test-"));
after(() => rmSync(scratch, { recursive: true, force: true }));
let paths = 0;
/** A fresh path under the scratch directory (not created). */
const freshPath = (name: string) => join(scratch, `${name}-${++paths}`);
/** A fresh data directory as a server makes it (0700). */
function freshDir(name: string): string {
  const dir = mkdtempSync(join(scratch, `${name}-`));
  chmodSync(dir, 0o700);
  return dir;
}

/** Where a deployment keeps its data, as the server's and the commands' environment. */
interface Storage {
  dataDir: string;
  databaseUrl: string;
}

const serveEnv = (s: Storage, extra: Record<string, string> = {}) => ({
  PLATFORM_DATA_DIR: s.dataDir,
  ...(s.databaseUrl === "" ? {} : { PLATFORM_DATABASE_URL: s.databaseUrl }),
  PLATFORM_BASE_URL: BASE_URL,
  ...extra,
});

/** REST on a server process as `token`; JSON in and out. */
async function call(srv: ServeProcess, token: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`http://127.0.0.1:${srv.port}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, body: (await res.json()) as any };
}

/** The body of a 200 answer; fails the test on anything else. */
async function ok(srv: ServeProcess, token: string, method: string, path: string, body?: unknown) {
  const res = await call(srv, token, method, path, body);
  assert.equal(res.status, 200, `${method} ${path}: ${JSON.stringify(res.body)}\n${srv.output()}`);
  return res.body;
}

/** Every page of a list, its items under `field`. */
async function listAll(srv: ServeProcess, token: string, path: string, field: string): Promise<{ uid: string; name: string }[]> {
  const items = [];
  let pageToken = "";
  do {
    const page = await ok(srv, token, "GET", `${path}&page_size=200${pageToken ? `&page_token=${encodeURIComponent(pageToken)}` : ""}`);
    items.push(...(page[field] ?? []));
    pageToken = page.nextPageToken ?? "";
  } while (pageToken !== "");
  return items;
}

/** The event feed under org, oldest first, as (id, type, subject). */
async function feed(srv: ServeProcess, token: string, org: string): Promise<string[]> {
  const events: string[] = [];
  let pageToken = "";
  for (;;) {
    const page = await ok(
      srv,
      token,
      "GET",
      `/events/v1/events?uidp.descendants_of=${org}&page_size=200${pageToken ? `&page_token=${encodeURIComponent(pageToken)}` : ""}`,
    );
    const got = (page.events ?? []) as { id: string; type: string; subject: string }[];
    events.push(...got.map((e) => `${e.id} ${e.type} ${e.subject}`));
    // The feed's next page token is always set (it polls): an empty page is its end.
    if (got.length === 0) return events;
    pageToken = page.nextPageToken;
  }
}

/** Waits until cond() holds: a liveness bound, not a timing assumption. */
async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Folders created one after another under org until stopped: each attempted name, and how many were answered. */
function startWriter(srv: ServeProcess, token: string, org: string) {
  const attempted: string[] = [];
  let acknowledged = 0;
  let stopping = false;
  const done = (async () => {
    while (!stopping) {
      const name = `w-${String(attempted.length).padStart(5, "0")}`;
      attempted.push(name);
      await ok(srv, token, "POST", `/iam/v2beta1/groups/${org}`, { name });
      acknowledged++;
    }
  })();
  return {
    attempted: () => attempted.length,
    acknowledged: () => acknowledged,
    names: (n: number) => attempted.slice(0, n),
    stop: async () => {
      stopping = true;
      await done;
    },
  };
}

/** What a reader sees under org: its identities and roles (unchanged while the writer runs), the feed, the JWKS. */
async function view(srv: ServeProcess, token: string, org: string) {
  return {
    identities: await listAll(srv, token, `/iam/v2beta1/identities?uidp.children_of=${org}`, "identities"),
    roles: await listAll(srv, token, `/iam/v2beta1/roles?uidp.children_of=${org}`, "roles"),
    feed: await feed(srv, token, org),
    jwks: (await (await fetch(`http://127.0.0.1:${srv.port}/.well-known/jwks.json`)).json()) as unknown,
  };
}

/** What a deployment held when its backup was taken, and at the end. */
interface BackedUp extends Awaited<ReturnType<typeof view>> {
  token: string;
  org: string;
  /** Folders acknowledged before the backup began, and attempted before it ended. */
  ackedBefore: number;
  attemptedAfter: number;
  /** Every folder attempted, in order (their names sort in that order). */
  names: string[];
}

/**
 * Starts a server on `storage`, gives it records and a token (admin-token, as an operator mints one), runs
 * `backup` while a writer creates folders one after another, lets the writer go on past the backup, and stops.
 */
async function backUpWhileWriting(storage: Storage, backup: () => Promise<void>): Promise<BackedUp> {
  const srv = await startServeProcess(serveEnv(storage));
  try {
    const token = await srv.adminToken();
    const org = (await ok(srv, token, "POST", "/iam/v2beta1/groups", { name: "backed-up org" })).uid as string;
    await ok(srv, token, "POST", `/iam/v2beta1/roles/${org}`, { name: "backed-up role", capabilities: ["CAP_IAM_GROUPS_LIST"] });
    await ok(srv, token, "POST", `/iam/v2beta1/identities/${org}`, {
      name: "backed-up identity",
      claimMatch: { issuer: "https://ci.example", subject: "backed-up" },
    });
    const writer = startWriter(srv, token, org);
    let ackedBefore = 0;
    let attemptedAfter = 0;
    try {
      await until(() => writer.acknowledged() >= 20, "20 writes before the backup");
      ackedBefore = writer.acknowledged();
      await backup();
      attemptedAfter = writer.attempted();
      await until(() => writer.acknowledged() >= attemptedAfter + 5, "5 writes after the backup");
    } finally {
      await writer.stop();
    }
    return { token, org, ackedBefore, attemptedAfter, names: writer.names(writer.attempted()), ...(await view(srv, token, org)) };
  } finally {
    await srv.stop();
  }
}

/**
 * Serves the restored storage with the same base URL and checks it against the original: the token minted before
 * the backup is accepted; the folders are exactly the first k attempted, k between those acknowledged before the
 * backup began and those attempted before it ended (one snapshot: no write half there, none out of order); the
 * records untouched meanwhile, the signing keys and the feed up to the snapshot are the same.
 */
async function checkRestored(restored: Storage, before: BackedUp, note: (message: string) => void): Promise<void> {
  const srv = await startServeProcess(serveEnv(restored));
  try {
    const folders = (await listAll(srv, before.token, `/iam/v2beta1/groups?uidp.children_of=${before.org}`, "groups")).map((g) => g.name);
    assert.ok(
      folders.length >= before.ackedBefore && folders.length <= before.attemptedAfter,
      `${folders.length} folders restored; ${before.ackedBefore} were acknowledged before the backup, ${before.attemptedAfter} attempted before it ended`,
    );
    note(
      `${folders.length} folders restored: ${before.ackedBefore} were acknowledged before the backup began, ${before.attemptedAfter} attempted before it ended, ${before.names.length} in all`,
    );
    assert.deepEqual(folders.sort(), before.names.slice(0, folders.length));
    const now = await view(srv, before.token, before.org);
    assert.deepEqual(now.identities, before.identities);
    assert.deepEqual(now.roles, before.roles);
    assert.deepEqual(now.jwks, before.jwks);
    // One event per folder: the feed is the original's, less the events of the folders made after the snapshot.
    assert.deepEqual(now.feed, before.feed.slice(0, before.feed.length - (before.names.length - folders.length)));
  } finally {
    await srv.stop();
  }
}

/** Runs a PostgreSQL client tool of the newest installed version; fails the test when it fails. */
function pgTool(name: string, args: string[]): void {
  const root = "/usr/lib/postgresql";
  const version = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", name)))
    .sort((a, b) => Number(b) - Number(a))[0];
  assert.ok(version, `${name} is installed`);
  const res = spawnSync(join(root, version, "bin", name), args, { encoding: "utf8" });
  assert.equal(res.status, 0, `${name} ${args.join(" ")}: ${res.stderr}`);
}

/** docs/operations.md (Backups): moves a cluster's transaction ids past the restored events' newest, one committed transaction each. */
const ADVANCE_TRANSACTION_IDS = `DO $$ BEGIN
  WHILE pg_snapshot_xmax(pg_current_snapshot()) <= (SELECT max(txid) FROM events) LOOP
    PERFORM pg_current_xact_id(); COMMIT;
  END LOOP;
END $$`;

/** Runs SQL statements on the database at url, one after another. */
async function sql(url: string, ...statements: string[]): Promise<pg.QueryResultRow[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    let rows: pg.QueryResultRow[] = [];
    for (const statement of statements) rows = (await client.query(statement)).rows;
    return rows;
  } finally {
    await client.end();
  }
}

test("SQLite: backup while the server takes writes; restored into a new directory it serves the same data and old tokens", async (t) => {
  const live = { dataDir: freshDir("live"), databaseUrl: "" };
  const file = `${freshPath("platform")}.db`;
  let printed = "";
  const before = await backUpWhileWriting(live, async () => {
    const run = await platformCli(live.dataDir, ["backup", file]);
    assert.equal(run.code, 0, run.stderr);
    printed = run.stdout;
  });
  assert.match(printed, /^backed up .+ to .+: \d+ bytes, schema version \d+\n$/);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.deepEqual(
    readdirSync(scratch).filter((n) => n.includes(".partial-")),
    [],
    "no partial file left beside the backup",
  );

  // docs/operations.md's restore: a new directory (0700) with the backup as its platform.db (0600).
  const restored = { dataDir: freshDir("restored"), databaseUrl: "" };
  copyFileSync(file, join(restored.dataDir, "platform.db"));
  chmodSync(join(restored.dataDir, "platform.db"), 0o600);
  await checkRestored(restored, before, (m) => t.diagnostic(m));

  // The same keys under another base URL: every token names the old address as its audience, so none is accepted.
  const moved = await startServeProcess(serveEnv(restored, { PLATFORM_BASE_URL: "https://elsewhere.example" }));
  try {
    assert.equal((await call(moved, before.token, "GET", "/iam/v2beta1/groups?page_size=1")).status, 401);
  } finally {
    await moved.stop();
  }
});

test("backup refuses in one line, exit code 2, writing nothing: an existing file (unless --force), no database, PostgreSQL, no directory", async () => {
  const dataDir = freshDir("refusals");
  const none = await platformCli(dataDir, ["backup", `${freshPath("none")}.db`]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /^platform-api: no database in .+\n$/);

  await seedDataDir(dataDir);
  const taken = `${freshPath("taken")}.db`;
  writeFileSync(taken, "not a backup", { mode: 0o644 });
  const refused = await platformCli(dataDir, ["backup", taken]);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /^platform-api: .+ already exists; name a new file, or give --force to replace it\n$/);
  assert.equal(readFileSync(taken, "utf8"), "not a backup");

  const forced = await platformCli(dataDir, ["backup", "--force", taken]);
  assert.equal(forced.code, 0, forced.stderr);
  assert.equal(readFileSync(taken).subarray(0, 16).toString("latin1"), "SQLite format 3\0");
  assert.equal(statSync(taken).mode & 0o777, 0o600);

  const postgres = await platformCli({ dataDir, databaseUrl: "postgres://platform@db.example/platform" }, [
    "backup",
    `${freshPath("pg")}.db`,
  ]);
  assert.equal(postgres.code, 2);
  assert.match(postgres.stderr, /^platform-api: PLATFORM_DATABASE_URL is set: back up PostgreSQL with pg_dump -Fc .+\n$/);

  const nowhere = await platformCli(dataDir, ["backup", join(freshPath("missing"), "platform.db")]);
  assert.equal(nowhere.code, 2);
  assert.match(nowhere.stderr, /^platform-api: cannot write .+: its directory .+ does not exist\n$/);
  assert.deepEqual(
    readdirSync(scratch).filter((n) => n.startsWith("none-") || n.startsWith("pg-") || n.includes(".partial-")),
    [],
  );
});

describe("PostgreSQL", { skip: PG_SKIP }, () => {
  test("pg_dump -Fc while the server takes writes; pg_restore into a new database, or another cluster, serves the same data", async (t) => {
    const live = { dataDir: freshDir("pg"), databaseUrl: await freshPgDatabase() };
    // The events' transaction ids well past a new cluster's (a new cluster starts below 1,000).
    await sql(
      live.databaseUrl,
      "SET synchronous_commit = off",
      ADVANCE_TRANSACTION_IDS.replace("(SELECT max(txid) FROM events)", "'5000'::xid8"),
    );
    const dump = `${freshPath("platform")}.dump`;
    const before = await backUpWhileWriting(live, async () => pgTool("pg_dump", ["-Fc", "-f", dump, live.databaseUrl]));

    // docs/operations.md's restore into a new database of the same cluster.
    const sameCluster = { dataDir: live.dataDir, databaseUrl: await freshPgDatabase() };
    pgTool("pg_restore", ["--no-owner", "--exit-on-error", "--single-transaction", "--dbname", sameCluster.databaseUrl, dump]);
    await checkRestored(sameCluster, before, (m) => t.diagnostic(`same cluster: ${m}`));

    // Into another cluster, whose transaction ids are behind the events': refused in one line until advanced.
    const other = await startPgCluster();
    t.after(() => other.destroy());
    await other.createDatabase("restored");
    const otherCluster = { dataDir: live.dataDir, databaseUrl: other.url("restored") };
    pgTool("pg_restore", ["--no-owner", "--exit-on-error", "--single-transaction", "--dbname", otherCluster.databaseUrl, dump]);
    const refused = await platformCli(otherCluster, ["serve"], { PORT: "0", HOST: "127.0.0.1" });
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      /^platform-api: the PostgreSQL database's events were written up to transaction id \d+, but this cluster's next is \d+: .+\n$/,
    );
    await sql(otherCluster.databaseUrl, "SET synchronous_commit = off", ADVANCE_TRANSACTION_IDS);
    await checkRestored(otherCluster, before, (m) => t.diagnostic(`another cluster: ${m}`));
  });
});
