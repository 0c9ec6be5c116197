/**
 * Issue 21, "one tenant cannot spend what other tenants need": every call is
 * bounded on its own, and PLATFORM_CALLS_PER_IDENTITY bounds how many one
 * identity makes (a token bucket per identity and process). Past it a call is
 * RESOURCE_EXHAUSTED / 429 with reason RATE_LIMITED, RetryInfo and (REST,
 * Connect) Retry-After, on every protocol, and nothing is done; another
 * identity and the administrator are not held back.
 *
 * No timing is asserted: the limit here is 1 call per second with bursts of 2,
 * so a caller is refused within a few calls unless each took a second.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { ServiceError } from "@grpc/grpc-js";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { createCallRateLimiter } from "../../src/auth/rate-limit.js";
import { RATE_LIMITED } from "../../src/server/wrap.js";
import { assertRestError } from "../support/assertions.js";
import { testTransport, type TransportKind } from "../support/connect.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

/** Calls allowed before a refusal at most, unless every call took a second. */
const ATTEMPTS = 40;

describe("calls per identity (PLATFORM_CALLS_PER_IDENTITY)", () => {
  let srv: TestServer;
  let home: string;
  let viewer: string;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_CALLS_PER_IDENTITY: "1" } });
    home = (await createGroup(srv.url, null, "home")).uid;
    viewer = await builtinRole(srv, "viewer");
  });
  after(() => srv.close());

  const getHome = (caller: Caller) => rest(srv.url, "GET", `/iam/v2beta1/groups/${home}`, undefined, as(caller));

  /** Calls until one is refused; the refusal. */
  async function untilRefused(call: () => Promise<RestResult>): Promise<RestResult> {
    for (let i = 0; i < ATTEMPTS; i++) {
      const res = await call();
      if (res.status !== 200) return res;
    }
    return assert.fail(`${ATTEMPTS} calls in a row were served`);
  }

  test("REST: past the rate 429 RATE_LIMITED with RetryInfo and Retry-After; another identity is served meanwhile", async () => {
    const greedy = await createCaller(srv, home, "greedy", viewer);
    const other = await createCaller(srv, home, "other", viewer);
    const refused = await untilRefused(() => getHome(greedy));
    const body = assertRestError(refused, 429, Code.ResourceExhausted, RATE_LIMITED);
    const info = body.details.find((d: { "@type": string }) => d["@type"].endsWith("ErrorInfo"));
    assert.deepEqual(info.metadata, { quota: "calls_per_identity_per_second", limit: "1" });
    const retry = body.details.find((d: { "@type": string }) => d["@type"].endsWith("RetryInfo"));
    assert.match(retry.retryDelay, /^\d+(\.\d+)?s$/);
    assert.ok(Number(retry.retryDelay.slice(0, -1)) <= 1, `at 1 call per second the wait is at most 1 s: ${retry.retryDelay}`);
    assert.equal(refused.headers.get("retry-after"), "1");
    // The other identity's bucket is its own.
    await ok(getHome(other));
  });

  test("a refused write does nothing", async () => {
    const writer = await createCaller(srv, home, "writer", null);
    let created = 0;
    const refused = await untilRefused(async () => {
      const res = await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: `w ${created}` }, as(writer));
      if (res.status === 200) created++;
      return res;
    });
    assertRestError(refused, 429, Code.ResourceExhausted, RATE_LIMITED);
    const mine = await ok(rest(srv.url, "GET", "/iam/v2beta1/groups?uidp.in_root=true&page_size=200"));
    const theirs = (mine.groups as { name: string }[]).filter((g) => g.name.startsWith("w "));
    assert.equal(theirs.length, created, "only the calls that were served created anything");
  });

  test("gRPC, Connect and gRPC-Web: RESOURCE_EXHAUSTED RATE_LIMITED with RetryInfo", async () => {
    const caller = await createCaller(srv, home, "rpc", viewer);
    const grpc = grpcClient(GroupsService, srv.port, { token: caller.token });
    try {
      let err: ServiceError | undefined;
      for (let i = 0; i < ATTEMPTS && err === undefined; i++)
        err = (await grpc.call("getGroup", { uid: home }).then(
          () => undefined,
          (e: unknown) => e,
        )) as ServiceError | undefined;
      assert.ok(err, "refused");
      assert.equal(err.code, Code.ResourceExhausted);
      const details = grpcStatus(err).details;
      assert.equal((details.find((d) => d.$typeName === "google.rpc.ErrorInfo") as unknown as { reason: string }).reason, RATE_LIMITED);
      assert.ok(details.some((d) => d.$typeName === "google.rpc.RetryInfo"));
    } finally {
      grpc.close();
    }
    for (const kind of ["connect-h1", "grpc-web-h1", "connect-h2c"] as TransportKind[]) {
      const t = testTransport(kind, srv.url, caller.token);
      try {
        const client = createClient(GroupsService, t.transport);
        let err: unknown;
        for (let i = 0; i < ATTEMPTS && err === undefined; i++)
          err = await client.getGroup({ uid: home }).then(
            () => undefined,
            (e: unknown) => e,
          );
        assert.ok(err instanceof ConnectError, kind);
        assert.equal(err.code, Code.ResourceExhausted, kind);
        assert.equal(err.findDetails(ErrorInfoSchema)[0]?.reason, RATE_LIMITED, kind);
        assert.equal(err.findDetails(RetryInfoSchema).length, 1, kind);
      } finally {
        t.close();
      }
    }
  });

  test("a Connect POST's 429 carries Retry-After", async () => {
    const caller = await createCaller(srv, home, "connect-raw", viewer);
    const refused = await untilRefused(async () => {
      const res = await fetch(`${srv.url}/platformapi.iam.v2beta1.GroupsService/GetGroup`, {
        method: "POST",
        headers: { "content-type": "application/json", ...as(caller) },
        body: JSON.stringify({ uid: home }),
      });
      return { status: res.status, body: await res.json(), headers: res.headers };
    });
    assert.equal(refused.status, 429);
    assert.equal(refused.body.code, "resource_exhausted");
    assert.equal(refused.headers.get("retry-after"), "1");
  });

  test("the built-in administrator is not limited", async () => {
    for (let i = 0; i < ATTEMPTS; i++) await ok(rest(srv.url, "GET", `/iam/v2beta1/groups/${home}`));
  });
});

