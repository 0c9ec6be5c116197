/**
 * A PostgreSQL outage under a running server logs its cause once, at warn,
 * however many calls it refuses, and its end once, at info: the cluster
 * stopped and started again, and a login refused (the role made NOLOGIN,
 * its connections ended) and allowed again. Each cause an operator meets is
 * named in their words: connection refused, authentication failed, database
 * does not exist, too many connections, TLS failure.
 */
import assert from "node:assert/strict";
import net, { type AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import pg from "pg";
import { connectionFailure } from "../../src/store/postgres/tx.js";
import { within } from "../support/assertions.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { pgAvailable, startPgCluster, type PgCluster } from "../support/pg-cluster.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const BOUND_MS = 60_000;

interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/** A server on url logging into lines; its deliverer looks at the database every 10 ms, as a busy server's calls would. */
async function loggedServer(databaseUrl: string): Promise<{ srv: TestServer; lines: LogLine[] }> {
  const lines: LogLine[] = [];
  const stream = new PassThrough();
  stream.setEncoding("utf8").on("data", (s: string) => {
    for (const text of s.split("\n").filter((t) => t !== "")) lines.push(JSON.parse(text) as LogLine);
  });
  const srv = await startTestServer({
    backend: "postgres",
    databaseUrl,
    env: { LOG_LEVEL: "info", PLATFORM_DELIVERY_POLL_MS: "10", ...METRICS_ENV },
    logStream: stream,
  });
  return { srv, lines };
}

/** Waits (a liveness bound) until check() holds. */
async function eventually(what: string, check: () => Promise<boolean> | boolean): Promise<void> {
  await within(
    BOUND_MS,
    (async () => {
      while (!(await check())) await new Promise((r) => setTimeout(r, 100));
    })(),
    what,
  );
}

/** The error a connection to url fails with. */
async function connectError(url: string): Promise<unknown> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (err) {
    return err;
  } finally {
    await client.end().catch(() => {});
  }
  assert.fail(`connected to ${url}`);
}

/** Runs statements as the cluster's superuser. */
async function admin(cluster: PgCluster, ...statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: cluster.url() });
  await client.connect();
  try {
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end();
  }
}

const warns = (lines: LogLine[]) => lines.filter((l) => l.msg.startsWith("database unreachable"));
const recoveries = (lines: LogLine[]) => lines.filter((l) => l.msg.startsWith("database reachable again"));

