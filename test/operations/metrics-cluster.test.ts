/**
 * /metrics with PLATFORM_WORKERS=2: whichever worker a scrape with the
 * metrics token reaches, it answers the whole cluster's numbers (summed by
 * the primary), so counters equal the requests made to both workers and never
 * go backwards, not even when a worker is killed and replaced. Every worker
 * refuses an anonymous scrape: 401 with a token set, 403 by default (private),
 * and the primary alone says so at start. With PLATFORM_METRICS_ADDR the
 * primary serves them on that address and the public port has no /metrics;
 * a worker that cannot answer (stopped) does not hang the scrape. On the
 * suite's engine (PostgreSQL with PLATFORM_TEST_BACKEND=postgres).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { until, within } from "../support/assertions.js";
import {
  assertNothingWentBack,
  find,
  getFresh,
  parseExposition,
  promtoolAvailable,
  promtoolCheck,
  valueOf,
  valueOr0,
  type Exposition,
} from "../support/metrics-scrape.js";
import { freshPgDatabase } from "../support/pg-cluster.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";
import { TEST_BACKEND } from "../support/server.js";

const WORKERS = 2;
const GROUPS = "platformapi.iam.v2beta1.GroupsService";
const LIST_OK = { service: GROUPS, method: "ListGroups", protocol: "rest", code: "ok" };
const METRICS_TOKEN = "cluster-scrape-token";

/** A two-worker server over fresh storage of the suite's engine, with both workers up. */
async function startCluster(env: Record<string, string> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), "platform-metrics-cluster-"));
  const databaseUrl = TEST_BACKEND === "postgres" ? await freshPgDatabase() : "";
  const storeEnv: Record<string, string> = databaseUrl === "" ? {} : { PLATFORM_DATABASE_URL: databaseUrl };
  // Ready once both workers listen (each logs its start-up line at info).
  const srv = await startServeProcess({
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_WORKERS: String(WORKERS),
    LOG_LEVEL: "info",
    ...storeEnv,
    ...env,
  });
  assert.equal(srv.workerPids().length, WORKERS, "the workers started");
  const admin = await srv.adminToken();
  return { dataDir, srv, admin };
}

async function stopCluster(c: { dataDir: string; srv: ServeProcess }): Promise<void> {
  if (c.srv.running()) {
    c.srv.kill("SIGTERM");
    const exit = await within(60_000, c.srv.exited, "the primary exits");
    assert.equal(exit.code, 0, c.srv.output());
  }
  rmSync(c.dataDir, { recursive: true, force: true });
}

/** n ListGroups calls, each on a connection of its own, so node:cluster spreads them over the workers. */
async function listGroups(url: string, admin: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) assert.equal((await getFresh(`${url}/iam/v2beta1/groups`, { authorization: `Bearer ${admin}` })).status, 200);
}

/**
 * A scrape in which every worker answered in time (a worker busy past the
 * bound is counted with its previous numbers: scraped again then).
 */