describe("createCallRateLimiter", () => {
  test("a burst, then the rate; a refusal says how long to wait and takes nothing", () => {
    let now = 0;
    const limiter = createCallRateLimiter({ perSecond: 10, burst: 3, now: () => now });
    assert.deepEqual([limiter.take("a"), limiter.take("a"), limiter.take("a")], [0, 0, 0]);
    assert.equal(limiter.take("a"), 100);
    assert.equal(limiter.take("a"), 100, "a refused call is not counted");
    assert.equal(limiter.take("b"), 0, "each caller has its own bucket");
    now = 100;
    assert.equal(limiter.take("a"), 0);
    assert.equal(limiter.take("a"), 100);
    now = 10_000;
    assert.deepEqual(
      [limiter.take("a"), limiter.take("a"), limiter.take("a"), limiter.take("a")],
      [0, 0, 0, 100],
      "refilled to the burst, no more",
    );
  });

  test("holds at most maxKeys callers, forgetting the longest quiet", () => {
    let now = 0;
    const limiter = createCallRateLimiter({ perSecond: 1, burst: 1, now: () => now, maxKeys: 3 });
    for (const caller of ["a", "b", "c"]) limiter.take(caller);
    now = 10;
    assert.ok(limiter.take("a") > 0, "a is used up and now the most recent");
    limiter.take("d");
    assert.equal(limiter.size(), 3);
    assert.ok(limiter.take("a") > 0, "a was kept (b, the longest quiet, was forgotten)");
    assert.equal(limiter.take("b"), 0, "b starts afresh");
  });
});
