/**
 * The database stops and comes back under load: calls get UNAVAILABLE
 * (HTTP 503, code 14) with the spec's error body, /readyz says not ready,
 * nothing else breaks, and the server recovers by itself.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { assertRestError } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { pgAvailable, sharedPgCluster, type PgCluster } from "../support/pg-cluster.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

if (!pgAvailable()) {
  test("a PostgreSQL outage", { skip: "PostgreSQL is not installed (apt-get install postgresql)" }, () => {});
} else {
  let srv: TestServer;
  let cluster: PgCluster;
  before(async () => {
    srv = await startTestServer({ backend: "postgres" });
    cluster = await sharedPgCluster();
  });
  after(async () => {
    await srv.close();
  });

  test("PostgreSQL stopped: 503 UNAVAILABLE on REST and gRPC, /readyz 503; started again: served without a restart", async (t) => {
    const org = await createGroup(srv.url, null, "outage org");
    assert.equal((await rest(srv.url, "GET", "/readyz")).status, 200);
    // A clean stop: this cluster runs with fsync off (the durability script covers crashes).
    cluster.stop("fast");
    try {
      for (const path of [`/iam/v2beta1/groups/${org.uid}`, "/iam/v2beta1/groups"]) {
        const res = await rest(srv.url, "GET", path);
        const body = assertRestError(res, 503, 14, "UNAVAILABLE");
        assert.doesNotMatch(JSON.stringify(body), /ECONNREFUSED|postgres|SELECT|at /, "no driver text or stack");
        // Retryable, and said so: RetryInfo, and Retry-After on REST.
        assert.ok(
          (body.details as { "@type": string; retryDelay?: string }[]).some(
            (d) => d["@type"].endsWith("google.rpc.RetryInfo") && d.retryDelay === "1s",
          ),
          JSON.stringify(body),
        );
        assert.equal(res.headers.get("retry-after"), "1");
      }
      assertRestError(await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "during outage" }), 503, 14, "UNAVAILABLE");
      const client = grpcClient(GroupsService, srv.port);
      try {
        const err = await client.call("getGroup", { uid: org.uid }).then(
          () => assert.fail("served"),
          (e: { code: number }) => e,
        );
        assert.equal(err.code, 14);
      } finally {
        client.close();
      }
      assert.equal((await rest(srv.url, "GET", "/readyz")).status, 503);
    } finally {
      cluster.start();
    }
    const started = performance.now();
    let res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`);
    while (res.status !== 200 && performance.now() - started < 30_000) {
      await new Promise((r) => setTimeout(r, 200));
      res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`);
    }
    assert.equal(res.status, 200, JSON.stringify(res.body));
    t.diagnostic(`served again ${Math.round(performance.now() - started)} ms after PostgreSQL was back`);
    assert.equal((await rest(srv.url, "GET", "/readyz")).status, 200);
    assert.equal((await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "after outage" })).status, 200);
  });
}
