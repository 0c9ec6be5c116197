/**
 * PLATFORM_WORKERS=N: N worker processes on the one port over one store. A
 * write acknowledged by any worker is seen by the next request to every
 * worker (records, lists, counts, authorization), with no time-based
 * staleness; SIGTERM to the primary stops them all gracefully.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { until, within } from "../support/assertions.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { cliAdminToken } from "../support/platform-cli.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";

/** Identical for serve and admin-token, so the token's audience is the server's. */
const BASE_URL = "http://platform-api.workers.invalid";
const WORKERS = 2;

interface Reply {
  status: number;
  body: Record<string, unknown>;
}

/** One request on a connection of its own, so round-robin spreads requests over the workers. */
function fresh(url: string, method: string, path: string, token: string, body?: unknown): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}${path}`,
      { method, agent: false, headers: { authorization: `Bearer ${token}`, "content-type": "application/json", connection: "close" } },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString("utf8")));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: text === "" ? {} : (JSON.parse(text) as Record<string, unknown>) }),
        );
      },
    );
    req.on("error", reject);
    // A liveness bound: a lost connection fails the test instead of hanging it.
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path}: no answer within 10 s`)));
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

describe(`${WORKERS} workers on SQLite`, () => {
  let dataDir: string;
  let srv: ServeProcess;
  let admin: string;
  let issuer: OidcIssuer;

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-workers-"));
    issuer = await OidcIssuer.start("workers");
    // Ready once both workers listen (each logs its start-up line at info).
    srv = await startServeProcess({
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_BASE_URL: BASE_URL,
      PLATFORM_WORKERS: String(WORKERS),
      PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true",
      LOG_LEVEL: "info",
    });
    assert.equal(srv.workerPids().length, WORKERS, "the workers started");
    admin = await cliAdminToken(dataDir, { PLATFORM_BASE_URL: BASE_URL });
  });
  after(async () => {
    srv?.kill("SIGKILL");
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test("100 rounds of write-on-one-connection, read-on-the-next: always visible, counts always right", async () => {
    const org = (await fresh(srv.url, "POST", "/iam/v2beta1/groups", admin, { name: "workers org" })).body;
    for (let i = 0; i < 100; i++) {
      const created = await fresh(srv.url, "POST", `/iam/v2beta1/groups/${String(org.uid)}`, admin, { name: `folder ${i}` });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      const uid = String(created.body.uid);
      const read = await fresh(srv.url, "GET", `/iam/v2beta1/groups/${uid}`, admin);
      assert.equal(read.status, 200, `round ${i}: ${JSON.stringify(read.body)}`);
      const renamed = await fresh(srv.url, "PATCH", `/iam/v2beta1/groups/${uid}`, admin, { name: `renamed ${i}` });
      assert.equal(renamed.status, 200);
      assert.equal((await fresh(srv.url, "GET", `/iam/v2beta1/groups/${uid}`, admin)).body.name, `renamed ${i}`, `round ${i}`);
      const listed = await fresh(srv.url, "GET", `/iam/v2beta1/groups?uidp.children_of=${String(org.uid)}&page_size=1`, admin);
      assert.equal(listed.body.totalCount, String(i + 1), `round ${i}`);
    }
  });

  test("a deleted role binding takes effect at once on every worker", async () => {
    const org = (await fresh(srv.url, "POST", "/iam/v2beta1/groups", admin, { name: "workers authz org" })).body;
    const roles = (await fresh(srv.url, "GET", "/iam/v2beta1/roles?name=viewer", admin)).body.roles as { uid: string }[];
    const identity = (
      await fresh(srv.url, "POST", `/iam/v2beta1/identities/${String(org.uid)}`, admin, {
        name: "workload",
        claimMatch: { issuer: issuer.url, subject: "workload" },
      })
    ).body;
    const binding = (
      await fresh(srv.url, "POST", `/iam/v2beta1/roleBindings/${String(org.uid)}`, admin, {
        identityUid: identity.uid,
        roleUid: roles[0]!.uid,
      })
    ).body;
    const idToken = issuer.idToken({ sub: "workload", aud: BASE_URL });
    const exchanged = await new Promise<Reply>((resolve, reject) => {
      const req = http.request(
        `${srv.url}/sts/exchange?aud=${encodeURIComponent(BASE_URL)}&identity=${String(identity.uid)}`,
        { agent: false, headers: { authorization: `Bearer ${idToken}` } },
        (res) => {
          let text = "";
          res.on("data", (c: Buffer) => (text += c.toString("utf8")));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> }));
        },
      );
      req.on("error", reject);
      req.end();
    });
    assert.equal(exchanged.status, 200, JSON.stringify(exchanged.body));
    const token = String(exchanged.body.token);
    // Warm every worker's authorization cache with the grant.
    for (let i = 0; i < 20; i++) assert.equal((await fresh(srv.url, "GET", `/iam/v2beta1/groups/${String(org.uid)}`, token)).status, 200);
    assert.equal((await fresh(srv.url, "DELETE", `/iam/v2beta1/roleBindings/${String(binding.uid)}`, admin)).status, 200);
    for (let i = 0; i < 20; i++)
      assert.equal((await fresh(srv.url, "GET", `/iam/v2beta1/groups/${String(org.uid)}`, token)).status, 403, `request ${i}`);
    // And deleting the identity ends its token everywhere.
    assert.equal((await fresh(srv.url, "DELETE", `/iam/v2beta1/identities/${String(identity.uid)}`, admin)).status, 200);
    for (let i = 0; i < 10; i++)
      assert.equal((await fresh(srv.url, "GET", `/iam/v2beta1/groups/${String(org.uid)}`, token)).status, 401, `request ${i}`);
  });

  test("a worker killed with SIGKILL is replaced, and the others keep serving meanwhile", async () => {
    const [victim] = srv.workerPids();
    process.kill(victim!, "SIGKILL");
    // A connection node:cluster hands to a worker in the instant it dies is lost
    // (a load balancer retries it); once the primary has seen the exit, none is.
    await srv.waitFor(/worker died/, "output", 60_000);
    for (let i = 0; i < 20; i++) assert.equal((await fresh(srv.url, "GET", "/healthz", admin)).status, 200);
    await until(60_000, () => srv.workerPids().filter((p) => p !== victim).length >= WORKERS, "a new worker starts", 100);
  });

  test("SIGTERM to the primary stops every worker and exits 0", async () => {
    const workers = srv.workerPids();
    srv.kill("SIGTERM");
    const exit = await within(60_000, srv.exited, "the primary exits");
    assert.equal(exit.code, 0, srv.output());
    for (const pid of workers) assert.throws(() => process.kill(pid, 0), "worker gone");
    // The primary's last line says so (exited settles once all of the output is read).
    assert.match(srv.output(), /"level":30,.*"msg":"all workers stopped","exitCode":0/);
  });
});
