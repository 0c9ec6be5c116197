/**
 * Start-up failures of the database end like every other: one line on stderr and exit code 2, run as an operator
 * runs the real command. A database a newer platform-api migrated (a rollback to an older binary) says which
 * versions and the way back, and is left as it was; sslmode=require against a PostgreSQL without TLS names the
 * setting (and node-postgres's multi-line sslmode warning is not printed).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import Database from "better-sqlite3";
import pg from "pg";
import { PACKAGE_VERSION } from "../../src/package-root.js";
import { openEngine } from "../../src/store/open.js";
import { POSTGRES_SCHEMA_VERSION } from "../../src/store/postgres/migrations.js";
import { nextSchemaVersion } from "../../src/store/schema-releases.js";
import { SQLITE_SCHEMA_VERSION } from "../../src/store/sqlite/migrations.js";
import { freshPgDatabase, PG_SKIP, startPgCluster, startPgStandby, type PgCluster } from "../support/pg-cluster.js";
import { platformCli } from "../support/platform-cli.js";
import { seedDataDir } from "../support/seed-data-dir.js";

const scratch = mkdtempSync(join(tmpdir(), "schema-rollback-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** A server on a free loopback port, were it to start. */
const SERVE_ENV = { PORT: "0", HOST: "127.0.0.1" };

/** One line on stderr, nothing on stdout, exit code 2; returns the line. */
function oneLineRefusal(run: { code: number; stdout: string; stderr: string }): string {
  assert.equal(run.code, 2, `exit code (stderr: ${run.stderr})`);
  assert.equal(run.stdout, "");
  assert.match(run.stderr, /^platform-api: [^\n]+\n$/, "one line on stderr");
  return run.stderr;
}

/** The refusal, with the version that can have migrated the database: 0.3.0 says "platform-api 0.4.0 or later". */
const newerMessage = (engine: string, found: number, known: number) =>
  new RegExp(
    `^platform-api: the ${engine} database's schema version ${found} is newer than this server's ${known} \\(platform-api ${escaped(PACKAGE_VERSION)}\\): ` +
      `platform-api ${escaped(nextSchemaVersion(PACKAGE_VERSION))} or later migrated it \\(CHANGELOG\\.md names each version's schema\\); ` +
      "run that version again, or restore the backup taken before the upgrade \\(docs/operations\\.md: Upgrading and rolling back\\)\n$",
  );
const escaped = (version: string) => version.replaceAll(".", "\\.");

test("SQLite: a schema newer than the binary is refused by serve (one process or workers) and admin-token in one line, exit 2, the database untouched", async () => {
  const dataDir = mkdtempSync(join(scratch, "sqlite-"));
  await seedDataDir(dataDir);
  const file = join(dataDir, "platform.db");
  const newer = SQLITE_SCHEMA_VERSION + 1;
  const db = new Database(file);
  db.pragma(`user_version = ${newer}`);
  db.close();

  for (const [args, env] of [
    [["serve"], SERVE_ENV],
    [["serve"], { ...SERVE_ENV, PLATFORM_WORKERS: "2" }],
    [["admin-token"], {}],
  ] as const) {
    const line = oneLineRefusal(await platformCli(dataDir, args, env));
    assert.match(line, newerMessage("SQLite", newer, SQLITE_SCHEMA_VERSION), `${args.join(" ")} ${JSON.stringify(env)}`);
  }
  const after = new Database(file, { readonly: true });
  assert.equal(after.pragma("user_version", { simple: true }), newer);
  after.close();
});

describe("PostgreSQL", { skip: PG_SKIP }, () => {
  test("a schema newer than the binary is refused by serve in one line, exit 2", async () => {
    const url = await freshPgDatabase();
    await (await openEngine({ databaseUrl: url, dataDir: scratch })).close();
    const newer = POSTGRES_SCHEMA_VERSION + 1;
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query("INSERT INTO schema_migrations (version) VALUES ($1)", [newer]);
    } finally {
      await client.end();
    }
    const line = oneLineRefusal(await platformCli({ dataDir: scratch, databaseUrl: url }, ["serve"], SERVE_ENV));
    assert.match(line, newerMessage("PostgreSQL", newer, POSTGRES_SCHEMA_VERSION));
  });

  test("a standby (read-only, in recovery) is refused in one line, exit 2: the URL must lead to the primary", async () => {
    const primary = await startPgCluster({ durable: true });
    let standby: PgCluster | undefined;
    try {
      await primary.createDatabase("platform");
      await (await openEngine({ databaseUrl: primary.url("platform"), dataDir: scratch })).close();
      standby = await startPgStandby(primary);
      for (const args of [["serve"], ["admin-token"]]) {
        const line = oneLineRefusal(await platformCli({ dataDir: scratch, databaseUrl: standby.url("platform") }, args, SERVE_ENV));
        assert.match(
          line,
          /^platform-api: cannot use PostgreSQL at postgres:\/\/.+: connected to a standby \(pg_is_in_recovery\), not the primary\n$/,
          args.join(" "),
        );
      }
    } finally {
      standby?.destroy();
      primary.destroy();
    }
  });

  test("sslmode=require (or prefer, verify-full) against a server without TLS: one line naming it, exit 2, no driver warning", async () => {
    const url = await freshPgDatabase();
    for (const mode of ["require", "prefer", "verify-full"]) {
      for (const args of [["serve"], ["admin-token"]]) {
        const line = oneLineRefusal(await platformCli({ dataDir: scratch, databaseUrl: `${url}?sslmode=${mode}` }, args, SERVE_ENV));
        assert.match(
          line,
          /^platform-api: cannot use PostgreSQL at postgres:\/\/.+: the server does not accept TLS connections, and the URL's sslmode requires TLS; .+\n$/,
          `sslmode=${mode}, ${args.join(" ")}`,
        );
      }
    }
  });
});
