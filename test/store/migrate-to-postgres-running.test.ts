/**
 * `platform-api migrate-to-postgres` refuses while a server still has the SQLite database open (it would write
 * behind the copy): one line, exit code 2, the target untouched. Once the server is stopped it copies, leaves
 * the SQLite database as it was and nothing behind in the data directory, and its --help names every kind it
 * copies, as its output counts them.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import Database from "better-sqlite3";
import pg from "pg";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { platformCli } from "../support/platform-cli.js";
import { startServeProcess } from "../support/serve-process.js";

const scratch = mkdtempSync(join(tmpdir(), "migrate-running-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The tables of the database at url (none until something migrated it). */
async function tables(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>("SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'");
    return rows.map((r) => r.name);
  } finally {
    await client.end();
  }
}

/** What the SQLite database holds, as a byte-independent summary: its schema version and row counts. */
function summary(file: string): string {
  const db = new Database(file, { readonly: true });
  try {
    const version = db.pragma("user_version", { simple: true });
    const counts = ["groups", "identities", "events", "signing_keys", "secrets"].map(
      (t) => `${t}=${String((db.prepare(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n)}`,
    );
    return `v${String(version)} ${counts.join(" ")}`;
  } finally {
    db.close();
  }
}

test("migrate-to-postgres refuses while a server runs on the data directory, copies once it is stopped", { skip: PG_SKIP }, async () => {
  const dataDir = mkdtempSync(join(scratch, "data-"));
  const server = await startServeProcess({ PLATFORM_DATA_DIR: dataDir });
  const target = await freshPgDatabase();
  try {
    const token = await server.adminToken();
    const res = await fetch(`http://127.0.0.1:${server.port}/iam/v2beta1/groups`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "copied org" }),
    });
    assert.equal(res.status, 200, await res.text());

    const refused = await platformCli({ dataDir, databaseUrl: target }, ["migrate-to-postgres"]);
    assert.equal(refused.code, 2, refused.stderr);
    assert.equal(refused.stdout, "");
    assert.match(
      refused.stderr,
      /^platform-api: the database .+platform\.db is in use by another process \(a server still running on PLATFORM_DATA_DIR, or another platform-api command\); stop it and try again; nothing was copied\n$/,
    );
    assert.deepEqual(await tables(target), [], "the target is untouched");
  } finally {
    await server.stop();
  }

  const before = summary(join(dataDir, "platform.db"));
  const copied = await platformCli({ dataDir, databaseUrl: target }, ["migrate-to-postgres"]);
  assert.equal(copied.code, 0, copied.stderr);
  assert.match(copied.stdout, /^groups: 1$/m);
  assert.match(copied.stdout, /^signing keys: 1$/m);
  assert.equal(summary(join(dataDir, "platform.db")), before, "the SQLite database holds what it held");
  assert.deepEqual(
    readdirSync(dataDir).filter((name) => !name.startsWith("platform.db")),
    [],
    "no snapshot left in the data directory",
  );

  const help = await platformCli(dataDir, ["migrate-to-postgres", "--help"]);
  assert.equal(help.code, 0);
  const kinds = [...copied.stdout.matchAll(/^(.+): \d+$/gm)].map((m) => m[1]!);
  assert.ok(kinds.length >= 13, copied.stdout);
  for (const kind of kinds) assert.ok(help.stdout.includes(kind), `--help names what it copies: ${kind}`);
  assert.match(help.stdout, /exclusive lock/);
});
