/**
 * Two `serve` processes on one PostgreSQL database, as behind a load
 * balancer: a write acknowledged by one is read at once from the other
 * (records, lists, counts, authorization); SIGKILL of one mid-load loses no
 * acknowledged write and the other keeps serving.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";
import { rest } from "../support/server.js";

if (!pgAvailable()) {
  test("two processes on PostgreSQL", { skip: "PostgreSQL is not installed (apt-get install postgresql)" }, () => {});
} else {
  describe("two server processes on one PostgreSQL database", () => {
    let dirs: string[];
    let a: ServeProcess;
    let b: ServeProcess;
    let token: string;
    let env: Record<string, string>;

    before(async () => {
      // One base URL, so that a token of one is good on the other.
      env = { PLATFORM_DATABASE_URL: await freshPgDatabase(), PLATFORM_BASE_URL: "http://platform-api.pg.invalid" };
      dirs = [mkdtempSync(join(tmpdir(), "platform-pg-a-")), mkdtempSync(join(tmpdir(), "platform-pg-b-"))];
      // Started one after the other here; test/store/store-postgres.test.ts races the migrations themselves.
      a = await startServeProcess({ PLATFORM_DATA_DIR: dirs[0]!, ...env });
      b = await startServeProcess({ PLATFORM_DATA_DIR: dirs[1]!, ...env });
      token = await a.adminToken();
    });
    after(async () => {
      for (const srv of [a, b]) if (srv?.running()) assert.equal((await srv.stop()).code, 0, srv.output());
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    });

    const call = (srv: ServeProcess, method: string, path: string, body?: unknown) =>
      rest(srv.url, method, path, body, { authorization: `Bearer ${token}` });

    test("an administrator token minted once works on both: the signing keys live in the database", async () => {
      assert.equal((await call(a, "GET", "/auth/v1/ok")).status, 200);
      assert.equal((await call(b, "GET", "/auth/v1/ok")).status, 200);
    });

    test("100 rounds: written on one, read at once on the other, lists and counts included", async () => {
      const org = (await call(a, "POST", "/iam/v2beta1/groups", { name: "two process org" })).body;
      for (let i = 0; i < 100; i++) {
        const [writer, reader] = i % 2 === 0 ? [a, b] : [b, a];
        const created = await call(writer, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: `folder ${i}` });
        assert.equal(created.status, 200, JSON.stringify(created.body));
        assert.equal((await call(reader, "GET", `/iam/v2beta1/groups/${created.body.uid}`)).status, 200, `round ${i}`);
        await call(writer, "PATCH", `/iam/v2beta1/groups/${created.body.uid}`, { name: `renamed ${i}` });
        assert.equal((await call(reader, "GET", `/iam/v2beta1/groups/${created.body.uid}`)).body.name, `renamed ${i}`);
        assert.equal(
          (await call(reader, "GET", `/iam/v2beta1/groups?uidp.children_of=${org.uid}&page_size=1`)).body.totalCount,
          String(i + 1),
        );
      }
    });

    test("a role binding deleted through one process stops granting on the other at the next request", async () => {
      const org = (await call(a, "POST", "/iam/v2beta1/groups", { name: "two process authz org" })).body;
      const viewer = (await call(a, "GET", "/iam/v2beta1/roles?name=viewer")).body.roles[0].uid as string;
      const person = (await call(a, "GET", "/iam/v2beta1/identities:lookupIdentity?issuer=https://people.example&subject=p1")).body
        .uid as string;
      const binding = (await call(a, "POST", `/iam/v2beta1/roleBindings/${org.uid}`, { identityUid: person, roleUid: viewer })).body;
      // The binding is visible to B's authorization at once (B caches grants by the version it reads per request).
      const listed = await call(b, "GET", `/iam/v2beta1/roleBindings?identity=${person}`);
      assert.equal(listed.body.roleBindings.length, 1);
      assert.equal((await call(b, "DELETE", `/iam/v2beta1/roleBindings/${binding.uid}`)).status, 200);
      assert.equal((await call(a, "GET", `/iam/v2beta1/roleBindings?identity=${person}`)).body.roleBindings.length, 0);
    });

    test("SIGKILL of one process under load: every acknowledged write is there, and the other keeps serving", async (t) => {
      const org = (await call(b, "POST", "/iam/v2beta1/groups", { name: "kill org" })).body;
      const acknowledged: string[] = [];
      let stop = false;
      const load = async (srv: ServeProcess, n: number) => {
        for (let i = 0; !stop; i++) {
          try {
            const res = await call(srv, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: `load ${n} ${i}` });
            if (res.status === 200) acknowledged.push(res.body.uid as string);
          } catch {
            if (srv === a) return; // A is gone: its connections fail.
          }
        }
      };
      const workers = [load(a, 0), load(a, 1), load(b, 2), load(b, 3)];
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      process.kill(a.pid, "SIGKILL");
      await new Promise((resolve) => setTimeout(resolve, 500));
      stop = true;
      await Promise.all(workers);
      assert.ok(acknowledged.length > 20, `${acknowledged.length} writes acknowledged`);
      const listed = await call(b, "GET", `/iam/v2beta1/groups?uidp.children_of=${org.uid}&page_size=200`);
      let seen: string[] = listed.body.groups.map((g: { uid: string }) => g.uid);
      let next = listed.body.nextPageToken as string | undefined;
      while (next) {
        const page = await call(b, "GET", `/iam/v2beta1/groups?uidp.children_of=${org.uid}&page_size=200&page_token=${next}`);
        seen = seen.concat(page.body.groups.map((g: { uid: string }) => g.uid));
        next = page.body.nextPageToken;
      }
      const missing = acknowledged.filter((uid) => !seen.includes(uid));
      t.diagnostic(`${acknowledged.length} creates acknowledged by the two processes, ${missing.length} missing after SIGKILL of one`);
      assert.deepEqual(missing, [], "no acknowledged write is lost");
      assert.equal((await call(b, "GET", "/healthz")).status, 200);
    });
  });
}
