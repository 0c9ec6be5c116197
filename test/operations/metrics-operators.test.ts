/**
 * What operators look for in /metrics, shown with real calls: the build
 * (platform_build_info), each cache's hits and misses, the event loop's delay,
 * the invite limiter's refusals by limit, the PostgreSQL pool (in use, idle,
 * waiting, its size from PLATFORM_DATABASE_POOL_SIZE), and /metrics moved to
 * its own address with PLATFORM_METRICS_ADDR.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config.js";
import { PACKAGE_VERSION } from "../../src/package-root.js";
import type { Store } from "../../src/store/store.js";
import { requestFrom } from "../support/from-address.js";
import { find, getFresh, METRICS_ENV, parseExposition, scrapeMetrics, valueOf, valueOr0, type Sample } from "../support/metrics-scrape.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { startServeProcess } from "../support/serve-process.js";
import { createGroup, rest, startTestServer, TEST_BACKEND, type TestServer } from "../support/server.js";

const BASE = "http://metrics.test";

/** The samples of a scrape with the suites' metrics token (servers here start with METRICS_ENV). */
async function scrape(url: string): Promise<Sample[]> {
  return parseExposition(await scrapeMetrics(url)).samples;
}

/** The hits and misses of one cache. */
function lookups(samples: Sample[], cache: string): { hits: number; misses: number } {
  return {
    hits: valueOr0(samples, "platform_cache_hits_total", { cache }),
    misses: valueOr0(samples, "platform_cache_misses_total", { cache }),
  };
}

/** A well-formed invite code no invite has: always refused as invalid. */
const unknownCode = () => `${randomBytes(16).toString("hex")}.${randomBytes(32).toString("base64url")}`;

