/**
 * The fsync limit, measured in the same run as the server: single-row
 * commits per second of a bare table in the same database engine, on the
 * same disk, with the same durability settings the server runs with. The
 * server's creates are reported against it.
 */
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";

/** SQLite: one writer committing one row at a time (WAL, synchronous=FULL), as the server's one connection would. */
export function sqliteCommitRate(dir: string, seconds: number): number {
  const db = new Database(join(dir, "commit-rate.db"));
  try {
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    db.exec("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)");
    const insert = db.prepare("INSERT INTO t (v) VALUES (?)");
    const end = Date.now() + seconds * 1000;
    let n = 0;
    while (Date.now() < end) {
      insert.run("x".repeat(100));
      n++;
    }
    return n / seconds;
  } finally {
    db.close();
  }
}

/** PostgreSQL: `clients` connections each committing one row at a time, as concurrent requests would. */
export async function postgresCommitRate(url: string, seconds: number, clients: number): Promise<number> {
  const pool = new pg.Pool({ connectionString: url, max: clients });
  try {
    await pool.query("CREATE TABLE IF NOT EXISTS commit_rate (id bigserial PRIMARY KEY, v text NOT NULL)");
    const end = Date.now() + seconds * 1000;
    let n = 0;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (Date.now() < end) {
          await pool.query("INSERT INTO commit_rate (v) VALUES ($1)", ["x".repeat(100)]);
          n++;
        }
      }),
    );
    await pool.query("DROP TABLE commit_rate");
    return n / seconds;
  } finally {
    await pool.end();
  }
}
