/**
 * What claiming the version bucket per transaction costs (PostgreSQL schema
 * 10) against claiming it once per connection (schema 9's session advisory
 * lock and session setting), on one throwaway cluster in one run: write
 * transactions per second of `clients` concurrent connections, each
 * BEGIN SERIALIZABLE, one INSERT into groups (its version trigger moves a
 * bucket), COMMIT, retried on serialization failures as the store does;
 * rounds alternate so load on a shared machine falls on both alike. Also the
 * per-transaction claim through PgBouncer in transaction mode when it is
 * installed (the case the change is for: the session claim cannot work there).
 *
 *   npm run bench:buckets            BENCH_SECONDS (default 5) per round, BENCH_ROUNDS (3), BENCH_CLIENTS (10)
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { migratePostgres } from "../src/store/postgres/migrations.js";
import { serializable } from "../src/store/postgres/tx.js";
import { startPgCluster } from "../test/support/pg-cluster.js";
import { pgbouncerAvailable, startPgBouncer } from "../test/support/pgbouncer.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 10);

/** Schema 9's claim, run on each new connection (as the server did until 0.5.0). */
const SESSION_CLAIM = `SELECT set_config('platform_versions.bucket', b::text, false)
  FROM (SELECT b FROM generate_series(0, 63) AS b WHERE pg_try_advisory_lock(${0x7665}, b) LIMIT 1) AS free`;

interface Setup {
  name: string;
  pool: pg.Pool;
}

/** Write transactions per second over SECONDS, and the serialization retries they met. */
async function rate(pool: pg.Pool): Promise<{ perSecond: number; retries: number }> {
  let n = 0;
  let attempts = 0;
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (Date.now() < end) {
        const uid = randomBytes(20).toString("hex");
        await serializable(pool, async (q) => {
          attempts++;
          await q.query("INSERT INTO groups (uid, parent_uid, name, create_time, update_time) VALUES ($1, NULL, $1, 1, 1)", [uid]);
        });
        n++;
      }
    }),
  );
  return { perSecond: n / SECONDS, retries: attempts - n };
}

const cluster = await startPgCluster({ durable: true });
const setups: Setup[] = [];
try {
  await cluster.createDatabase("session_claim");
  await cluster.createDatabase("transaction_claim");
  const session = new pg.Pool({
    connectionString: cluster.url("session_claim"),
    max: CLIENTS,
    onConnect: async (client) => void (await client.query(SESSION_CLAIM)),
  });
  await migratePostgres(session, 9);
  setups.push({ name: "per connection (schema 9)", pool: session });
  const transaction = new pg.Pool({ connectionString: cluster.url("transaction_claim"), max: CLIENTS });
  await migratePostgres(transaction);
  setups.push({ name: "per transaction (schema 10)", pool: transaction });
  const bouncer = pgbouncerAvailable() ? await startPgBouncer(cluster.port, { poolSize: CLIENTS }) : undefined;
  if (bouncer)
    setups.push({
      name: "per transaction, through PgBouncer",
      pool: new pg.Pool({ connectionString: bouncer.url("transaction_claim"), max: CLIENTS }),
    });

  const totals = new Map<string, { perSecond: number[]; retries: number }>(setups.map((s) => [s.name, { perSecond: [], retries: 0 }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const { name, pool } of round % 2 === 0 ? setups : [...setups].reverse()) {
      const r = await rate(pool);
      totals.get(name)!.perSecond.push(r.perSecond);
      totals.get(name)!.retries += r.retries;
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const base = median(totals.get(setups[0]!.name)!.perSecond);
  console.log(`version buckets: ${CLIENTS} clients, ${ROUNDS} rounds of ${SECONDS} s, fsync on (medians)`);
  for (const [name, t] of totals) {
    const m = median(t.perSecond);
    console.log(`  ${name.padEnd(38)} ${m.toFixed(0).padStart(6)} tx/s  ×${(m / base).toFixed(2)}  serialization retries ${t.retries}`);
  }
  for (const s of setups) await s.pool.end();
  bouncer?.stop();
} finally {
  cluster.destroy();
}
