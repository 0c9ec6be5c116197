/**
 * The store conformance suite on PostgreSQL (a throwaway cluster, a fresh
 * database per test), and what only several processes can show: races
 * between two pools on one database.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import pg from "pg";
import { AbortedError, UnavailableError } from "../../src/domain/errors.js";
import { createCachingStore } from "../../src/store/decorators/caching.js";
import { PART_NAMES, STORE_PARTS } from "../../src/store/parts.js";
import { PgGroupStore } from "../../src/store/postgres/groups.js";
import { openPostgresStore } from "../../src/store/postgres/index.js";
import type { Queryable } from "../../src/store/postgres/list.js";
import { migratePostgres } from "../../src/store/postgres/migrations.js";
import { MAX_ATTEMPTS, serializable, type ClientSource } from "../../src/store/postgres/tx.js";
import type { Store } from "../../src/store/store.js";
import { AUTHZ_TABLES, VERSIONED_TABLES } from "../../src/store/versions.js";
import { until } from "../support/assertions.js";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { runStoreConformance } from "../support/store-conformance.js";
import { A, B, group, invite, role } from "../support/store-fixtures.js";

if (!pgAvailable()) {
  test("PostgreSQL conformance", { skip: "PostgreSQL is not installed (apt-get install postgresql)" }, () => {});
} else {
  // Behind its caches, as the server runs it (SQLite runs the suite on its bare engine too); every first read reaches the engine.
  runStoreConformance("postgresql behind its caches", async () =>
    createCachingStore(await openPostgresStore({ url: await freshPgDatabase(), maxConnections: 4 })),
  );

  test("the engine's transactionThenVersions answers the versions after its commit, and a rolled-back one moves nothing", async () => {
    const store = await openPostgresStore({ url: await freshPgDatabase(), maxConnections: 2 });
    try {
      const before = await store.readVersions();
      const [result, versions] = await store.transactionThenVersions!(async (tx) => {
        await tx.groups.create(group(A, null, "org"));
        return "done";
      });
      assert.equal(result, "done");
      assert.ok(versions.groups > before.groups, "the answered versions include the transaction's own write");
      assert.deepEqual(versions, await store.readVersions(), "and are what readVersions() reads right after");
      await assert.rejects(
        store.transactionThenVersions!(async (tx) => {
          await tx.groups.create(group(B, null, "other"));
          throw new Error("abort");
        }),
        /abort/,
      );
      assert.equal(await store.groups.get(B), null);
      assert.deepEqual(await store.readVersions(), versions, "a rolled-back transaction moves nothing");
    } finally {
      await store.close();
    }
  });

  describe("postgresql: two processes on one database", () => {
    let a: Store;
    let b: Store;
    before(async () => {
      const url = await freshPgDatabase();
      a = createCachingStore(await openPostgresStore({ url }));
      b = createCachingStore(await openPostgresStore({ url }));
    });
    after(async () => {
      await a.close();
      await b.close();
    });

    test("40 concurrent redemptions of one single-use invite over two pools: exactly one succeeds", async () => {
      const org = "1".repeat(40);
      await a.groups.create(group(org, null, "race org"));
      const viewer = "2".repeat(40);
      await a.roles.create(role(viewer, null, "viewer"));
      const uid = `${org}/${"3".repeat(16)}`;
      await a.groupInvites.create(invite(uid, org, viewer, "race-key"));
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).groupInvites.consume(uid)));
      assert.equal(results.filter(Boolean).length, 1);
    });

    test("30 rounds of delete-parent against create-child on the other pool: never an orphan", async () => {
      let orphans = 0;
      for (let i = 0; i < 30; i++) {
        const parent = i.toString(16).padStart(40, "a");
        const child = `${parent}/${"4".repeat(16)}`;
        await a.groups.create(group(parent, null, `parent ${i}`));
        await Promise.allSettled([a.groups.delete(parent), b.groups.create(group(child, parent, `child ${i}`))]);
        const [p, c] = [await a.groups.get(parent), await a.groups.get(child)];
        if (c !== null && p === null) orphans++;
      }
      assert.equal(orphans, 0);
    });

    test("an authorization change committed by one process is seen by the other's next refresh", async () => {
      await b.refresh();
      const before = b.version(AUTHZ_TABLES);
      await a.roles.create(role("5".repeat(40), null, "another"));
      await b.refresh();
      assert.notEqual(b.version(AUTHZ_TABLES), before);
    });
  });

  test("a connection ended under an open transaction (a failover): that call is UNAVAILABLE, the process lives on, the break is counted", async () => {
    const url = await freshPgDatabase();
    const store = await openPostgresStore({ url, maxConnections: 2 });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      const before = store.connectionLosses!();
      const attempt = store.transaction(async (tx) => {
        await tx.groups.create(group(A, null, "org"));
        // Ended by the administrator while idle in its transaction: PostgreSQL sends 57P01 with no query running,
        // which node-postgres emits as 'error' on the client the pool has lent out.
        await admin.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'",
        );
        await until(30_000, () => store.connectionLosses!() > before, "the break counted");
        return tx.groups.get(A);
      });
      await assert.rejects(attempt, (err: unknown) => err instanceof UnavailableError);
      // Served again on a new connection, and nothing of the ended transaction was kept.
      assert.equal(await store.groups.get(A), null);
    } finally {
      await admin.end();
      await store.close();
    }
  });

  test("a transaction that keeps failing serialization ends in ABORTED after MAX_ATTEMPTS, each attempt rolled back", async () => {
    const statements: string[] = [];
    const failing = {
      query: async (text: string) => {
        statements.push(text);
        if (text.startsWith("INSERT")) throw Object.assign(new Error("could not serialize access"), { code: "40001" });
        return { rows: [], rowCount: 0 };
      },
    };
    const source = { ...failing, connect: async () => ({ ...failing, release: () => {} }) } as unknown as ClientSource;
    await assert.rejects(
      serializable(source, async (q) => q.query("INSERT INTO groups VALUES (1)")),
      (err: unknown) => err instanceof AbortedError && err.code === Code.Aborted,
    );
    assert.equal(statements.filter((s) => s.startsWith("INSERT")).length, MAX_ATTEMPTS);
    assert.equal(statements.filter((s) => s === "ROLLBACK").length, MAX_ATTEMPTS);
  });

  describe("postgresql: version buckets", () => {
    test("each write transaction moves a bucket of its own, and leaves no lock or setting on its connection", async () => {
      const pool = new pg.Pool({ connectionString: await freshPgDatabase(), max: 6 });
      // Every client checked out is given back however the test ends: pool.end() waits for them all.
      const out = new Set<pg.PoolClient>();
      try {
        await migratePostgres(pool);
        const clients = await Promise.all(
          Array.from({ length: 6 }, async () => {
            const c = await pool.connect();
            out.add(c);
            return c;
          }),
        );
        // Six transactions open at once, each having written a versioned table.
        const buckets: number[] = [];
        for (const [i, c] of clients.entries()) {
          await c.query("BEGIN ISOLATION LEVEL SERIALIZABLE");
          await c.query("INSERT INTO groups (uid, parent_uid, name, create_time, update_time) VALUES ($1, NULL, $2, 1, 1)", [
            String(i).repeat(40),
            `org ${i}`,
          ]);
          buckets.push(Number((await c.query<{ b: string }>("SELECT current_setting('platform_versions.tx_bucket') AS b")).rows[0]!.b));
        }
        assert.equal(new Set(buckets).size, 6, `six transactions, six buckets: ${buckets.join(", ")}`);
        for (const c of clients) await c.query("COMMIT");
        const { rows } = await clients[0]!.query<{ bucket: number; groups: string }>(
          "SELECT bucket, groups FROM version_buckets WHERE groups > 0",
        );
        assert.deepEqual(
          rows.map((r) => r.bucket).sort((a, b) => a - b),
          [...buckets].sort((a, b) => a - b),
          "each transaction moved its own bucket only",
        );
        // Nothing stays with the connection (a transaction-pooling PgBouncer hands it to others next).
        for (const c of clients) {
          const { rows: left } = await c.query<{ bucket: string | null; locks: string }>(
            "SELECT current_setting('platform_versions.tx_bucket', true) AS bucket, (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS locks",
          );
          assert.ok(!left[0]!.bucket, `no bucket setting after the commit: ${left[0]!.bucket}`);
          assert.equal(Number(left[0]!.locks), 0, "no advisory lock after the commit");
        }
      } finally {
        for (const c of [...out]) c.release(true);
        await pool.end();
      }
    });

    test(
      "a 65th concurrent writer (every bucket taken) shares one: the conflict is a serialization failure, and the retry commits",
      // 65 transactions open at once need 65 server connections: the test PgBouncer pools 20 per database.
      { skip: process.env.PLATFORM_TEST_PGBOUNCER === "1" && "needs 65 server connections at once (PgBouncer's pool is 20)" },
      async () => {
        const pool = new pg.Pool({ connectionString: await freshPgDatabase(), max: 66 });
        const out: pg.PoolClient[] = [];
        try {
          await migratePostgres(pool);
          const insert = (c: Queryable, i: number) =>
            c.query("INSERT INTO groups (uid, parent_uid, name, create_time, update_time) VALUES ($1, NULL, $2, 1, 1)", [
              i.toString(16).padStart(40, "0"),
              `org ${i}`,
            ]);
          for (let i = 0; i < 64; i++) {
            const c = await pool.connect();
            out.push(c);
            await c.query("BEGIN ISOLATION LEVEL SERIALIZABLE");
            await insert(c, i);
          }
          // All 64 buckets are held: the 65th takes one already written by an open transaction.
          const late = serializable(pool as unknown as ClientSource, (q) => insert(q, 64));
          // A conflict through the shared bucket fails one side with a serialization error; the store retries it.
          const retried: number[] = [];
          for (const [i, c] of out.entries()) {
            await c.query("COMMIT").catch((err: { code?: string }) => {
              assert.equal(err.code, "40001");
              retried.push(i);
            });
          }
          await late;
          for (const i of retried) await serializable(pool as unknown as ClientSource, (q) => insert(q, i));
          const { rows } = await pool.query<{ n: string; v: string }>(
            "SELECT count(*) AS n, (SELECT sum(groups) FROM version_buckets) AS v FROM groups",
          );
          assert.deepEqual([Number(rows[0]!.n), Number(rows[0]!.v)], [65, 65], "every write landed and moved the version once");
        } finally {
          for (const c of out) c.release(true);
          await pool.end();
        }
      },
    );

    test("every versioned table, each part's among them, has its column in version_buckets and its version trigger", async () => {
      const pool = new pg.Pool({ connectionString: await freshPgDatabase(), max: 1 });
      try {
        await migratePostgres(pool);
        const { rows: columns } = await pool.query<{ name: string }>(
          "SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'version_buckets' AND column_name <> 'bucket'",
        );
        assert.deepEqual(columns.map((c) => c.name).sort(), [...VERSIONED_TABLES].sort());
        const { rows: triggers } = await pool.query<{ name: string }>("SELECT tgname AS name FROM pg_trigger WHERE NOT tgisinternal");
        const present = new Set(triggers.map((t) => t.name));
        assert.deepEqual(
          VERSIONED_TABLES.filter((t) => !present.has(`${t}_version`)),
          [],
        );
        for (const name of PART_NAMES) {
          const { table, cached } = STORE_PARTS[name];
          assert.ok(table === null ? !cached : VERSIONED_TABLES.includes(table), `${name}'s table is versioned, or the part is not cached`);
        }
      } finally {
        await pool.end();
      }
    });

    test("migration 2 carries every table's version over from table_versions: no version moves backwards", async () => {
      const pool = new pg.Pool({ connectionString: await freshPgDatabase(), max: 2 });
      try {
        await migratePostgres(pool, 1);
        await pool.query("INSERT INTO groups (uid, parent_uid, name, create_time, update_time) VALUES ($1, NULL, 'org', 1, 1)", [
          "1".repeat(40),
        ]);
        await pool.query("UPDATE groups SET name = 'renamed'");
        const { rows: old } = await pool.query<{ name: string; v: string }>(
          "SELECT name, sum(version) AS v FROM table_versions GROUP BY name",
        );
        const oldGroups = Number(old.find((r) => r.name === "groups")!.v);
        assert.ok(oldGroups >= 2);
        await migratePostgres(pool);
        const store = await openPostgresStore({ url: pool.options.connectionString!, maxConnections: 2 });
        try {
          const versions = await store.readVersions();
          assert.equal(versions.groups, oldGroups);
          assert.equal(versions.roles, 0);
          await store.groups.update("1".repeat(40), { description: "moved" }, 2);
          assert.equal((await store.readVersions()).groups, oldGroups + 1);
        } finally {
          await store.close();
        }
      } finally {
        await pool.end();
      }
    });
  });

  describe("postgresql: query plans on 20,000 groups", () => {
    let pool: pg.Pool;
    before(async () => {
      pool = new pg.Pool({ connectionString: await freshPgDatabase(), max: 2 });
      await migratePostgres(pool);
      // 200 organizations of 99 folders each, uids as the server makes them.
      await pool.query(`
        INSERT INTO groups (uid, parent_uid, name, create_time, update_time)
        SELECT lpad(to_hex(o), 40, '0'), NULL, 'org ' || o, o, o FROM generate_series(1, 200) AS o;
        INSERT INTO groups (uid, parent_uid, name, create_time, update_time)
        SELECT lpad(to_hex(o), 40, '0') || '/' || lpad(to_hex(f), 16, '0'), lpad(to_hex(o), 40, '0'), 'folder ' || f, o * 1000 + f, o * 1000 + f
          FROM generate_series(1, 200) AS o, generate_series(1, 99) AS f;
        ANALYZE groups;`);
    });
    after(async () => {
      await pool.end();
    });

    /** The statements a list runs, captured, then explained against the real table. */
    async function plansOf(list: (store: PgGroupStore) => Promise<unknown>): Promise<string[]> {
      const seen: { text: string; params?: unknown[] }[] = [];
      const recorder: Queryable = {
        query: async <R>(text: string, params?: unknown[]) => {
          seen.push({ text, params });
          return (await pool.query(text, params)) as unknown as { rows: R[]; rowCount: number | null };
        },
      };
      await list(new PgGroupStore({ q: recorder, atomically: (fn) => fn(recorder) }, []));
      const plans: string[] = [];
      for (const { text, params } of seen) plans.push(JSON.stringify((await pool.query(`EXPLAIN (FORMAT JSON) ${text}`, params)).rows));
      return plans;
    }

    const org = lpad(7);
    const q = (over: object) => ({
      hierarchy: {},
      filter: {},
      order: { field: "uid" as const, desc: false },
      after: null,
      offset: 0,
      limit: 50,
      visibleWithin: null,
      ...over,
    });
    for (const [label, query] of [
      ["descendants of an organization", q({ hierarchy: { descendantsOf: org } })],
      ["children of an organization", q({ hierarchy: { childrenOf: org } })],
      [
        "a keyset page in create_time order below an organization",
        q({
          hierarchy: { descendantsOf: org },
          order: { field: "created_at", desc: false },
          after: { key: 7_050, uid: `${org}/0000000000000032` },
        }),
      ],
      ["visible within two organizations", q({ visibleWithin: [org, lpad(9)] })],
    ] as const) {
      test(`${label}: the page and its count use the indexes, no sequential scan of groups`, async () => {
        const plans = await plansOf((store) => store.list(query as never));
        assert.equal(plans.length, 2, "one page statement, one count");
        for (const plan of plans) assert.doesNotMatch(plan, /"Node Type":"Seq Scan"[^}]*"Relation Name":"groups"/, plan);
      });
    }
  });
}

/** An organization uid of the plan fixture. */
function lpad(n: number): string {
  return n.toString(16).padStart(40, "0");
}
