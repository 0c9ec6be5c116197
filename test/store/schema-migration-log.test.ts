/**
 * Schema migrations are logged as the server logs (JSON lines on stdout, at info): one line per step applied,
 * with the migration, its from and to versions and its duration, when `serve` creates or upgrades a database;
 * none when there is nothing to apply, and none above info.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import pg from "pg";
import { migratePostgres, POSTGRES_SCHEMA_VERSION } from "../../src/store/postgres/migrations.js";
import { SQLITE_SCHEMA_VERSION } from "../../src/store/sqlite/migrations.js";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { startServeProcess } from "../support/serve-process.js";

const scratch = mkdtempSync(join(tmpdir(), "schema-log-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The migration lines of a server's output. */
function migrationLines(output: string): Record<string, unknown>[] {
  return output
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => line.msg === "schema migration applied");
}

/** Starts serve on env, stops it, and returns its migration lines. */
async function migrationsLoggedBy(env: Record<string, string>): Promise<Record<string, unknown>[]> {
  const server = await startServeProcess(env);
  await server.stop();
  return migrationLines(server.output());
}

const ENGINES = [
  { engine: "sqlite", steps: SQLITE_SCHEMA_VERSION, storage: async (): Promise<Record<string, string>> => ({}) },
  ...(pgAvailable()
    ? [{ engine: "postgres", steps: POSTGRES_SCHEMA_VERSION, storage: async () => ({ PLATFORM_DATABASE_URL: await freshPgDatabase() }) }]
    : []),
];

for (const { engine, steps, storage } of ENGINES) {
  test(`${engine}: serve logs each migration step at info, once; nothing when up to date, nothing above info`, async () => {
    const env = { PLATFORM_DATA_DIR: mkdtempSync(join(scratch, `${engine}-`)), ...(await storage()), LOG_LEVEL: "info" };
    const first = await migrationsLoggedBy(env);
    assert.equal(first.length, steps, JSON.stringify(first));
    first.forEach((line, i) => {
      assert.deepEqual(
        { level: line.level, engine: line.engine, migration: line.migration, fromVersion: line.fromVersion, toVersion: line.toVersion },
        { level: 30, engine, migration: i + 1, fromVersion: i, toVersion: i + 1 },
      );
      assert.ok(typeof line.name === "string" && line.name.length > 0, "the step says what it changes");
      assert.ok(typeof line.durationMs === "number" && line.durationMs >= 0, "the step's duration");
      assert.ok(typeof line.time === "number" && typeof line.pid === "number" && typeof line.hostname === "string", "pino's fields");
    });
    assert.deepEqual(await migrationsLoggedBy(env), [], "a second start applies nothing");

    const quiet = { PLATFORM_DATA_DIR: mkdtempSync(join(scratch, `${engine}-warn-`)), ...(await storage()), LOG_LEVEL: "warn" };
    assert.deepEqual(await migrationsLoggedBy(quiet), [], "LOG_LEVEL=warn");
  });
}

if (pgAvailable()) {
  test("postgres: an upgrade logs the steps from the database's version on", async () => {
    const url = await freshPgDatabase();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      await migratePostgres(pool, 3);
    } finally {
      await pool.end();
    }
    const lines = await migrationsLoggedBy({ PLATFORM_DATA_DIR: scratch, PLATFORM_DATABASE_URL: url, LOG_LEVEL: "info" });
    assert.deepEqual(
      lines.map((l) => [l.fromVersion, l.toVersion]),
      Array.from({ length: POSTGRES_SCHEMA_VERSION - 3 }, (_, i) => [3 + i, 4 + i]),
    );
  });
}
