/**
 * docs/deploy/haproxy.cfg, tested as operators run it: Debian's HAProxy 2.6 on
 * loopback with that very file (ports and paths from its environment
 * variables), TLS in front with a test CA, and REST, gRPC, Connect and
 * gRPC-Web called through it over h2c backends (`proto h2`). HAProxy
 * opens every connection, health checks included, with a PROXY v2 header
 * (`send-proxy-v2`), so the server runs with PLATFORM_PROXY_PROTOCOL=on.
 * The file has two server lines: the shared suite points both at one server;
 * the rolling restart below runs two servers over one data directory and stops
 * each in turn while calls go on, every one of which must succeed.
 * Skipped when haproxy is not installed, except under CI=true (then it fails).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { createThrough, curl, runDeploySuite } from "../support/deploy-suite.js";
import { METRICS_AUTH, METRICS_ENV, parseExposition, valueOr0 } from "../support/metrics-scrape.js";
import { http1From } from "../support/proxied-calls.js";
import { skipUnlessInstalled, startProxy, type RunningProxy } from "../support/proxies.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTestCa, type TestCa } from "../support/test-ca.js";

runDeploySuite("haproxy", { serverEnv: { PLATFORM_PROXY_PROTOCOL: "on" }, activeHealthChecks: true });

describe("behind haproxy, two servers: a rolling restart serves every call", { skip: skipUnlessInstalled("haproxy") }, () => {
  let dir: string;
  let dataDir: string;
  let ca: TestCa;
  let proxy: RunningProxy;
  let a: TestServer;
  let b: TestServer;
  const running = new Set<TestServer>();
  // One audience for both, so the administrator's token (signed with the keys they share) is good on either.
  const env = { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_BASE_URL: "https://api.deploy.test", ...METRICS_ENV };
  const start = async (port = 0) => {
    const srv = await startTestServer({ backend: "sqlite", dataDir, env: { ...env, PORT: String(port) } });
    running.add(srv);
    return srv;
  };
  const stop = async (srv: TestServer) => {
    running.delete(srv);
    await srv.close();
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "deploy-haproxy-two-"));
    dataDir = join(dir, "data");
    ca = createTestCa(join(dir, "tls"));
    a = await start();
    b = await start();
    proxy = await startProxy("haproxy", { dir, upstreamPort: a.port, secondUpstreamPort: b.port, ca });
  });
  after(async () => {
    await proxy?.stop();
    for (const srv of running) await srv.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const auth = () => ({ authorization: `Bearer ${a.adminToken}` });
  const diagnose = () => `\n--- haproxy output ---\n${proxy.output()}`;

  /** GetGroup calls over REST this server has answered OK, from its own /metrics (read as HAProxy connects: PROXY header first). */
  async function servedBy(srv: TestServer): Promise<number> {
    const res = await http1From({ port: srv.port, proxyHeader: Buffer.from("PROXY UNKNOWN\r\n") }, "GET", "/metrics", METRICS_AUTH);
    assert.equal(res.status, 200, res.text);
    return valueOr0(parseExposition(res.text).samples, "platform_requests_total", { method: "GetGroup", protocol: "rest", code: "ok" });
  }

  async function read(uid: string, when: string): Promise<void> {
    for (const http of ["1.1", "2"] as const) {
      const res = await curl(proxy, ca, { path: `/iam/v2beta1/groups/${uid}`, http, headers: auth() });
      assert.equal(res.status, 200, `${when}, HTTP/${http}: ${JSON.stringify(res.body)}${diagnose()}`);
    }
  }

  /** Creates a group through the proxy and checks that exactly one was made (a retried create must not make two). */
  async function createOnce(name: string): Promise<void> {
    await createThrough(proxy, ca, auth(), name, diagnose());
    const listed = await curl(proxy, ca, { path: `/iam/v2beta1/groups?name=${encodeURIComponent(name)}`, http: "1.1", headers: auth() });
    assert.equal(listed.status, 200);
    assert.equal(listed.body.groups.length, 1, `one ${name}: ${JSON.stringify(listed.body)}`);
  }

  test("both serve; with either stopped every call succeeds on the other, creates made once", async (t) => {
    const { uid } = await createThrough(proxy, ca, auth(), "rolling", diagnose());

    // Both up: round robin gives each of them calls.
    for (let i = 0; i < 5; i++) await read(uid, "both up");
    assert.ok((await servedBy(a)) > 0 && (await servedBy(b)) > 0, `both served: ${await servedBy(a)} and ${await servedBy(b)}`);

    // A stops at once (no drain, so HAProxy's checks have not noticed): its connections are refused, every call
    // is sent on to B.
    const portA = a.port;
    await stop(a);
    const servedByB = await servedBy(b);
    for (let i = 0; i < 10; i++) await read(uid, `A stopped, call ${i}`);
    assert.equal((await servedBy(b)) - servedByB, 20, "B answered every call");
    for (let i = 0; i < 3; i++) await createOnce(`while a is down ${i}`);

    // A starts again on its port and gets calls once its checks pass (a liveness bound, not a timing claim).
    a = await start(portA);
    for (let i = 0; (await servedBy(a)) === 0; i++) {
      assert.ok(i < 600, `HAProxy never sent calls to the restarted server${diagnose()}`);
      await read(uid, "A restarted");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }

    // Then B stops: every call is sent on to A.
    await stop(b);
    const servedByA = await servedBy(a);
    for (let i = 0; i < 10; i++) await read(uid, `B stopped, call ${i}`);
    assert.equal((await servedBy(a)) - servedByA, 20, "A answered every call");
    for (let i = 0; i < 3; i++) await createOnce(`while b is down ${i}`);
    // How many calls met a stopped server and were sent on (the retries field of HAProxy's log line, "+1"): how
    // many depends on when its checks noticed, so it is reported, not asserted.
    t.diagnostic(`calls redispatched to the other server: ${proxy.output().match(/ \d+\/\d+\/\d+\/\d+\/\+\d+ /g)?.length ?? 0}`);
  });
});