describe("one server", () => {
  let srv: TestServer;
  let issuer: OidcIssuer;
  let org: string;
  let viewer: Caller;

  before(async () => {
    issuer = await OidcIssuer.start("metrics");
    srv = await startTestServer({ env: { PLATFORM_BASE_URL: BASE, ...METRICS_ENV } });
    org = (await createGroup(srv.url, null, "metrics operators org")).uid;
    viewer = await createCaller(srv, org, "metrics viewer", await builtinRole(srv, "viewer"));
  });
  after(async () => {
    await srv.close();
    await issuer.close();
  });

  test("platform_build_info names the version, Node.js and the engine", async () => {
    const samples = await scrape(srv.url);
    const [info] = find(samples, "platform_build_info");
    assert.deepEqual(info, {
      name: "platform_build_info",
      labels: { version: PACKAGE_VERSION, node_version: process.version, engine: TEST_BACKEND === "postgres" ? "postgresql" : "sqlite" },
      value: 1,
    });
  });

  test("each cache counts its hits and misses: store answers, authorization, issuer discovery, tokens", async () => {
    const before = await scrape(srv.url);
    // The viewer reads one group three times: the store answers it from memory after the first read, and its
    // grants (authorization) are read once and then served from the cache.
    for (let i = 0; i < 3; i++)
      assert.equal(
        (await rest(srv.url, "GET", `/iam/v2beta1/groups/${org}`, undefined, { authorization: `Bearer ${viewer.token}` })).status,
        200,
      );
    // A workload exchanges its issuer's ID token twice: discovery and keys are fetched once, then cached.
    const identity = await ok(
      rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, {
        name: "metrics workload",
        claimMatch: { issuer: issuer.url, subject: "wl" },
      }),
    );
    for (let i = 0; i < 2; i++) {
      const exchanged = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity=${identity.uid}`, undefined, {
        authorization: `Bearer ${issuer.idToken({ sub: "wl", aud: BASE })}`,
      });
      assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
    }
    const afterwards = await scrape(srv.url);
    const delta = (cache: string) => {
      const [b, a] = [lookups(before, cache), lookups(afterwards, cache)];
      return { hits: a.hits - b.hits, misses: a.misses - b.misses };
    };
    assert.ok(delta("store_answers").hits >= 2, JSON.stringify(delta("store_answers")));
    assert.ok(delta("store_answers").misses >= 1, JSON.stringify(delta("store_answers")));
    assert.ok(delta("authorization").hits >= 2, JSON.stringify(delta("authorization")));
    assert.equal(delta("authorization").misses, 1);
    assert.deepEqual(delta("issuer_discovery"), { hits: 1, misses: 1 });
    // The verified-token cache: the same counts as platform_token_cache_total.
    assert.deepEqual(lookups(afterwards, "tokens"), {
      hits: valueOf(afterwards, "platform_token_cache_total", { result: "hit" }),
      misses: valueOf(afterwards, "platform_token_cache_total", { result: "miss" }),
    });
    assert.ok(delta("tokens").hits >= 2);
    for (const cache of ["store_counts", "issuer_static_keys"])
      assert.ok(find(afterwards, "platform_cache_hits_total", { cache }).length === 1, cache);
  });

  test("platform_event_loop_delay_seconds records a loop held busy", async () => {
    const count = (samples: Sample[]) => valueOf(samples, "platform_event_loop_delay_seconds_count");
    const over = (samples: Sample[], le: string) => count(samples) - valueOf(samples, "platform_event_loop_delay_seconds_bucket", { le });
    const before = await scrape(srv.url);
    // The test shares the server's event loop: hold it for 300 ms, then let the sampler run again.
    const start = performance.now();
    while (performance.now() - start < 300);
    let afterwards = await scrape(srv.url);
    for (let i = 0; i < 1200 && count(afterwards) <= count(before); i++) {
      await new Promise((r) => setTimeout(r, 25));
      afterwards = await scrape(srv.url);
    }
    // A sample due during the 300 ms ran at least 280 ms late.
    assert.ok(over(afterwards, "0.25") >= over(before, "0.25") + 1, `${over(before, "0.25")} -> ${over(afterwards, "0.25")}`);
    assert.ok(valueOf(afterwards, "platform_event_loop_delay_seconds_sum") >= 0.28);
    // The process's own default lag gauge is there too; the 10 ms-biased summaries are not.
    assert.equal(find(afterwards, "platform_nodejs_eventloop_lag_seconds").length, 1);
    assert.equal(find(afterwards, "platform_nodejs_eventloop_lag_p99_seconds").length, 0);
  });

  test("the invite limiter's refusals are counted by the limit reached: per caller, per address", async () => {
    const register = (caller: Caller, from: string) =>
      requestFrom(from, `${srv.url}/auth/v1/register`, {
        method: "POST",
        headers: { authorization: `Bearer ${caller.token}`, "content-type": "application/json" },
        body: JSON.stringify({ code: unknownCode() }),
      });
    const before = await scrape(srv.url);
    // One caller, from an address of its own: 10 failures, then 2 refused for the caller's limit.
    const guesser = await createCaller(srv, org, "metrics guesser", null);
    const statuses = [];
    for (let i = 0; i < 12; i++) statuses.push((await register(guesser, "127.0.9.1")).status);
    assert.deepEqual(statuses, [...Array<number>(10).fill(403), 429, 429]);
    // 32 callers from one address: 30 failures, then 2 refused for the address's limit.
    const shared = [];
    for (let i = 0; i < 32; i++) shared.push((await register(await createCaller(srv, org, `metrics nat ${i}`, null), "127.0.9.2")).status);
    assert.deepEqual(shared.slice(29), [403, 429, 429]);
    const afterwards = await scrape(srv.url);
    const delta = (reason: string) =>
      valueOr0(afterwards, "platform_invite_refusals_total", { reason }) - valueOr0(before, "platform_invite_refusals_total", { reason });
    assert.deepEqual([delta("per_caller"), delta("per_address")], [2, 2]);
  });

  test("the pool's connections are reported on PostgreSQL only (SQLite has one connection and no pool)", async () => {
    const samples = await scrape(srv.url);
    const states = find(samples, "platform_database_connections").map((s) => s.labels.state);
    if (TEST_BACKEND !== "postgres") {
      assert.deepEqual(states, []);
      assert.deepEqual(find(samples, "platform_database_connection_waiters"), []);
      return;
    }
    assert.deepEqual(states.sort(), ["idle", "in_use"]);
    // test/support/server.ts opens the store with 4 connections.
    assert.equal(valueOf(samples, "platform_database_connections_max"), 4);
    const open =
      valueOf(samples, "platform_database_connections", { state: "in_use" }) +
      valueOf(samples, "platform_database_connections", { state: "idle" });
    assert.ok(open >= 1 && open <= 4, `${open} connections`);
  });
});

describe("PLATFORM_METRICS_ADDR, one process", () => {
  test("/metrics is served on that address only; the listener closes with the server", async () => {
    const srv = await startTestServer({ env: { PLATFORM_METRICS_ADDR: "127.0.0.1:0" } });
    let url: string | undefined;
    try {
      url = srv.server.metricsUrl;
      assert.match(url ?? "", /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      assert.notEqual(new URL(url!).port, String(srv.port));
      const publicRes = await rest(srv.url, "GET", "/metrics");
      assert.equal(publicRes.status, 404);
      assert.equal(publicRes.body.details[0].reason, "ROUTE_NOT_FOUND");
      await createGroup(srv.url, null, "metrics addr org");
      const res = await getFresh(url!);
      assert.equal(res.status, 200);
      const { samples } = parseExposition(res.text);
      assert.equal(valueOf(samples, "platform_requests_total", { method: "CreateGroup", protocol: "rest", code: "ok" }), 1);
    } finally {
      await srv.close();
    }
    await assert.rejects(getFresh(url!), /ECONNREFUSED/);
  });

  test("an address that is not host:port is a configuration error naming the variable", () => {
    for (const bad of ["9464", "localhost", "127.0.0.1:", "127.0.0.1:70000", "::1:9464", "http://127.0.0.1:9464"]) {
      assert.throws(
        () => loadConfig({ PLATFORM_METRICS_ADDR: bad }),
        (err: unknown) =>
          err instanceof ConfigError && err.problems.some((p) => p.startsWith(`PLATFORM_METRICS_ADDR=${bad}: must be host:port`)),
        bad,
      );
    }
    assert.deepEqual(loadConfig({ PLATFORM_METRICS_ADDR: "[::1]:9464" }).metricsAddr, { host: "::1", port: 9464 });
    assert.deepEqual(loadConfig({ PLATFORM_METRICS_ADDR: "localhost:0" }).metricsAddr, { host: "localhost", port: 0 });
    assert.equal(loadConfig({}).metricsAddr, undefined);
  });
});

describe("PLATFORM_DATABASE_POOL_SIZE", () => {
  test("from 1 to 1000, 10 by default; anything else is a configuration error", () => {
    assert.equal(loadConfig({}).databasePoolSize, 10);
    assert.equal(loadConfig({ PLATFORM_DATABASE_POOL_SIZE: "25" }).databasePoolSize, 25);
    for (const bad of ["0", "1001", "ten", "2.5", "-1"]) {
      assert.throws(
        () => loadConfig({ PLATFORM_DATABASE_POOL_SIZE: bad }),
        (err: unknown) =>
          err instanceof ConfigError && err.problems.includes(`PLATFORM_DATABASE_POOL_SIZE=${bad}: must be an integer from 1 to 1000`),
        bad,
      );
    }
  });

  test(
    "sets the pool of `serve`, and a caller waiting for a connection shows as a waiter",
    { skip: TEST_BACKEND !== "postgres" && "PostgreSQL suites only (PLATFORM_TEST_BACKEND=postgres)" },
    async () => {
      // The command line's pool: the size reaches the store.
      const dataDir = mkdtempSync(join(tmpdir(), "platform-pool-"));
      const served = await startServeProcess({
        PLATFORM_DATA_DIR: dataDir,
        PLATFORM_DATABASE_URL: await freshPgDatabase(),
        PLATFORM_DATABASE_POOL_SIZE: "3",
        ...METRICS_ENV,
      });
      try {
        assert.equal(valueOf(await scrape(served.url), "platform_database_connections_max"), 3);
      } finally {
        assert.equal((await served.stop()).code, 0, served.output());
        rmSync(dataDir, { recursive: true, force: true });
      }
      // A server whose 4 connections are all held by transactions: a fifth waits for one.
      assert.ok(pgAvailable());
      let store: Store | undefined;
      const srv = await startTestServer({ env: METRICS_ENV, decorateStore: (s) => (store = s) });
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let inside = 0;
      const held = Array.from({ length: 5 }, () =>
        store!.transaction(async () => {
          inside++;
          await gate;
        }),
      );
      try {
        let samples = await scrape(srv.url);
        for (let i = 0; i < 1200 && (inside < 4 || valueOf(samples, "platform_database_connection_waiters") < 1); i++) {
          await new Promise((r) => setTimeout(r, 25));
          samples = await scrape(srv.url);
        }
        assert.equal(inside, 4, "four transactions hold the four connections");
        assert.equal(valueOf(samples, "platform_database_connections", { state: "in_use" }), 4);
        assert.equal(valueOf(samples, "platform_database_connections", { state: "idle" }), 0);
        assert.ok(valueOf(samples, "platform_database_connection_waiters") >= 1);
      } finally {
        release();
        await Promise.all(held);
      }
      const settled = await scrape(srv.url);
      assert.equal(inside, 5);
      assert.equal(valueOf(settled, "platform_database_connection_waiters"), 0);
      await srv.close();
    },
  );
});
