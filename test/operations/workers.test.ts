/**
 * PLATFORM_WORKERS=N: N worker processes on the one port over one store. A
 * write acknowledged by any worker is seen by the next request to every
 * worker (records, lists, counts, authorization), with no time-based
 * staleness; SIGTERM to the primary stops them all gracefully.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { mintAdminToken, startServerProcess, type ServerProcess } from "../../scripts/support/cli-server.js";
import { within } from "../support/assertions.js";
import { OidcIssuer } from "../support/oidc-issuer.js";

const BASE_URL = "http://platform-api.scripts.invalid";
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

/** The pids of the primary's children (its workers). */
function workerPids(primary: number): number[] {
  const out = execFileSync("ps", ["-o", "pid=", "--ppid", String(primary)], { encoding: "utf8" });
  return out
    .split("\n")
    .map((l) => Number(l.trim()))
    .filter((n) => n > 0);
}

describe(`${WORKERS} workers on SQLite`, () => {
  let dataDir: string;
  let srv: ServerProcess;
  let admin: string;
  let issuer: OidcIssuer;

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-workers-"));
    issuer = await OidcIssuer.start("workers");
    srv = await startServerProcess(dataDir, { env: { PLATFORM_WORKERS: String(WORKERS), PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true" } });
    admin = await mintAdminToken(dataDir);
    // Both workers up: each answers health on its own.
    await within(
      30_000,
      (async () => {
        while (workerPids(srv.child.pid!).length < WORKERS) await new Promise((r) => setTimeout(r, 100));
      })(),
      "the workers start",
    );
  });
  after(async () => {
    if (srv.child.exitCode === null) srv.child.kill("SIGKILL");
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
    const [victim] = workerPids(srv.child.pid!);
    process.kill(victim!, "SIGKILL");
    // A connection node:cluster hands to a worker in the instant it dies is lost
    // (a load balancer retries it); once the primary has seen the exit, none is.
    await within(
      10_000,
      (async () => {
        while (!srv.logTail().includes("worker died")) await new Promise((r) => setTimeout(r, 20));
      })(),
      "the primary sees the worker die",
    );
    for (let i = 0; i < 20; i++) assert.equal((await fresh(srv.url, "GET", "/healthz", admin)).status, 200);
    await within(
      30_000,
      (async () => {
        while (workerPids(srv.child.pid!).filter((p) => p !== victim).length < WORKERS) await new Promise((r) => setTimeout(r, 100));
      })(),
      "a new worker starts",
    );
  });

  test("SIGTERM to the primary stops every worker and exits 0", async () => {
    const workers = workerPids(srv.child.pid!);
    srv.child.kill("SIGTERM");
    const exit = await within(20_000, srv.exited, "the primary exits");
    assert.equal(exit.code, 0, srv.logTail());
    for (const pid of workers) assert.throws(() => process.kill(pid, 0), "worker gone");
    // The primary's last line says so (its output may still be arriving after the exit).
    for (let i = 0; i < 600 && !srv.logTail().includes('"msg":"all workers stopped"'); i++) await new Promise((r) => setTimeout(r, 50));
    assert.match(srv.logTail(), /"level":30,.*"msg":"all workers stopped","exitCode":0/);
  });
});