async function scrapeAll(url: string, headers: Record<string, string>): Promise<Exposition & { text: string }> {
  for (let attempt = 1; ; attempt++) {
    const res = await getFresh(url, headers);
    assert.equal(res.status, 200, res.text);
    assert.match(String(res.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
    const parsed = parseExposition(res.text);
    if (valueOf(parsed.samples, "platform_metrics_stale_workers") === 0 || attempt === 5) return { ...parsed, text: res.text };
  }
}

/** The primary's start-up lines about metrics, and how many lines of any process mention PLATFORM_METRICS_ at all. */
function metricsNotes(log: string): { primary: { msg: string; metricsAccess: string }[]; mentions: number } {
  const lines = log.split("\n").filter((l) => l.startsWith("{"));
  return {
    primary: lines
      .filter((l) => l.includes('"role":"primary"') && l.includes('"metricsAccess"'))
      .map((l) => JSON.parse(l) as { msg: string; metricsAccess: string }),
    mentions: lines.filter((l) => l.includes("PLATFORM_METRICS_")).length,
  };
}

describe(`${WORKERS} workers, /metrics on the public port behind PLATFORM_METRICS_TOKEN`, () => {
  let c: Awaited<ReturnType<typeof startCluster>>;
  const auth = { authorization: `Bearer ${METRICS_TOKEN}` };
  before(async () => {
    c = await startCluster({ PLATFORM_METRICS_TOKEN: METRICS_TOKEN });
  });
  after(async () => {
    await stopCluster(c);
  });

  test("the primary says once where to scrape; every worker refuses a scrape without the token or with a wrong one", async () => {
    const notes = metricsNotes(c.srv.output());
    assert.deepEqual(
      notes.primary.map((n) => [n.metricsAccess, n.msg]),
      [["token", "metrics on the public port at /metrics, for scrapers sending PLATFORM_METRICS_TOKEN in the Authorization header"]],
    );
    assert.equal(notes.mentions, 1, "the workers add no line of their own");
    // Fresh connections: node:cluster hands them to both workers.
    for (let i = 0; i < 4; i++) {
      for (const headers of [{}, { authorization: `Bearer ${METRICS_TOKEN}x` }, { authorization: `Bearer ${c.admin}` }] as Record<
        string,
        string
      >[]) {
        const res = await getFresh(`${c.srv.url}/metrics`, headers);
        assert.equal(res.status, 401, res.text);
        assert.equal(JSON.parse(res.text).details[0].reason, "UNAUTHENTICATED");
        assert.doesNotMatch(res.text, /platform_/);
      }
    }
  });

  test("every scrape, whichever worker answers it, counts both workers' requests; nothing goes backwards", async () => {
    let made = 0;
    let previous: Exposition | undefined;
    for (let round = 0; round < 3; round++) {
      await listGroups(c.srv.url, c.admin, 10);
      made += 10;
      // Four scrapes on fresh connections: node:cluster hands them to both workers.
      for (let i = 0; i < 4; i++) {
        const scrape = await scrapeAll(`${c.srv.url}/metrics`, auth);
        assert.equal(valueOf(scrape.samples, "platform_metrics_stale_workers"), 0, "every worker answered");
        assert.equal(valueOf(scrape.samples, "platform_requests_total", LIST_OK), made, `round ${round}, scrape ${i}`);
        assert.equal(valueOf(scrape.samples, "platform_workers"), WORKERS);
        // Per-worker gauges carry the worker's slot; the summed ones do not.
        assert.deepEqual(
          find(scrape.samples, "platform_process_start_time_seconds")
            .map((s) => s.labels.worker)
            .sort(),
          ["1", "2"],
        );
        assert.equal(find(scrape.samples, "platform_requests_in_flight", { protocol: "rest" })[0]?.labels.worker, undefined);
        assert.equal(valueOf(scrape.samples, "platform_build_info", { engine: TEST_BACKEND === "postgres" ? "postgresql" : "sqlite" }), 1);
        if (previous) assertNothingWentBack(previous, scrape);
        previous = scrape;
      }
    }
    if (promtoolAvailable()) {
      const checked = promtoolCheck((await scrapeAll(`${c.srv.url}/metrics`, auth)).text);
      assert.deepEqual(checked, { code: 0, output: "" }, "promtool check metrics over the cluster's view");
    }
  });

  test("a worker killed and replaced leaves its counts in the sums: counters keep counting from where they were", async () => {
    const before = await scrapeAll(`${c.srv.url}/metrics`, auth);
    const counted = valueOf(before.samples, "platform_requests_total", LIST_OK);
    const [victim] = c.srv.workerPids();
    process.kill(victim!, "SIGKILL");
    // Requests only once the primary has seen the exit: a connection handed to the dying worker is lost.
    await c.srv.waitFor(/worker died/, "output", 60_000);
    await until(60_000, () => c.srv.workerPids().filter((p) => p !== victim).length === WORKERS, "a new worker starts", 50);
    await listGroups(c.srv.url, c.admin, 6);
    const afterwards = await scrapeAll(`${c.srv.url}/metrics`, auth);
    assert.equal(valueOf(afterwards.samples, "platform_requests_total", LIST_OK), counted + 6);
    assert.equal(valueOf(afterwards.samples, "platform_worker_restarts_total"), 1);
    assertNothingWentBack(before, afterwards);
  });
});

describe(`${WORKERS} workers, no metrics setting: /metrics is private on every worker`, () => {
  let c: Awaited<ReturnType<typeof startCluster>>;
  before(async () => {
    c = await startCluster();
  });
  after(async () => {
    await stopCluster(c);
  });

  test("the primary says once that metrics are private and how to scrape; every worker answers 403 in the error shape", async () => {
    const notes = metricsNotes(c.srv.output());
    assert.deepEqual(
      notes.primary.map((n) => n.metricsAccess),
      ["private"],
    );
    assert.match(
      notes.primary[0]!.msg,
      /^metrics are private: .*PLATFORM_METRICS_TOKEN.*PLATFORM_METRICS_ADDR.*PLATFORM_METRICS_PUBLIC=on/,
    );
    assert.equal(notes.mentions, 1, "the workers add no line of their own");
    await listGroups(c.srv.url, c.admin, 4);
    for (let i = 0; i < 4; i++) {
      for (const headers of [{}, { authorization: "Bearer guess" }, { authorization: `Bearer ${c.admin}` }] as Record<string, string>[]) {
        const res = await getFresh(`${c.srv.url}/metrics`, headers);
        assert.equal(res.status, 403, res.text);
        const body = JSON.parse(res.text) as { code: number; details: { reason: string }[] };
        assert.equal(body.code, 7);
        assert.deepEqual(
          body.details.map((d) => d.reason),
          ["METRICS_NOT_PUBLIC"],
        );
        assert.doesNotMatch(res.text, /platform_/);
      }
    }
  });
});

describe(`${WORKERS} workers, PLATFORM_METRICS_ADDR: the primary serves /metrics on its own address`, () => {
  let c: Awaited<ReturnType<typeof startCluster>>;
  let metricsUrl: string;
  const auth = { authorization: `Bearer ${METRICS_TOKEN}` };
  before(async () => {
    c = await startCluster({ PLATFORM_METRICS_ADDR: "127.0.0.1:0", PLATFORM_METRICS_TOKEN: METRICS_TOKEN });
    const line = c.srv.lines().find((l) => l.role === "primary" && l.msg.includes("metrics on "));
    assert.ok(line, c.srv.output());
    metricsUrl = line.metrics as string;
    assert.match(metricsUrl, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  });
  after(async () => {
    await stopCluster(c);
  });

  test("the public port has no /metrics; the metrics address has only it, behind the metrics token", async () => {
    for (let i = 0; i < 4; i++) {
      const res = await getFresh(`${c.srv.url}/metrics`, auth);
      assert.equal(res.status, 404, `public scrape ${i}`);
      assert.equal(JSON.parse(res.text).details[0].reason, "ROUTE_NOT_FOUND");
    }
    const anonymous = await getFresh(metricsUrl);
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.headers["www-authenticate"], 'Bearer realm="metrics"');
    assert.equal(JSON.parse(anonymous.text).details[0].reason, "UNAUTHENTICATED");
    const elsewhere = await getFresh(metricsUrl.replace(/\/metrics$/, "/healthz"), auth);
    assert.equal(elsewhere.status, 404);
    const posted = await getFresh(metricsUrl, auth, "POST");
    assert.equal(posted.status, 405);
    assert.equal(posted.headers.allow, "GET, HEAD");
    await listGroups(c.srv.url, c.admin, 8);
    const scrape = await scrapeAll(metricsUrl, auth);
    assert.equal(valueOf(scrape.samples, "platform_requests_total", LIST_OK), 8);
    assert.equal(valueOf(scrape.samples, "platform_workers"), WORKERS);
  });

  test("a stopped worker does not hang the scrape: the numbers it sent last are used, and counted as stale", async () => {
    await listGroups(c.srv.url, c.admin, 4);
    const before = await scrapeAll(metricsUrl, auth);
    assert.equal(valueOf(before.samples, "platform_metrics_stale_workers"), 0);
    const [stopped] = c.srv.workerPids();
    process.kill(stopped!, "SIGSTOP");
    try {
      const res = await getFresh(metricsUrl, auth);
      assert.equal(res.status, 200);
      const during = parseExposition(res.text);
      assert.ok(valueOf(during.samples, "platform_metrics_stale_workers") >= 1);
      // Its requests are still in the sum: they were counted in the numbers it sent before.
      assert.equal(
        valueOf(during.samples, "platform_requests_total", LIST_OK),
        valueOf(before.samples, "platform_requests_total", LIST_OK),
      );
      assertNothingWentBack(before, during);
    } finally {
      process.kill(stopped!, "SIGCONT");
    }
    const resumed = await scrapeAll(metricsUrl, auth);
    assert.equal(valueOf(resumed.samples, "platform_metrics_stale_workers"), 0);
    assert.equal(valueOr0(resumed.samples, "platform_worker_restarts_total"), 0);
  });
});