if (!pgAvailable()) {
  test("database outages are logged", { skip: "PostgreSQL is not installed (apt-get install postgresql)" }, () => {});
} else {
  let cluster: PgCluster;
  before(async () => {
    // A cluster of this file's own: stopping it touches no other suite.
    cluster = await startPgCluster();
  });
  after(() => cluster.destroy());

  test("each cause of an unusable database is named as an operator would say it", async () => {
    await admin(cluster, "CREATE ROLE locked NOLOGIN", "CREATE ROLE capped LOGIN CONNECTION LIMIT 0");
    const base = `postgres://%s@127.0.0.1:${cluster.port}/%s`;
    const at = (user: string, db: string, query = "") => base.replace("%s", user).replace("%s", db) + query;
    const unused = await new Promise<number>((resolve) => {
      const probe = net.createServer();
      probe.listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const cases: [string, string, RegExp, string][] = [
      [`postgres://postgres@127.0.0.1:${unused}/postgres`, "ECONNREFUSED", /^connection refused: /, "a port nobody listens on"],
      [
        at("postgres", "no_such_db"),
        "3D000",
        /^database does not exist: database "no_such_db" does not exist$/,
        "a database that is not there",
      ],
      [
        at("locked", "postgres"),
        "28000",
        /^authentication failed: role "locked" is not permitted to log in$/,
        "a role that may not log in",
      ],
      [at("nobody_here", "postgres"), "28000", /^authentication failed: role "nobody_here" does not exist$/, "a role that is not there"],
      [
        at("capped", "postgres"),
        "53300",
        /^too many connections: too many connections for role "capped"$/,
        "a role over its connection limit",
      ],
      [
        at("postgres", "postgres", "?uselibpqcompat=true&sslmode=require"),
        "",
        /^TLS failure: The server does not support SSL connections$/,
        "TLS required of a server without it",
      ],
    ];
    for (const [url, code, cause, what] of cases) {
      const failure = connectionFailure(await connectError(url));
      assert.ok(failure, what);
      assert.equal(failure.code, code, what);
      assert.match(failure.cause, cause, what);
      assert.equal(failure.lost, false, `${what}: a new connection failed`);
    }
    // A statement that is wrong is no outage.
    assert.equal(connectionFailure(Object.assign(new Error('relation "x" does not exist'), { code: "42P01" })), undefined);
    assert.equal(connectionFailure(Object.assign(new Error("WITH HOLD is not supported"), { code: "0A000" })), undefined);
    // What a demoted primary or a standby answers during a failover is: the primary is elsewhere, retry.
    const readOnly = connectionFailure(Object.assign(new Error("cannot execute INSERT in a read-only transaction"), { code: "25006" }));
    assert.match(readOnly?.cause ?? "", /read-only \(not the primary\)/);
    const standby = connectionFailure(Object.assign(new Error("cannot use serializable mode in a hot standby"), { code: "0A000" }));
    assert.match(standby?.cause ?? "", /hot standby/);
  });

  test("the cluster stopped under a running server: one warn line naming the cause, one info line when it is back", async (t) => {
    await cluster.createDatabase("outage");
    const { srv, lines } = await loggedServer(cluster.url("outage"));
    try {
      assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups")).status, 200);
      cluster.stop("fast");
      try {
        // Many refused calls and readiness checks, one outage.
        for (let i = 0; i < 5; i++) {
          assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups")).status, 503);
          assert.equal((await rest(srv.url, "GET", "/readyz")).status, 503);
        }
        await eventually("the outage is logged", () => warns(lines).length > 0);
      } finally {
        cluster.start();
      }
      await eventually("served again", async () => (await rest(srv.url, "GET", "/iam/v2beta1/groups")).status === 200);
      await eventually("the recovery is logged", () => recoveries(lines).length > 0);
      for (let i = 0; i < 3; i++) assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups")).status, 200);
      const [warn, ...more] = warns(lines);
      assert.deepEqual(more, [], "one warn line per outage");
      assert.equal(warn!.level, 40);
      assert.deepEqual(
        lines.filter((l) => l.level >= 40),
        [warn],
        "nothing else warns: not the refused calls, nor the deliverer's polls",
      );
      // pg_ctl stop waits until the server is gone: what a new connection meets is a refusal (or, racing the stop, its end).
      assert.match(
        String(warn!.cause),
        /^(connection refused|the database server is starting up or shutting down|the database server ended the connection)/,
      );
      assert.equal(warn!.database, `postgres://postgres@127.0.0.1:${cluster.port}/outage`);
      const [recovered, ...moreRecoveries] = recoveries(lines);
      assert.deepEqual(moreRecoveries, [], "one info line at its end");
      assert.equal(recovered!.level, 30);
      assert.equal(typeof recovered!.downMs, "number");
      assert.ok(lines.indexOf(recovered!) > lines.indexOf(warn!));
      t.diagnostic(`${warn!.msg} | ${recovered!.msg}`);
    } finally {
      await srv.close();
    }
  });

  test("a login refused under a running server: one warn line 'authentication failed', one info line when allowed again", async () => {
    await admin(cluster, "CREATE ROLE app LOGIN", "CREATE DATABASE app_db OWNER app");
    const { srv, lines } = await loggedServer(`postgres://app@127.0.0.1:${cluster.port}/app_db`);
    try {
      assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups")).status, 200);
      // New logins refused first, then the server's connections ended: every reconnection is refused.
      await admin(cluster, "ALTER ROLE app NOLOGIN", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'");
      // Until the pool has let go of the ended connections, a call could meet one of them (57P01, administrator
      // command) before any login is tried: wait for the pool to hold none (read from its counts, no query).
      await eventually("the pool let go of its ended connections", async () => {
        const text = await scrapeMetrics(srv.url);
        return (
          /platform_database_connections\{state="idle"\} 0\n/.test(text) && /platform_database_connections\{state="in_use"\} 0\n/.test(text)
        );
      });
      for (let i = 0; i < 5; i++) assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups")).status, 503);
      await eventually("the outage is logged", () => warns(lines).length > 0);
      await admin(cluster, "ALTER ROLE app LOGIN");
      await eventually("served again", async () => (await rest(srv.url, "GET", "/iam/v2beta1/groups")).status === 200);
      await eventually("the recovery is logged", () => recoveries(lines).length > 0);
      const [warn, ...more] = warns(lines);
      assert.deepEqual(more, [], "one warn line per outage");
      assert.equal(warn!.cause, 'authentication failed: role "app" is not permitted to log in');
      assert.equal(warn!.code, "28000");
      assert.equal(recoveries(lines).length, 1);
    } finally {
      await srv.close();
    }
  });
}
