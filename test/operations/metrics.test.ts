/**
 * /metrics after real calls: Prometheus text with the request counters by
 * service, method, protocol and code, latency histograms, in-flight gauges,
 * store query time, token cache hits and misses, and process metrics.
 */
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { Authenticator } from "../../src/auth/principal.js";
import { testTransport } from "../support/connect.js";
import { grpcClient } from "../support/grpc.js";
import { find, METRICS_AUTH, METRICS_ENV, parseExposition, valueOf as value } from "../support/metrics-scrape.js";
import { createGroup, mintAdminToken, rest, startTestServer, type TestServer } from "../support/server.js";

const GROUPS = "platformapi.iam.v2beta1.GroupsService";
const MISSING = "0123456789abcdef0123456789abcdef01234567";

/** GET /metrics with the metrics token, as Prometheus is set up to scrape. */
async function scrape(url: string) {
  const res = await fetch(`${url}/metrics`, { headers: METRICS_AUTH });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  return parseExposition(await res.text());
}

let srv: TestServer;
before(async () => {
  srv = await startTestServer({ env: METRICS_ENV });
});
after(async () => {
  await srv.close();
});

test("after REST ok, REST not found, gRPC ok and Connect ok calls, /metrics counts each by service, method, protocol and code", async () => {
  // Exactly these authenticated calls, each with the administrator token.
  const org = await createGroup(srv.url, null, "metrics org"); // REST CreateGroup ok
  for (let i = 0; i < 2; i++) assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/groups/${MISSING}`)).status, 404); // REST GetGroup not_found x2
  const grpc = grpcClient(GroupsService, srv.port);
  const connect = testTransport("connect-h1", srv.url);
  const grpcWeb = testTransport("grpc-web-h1", srv.url);
  try {
    for (let i = 0; i < 3; i++) assert.equal((await grpc.call("getGroup", { uid: org.uid })).uid, org.uid); // gRPC GetGroup ok x3
    assert.equal((await createClient(GroupsService, connect.transport).getGroup({ uid: org.uid })).uid, org.uid); // Connect GetGroup ok
    assert.equal((await createClient(GroupsService, grpcWeb.transport).listGroups({})).groups.length, 1); // gRPC-Web ListGroups ok
  } finally {
    grpc.close();
    connect.close();
    grpcWeb.close();
  }
  // An unauthenticated call: counted too.
  assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: "" })).status, 401);

  const { samples, types } = await scrape(srv.url);
  assert.equal(types.get("platform_requests_total"), "counter");
  const requests = find(samples, "platform_requests_total");
  const counted = Object.fromEntries(
    requests.map((s) => [`${s.labels.service}/${s.labels.method} ${s.labels.protocol} ${s.labels.code}`, s.value]),
  );
  assert.deepEqual(counted, {
    [`${GROUPS}/CreateGroup rest ok`]: 1,
    [`${GROUPS}/GetGroup rest not_found`]: 2,
    [`${GROUPS}/GetGroup grpc ok`]: 3,
    [`${GROUPS}/GetGroup connect ok`]: 1,
    [`${GROUPS}/ListGroups grpc-web ok`]: 1,
    [`${GROUPS}/ListGroups rest unauthenticated`]: 1,
  });

  // A latency histogram per service, method and protocol: cumulative buckets ending at +Inf = count.
  assert.equal(types.get("platform_request_duration_seconds"), "histogram");
  const series: [string, string, number][] = [
    ["CreateGroup", "rest", 1],
    ["GetGroup", "rest", 2],
    ["GetGroup", "grpc", 3],
    ["GetGroup", "connect", 1],
    ["ListGroups", "grpc-web", 1],
    ["ListGroups", "rest", 1],
  ];
  for (const [method, protocol, count] of series) {
    const labels = { service: GROUPS, method, protocol };
    const buckets = find(samples, "platform_request_duration_seconds_bucket", labels);
    assert.ok(buckets.length >= 5, `buckets of ${method} ${protocol}`);
    const bounds = buckets.map((b) => (b.labels.le === "+Inf" ? Infinity : Number(b.labels.le)));
    assert.deepEqual(
      bounds,
      [...bounds].sort((a, b) => a - b),
      "bucket bounds ascend",
    );
    assert.equal(bounds.at(-1), Infinity);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i]!.value >= buckets[i - 1]!.value, "cumulative buckets");
    assert.equal(buckets.at(-1)!.value, count, `+Inf bucket of ${method} ${protocol}`);
    assert.equal(value(samples, "platform_request_duration_seconds_count", labels), count);
    assert.ok(value(samples, "platform_request_duration_seconds_sum", labels) >= 0);
  }

  // In flight: a gauge per protocol, back to zero once every call has finished.
  assert.equal(types.get("platform_requests_in_flight"), "gauge");
  for (const protocol of ["rest", "grpc", "connect", "grpc-web"])
    assert.equal(value(samples, "platform_requests_in_flight", { protocol }), 0, protocol);

  // Store query time: the group creation and lookups went through the store.
  assert.equal(types.get("platform_store_query_duration_seconds"), "histogram");
  assert.ok(value(samples, "platform_store_query_duration_seconds_count", { part: "groups", operation: "create" }) >= 1);
  assert.ok(value(samples, "platform_store_query_duration_seconds_count", { part: "groups", operation: "get" }) >= 5);
  assert.ok(find(samples, "platform_store_query_duration_seconds_bucket", { part: "groups", operation: "get", le: "+Inf" }).length === 1);

  // Token cache: one token, verified once (miss), then served from the cache for the 7 later calls.
  assert.equal(types.get("platform_token_cache_total"), "counter");
  assert.equal(value(samples, "platform_token_cache_total", { result: "miss" }), 1);
  assert.equal(value(samples, "platform_token_cache_total", { result: "hit" }), 7);

  // Process metrics, with the platform_ prefix.
  assert.ok(value(samples, "platform_process_cpu_seconds_total") > 0);
  assert.ok(value(samples, "platform_process_resident_memory_bytes") > 0);
  assert.ok(value(samples, "platform_process_start_time_seconds") > 0);
  assert.ok(find(samples, "platform_nodejs_heap_size_used_bytes").length === 1);
  assert.ok(find(samples, "platform_nodejs_eventloop_lag_seconds").length === 1);

  // Scraping is not an RPC: a second scrape adds no request samples.
  const again = await scrape(srv.url);
  assert.deepEqual(
    find(again.samples, "platform_requests_total").map((s) => s.value),
    requests.map((s) => s.value),
  );
});

test("a fresh token is one more cache miss; a forged one is a miss and counted as unauthenticated", async () => {
  const before = (await scrape(srv.url)).samples;
  const fresh = await mintAdminToken(srv.server);
  for (let i = 0; i < 3; i++)
    assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${fresh}` })).status, 200);
  const forged = `${fresh.slice(0, fresh.lastIndexOf(".") + 1)}${"A".repeat(86)}`;
  assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${forged}` })).status, 401);
  const afterwards = (await scrape(srv.url)).samples;
  const delta = (name: string, labels: Record<string, string>) =>
    value(afterwards, name, labels) - (find(before, name, labels)[0]?.value ?? 0);
  assert.equal(delta("platform_token_cache_total", { result: "miss" }), 2);
  assert.equal(delta("platform_token_cache_total", { result: "hit" }), 2);
  assert.equal(delta("platform_requests_total", { service: GROUPS, method: "ListGroups", protocol: "rest", code: "ok" }), 3);
  assert.equal(delta("platform_requests_total", { service: GROUPS, method: "ListGroups", protocol: "rest", code: "unauthenticated" }), 1);
});

test("platform_requests_in_flight counts the calls being handled now, per protocol", async () => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let entered = 0;
  let allEntered!: () => void;
  const inside = new Promise<void>((resolve) => (allEntered = resolve));
  const HELD = 3;
  const decorate = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      if (++entered === HELD) allEntered();
      await gate;
      return inner.authenticate(headers);
    },
  });
  const srv = await startTestServer({ backend: "sqlite", env: METRICS_ENV, decorateAuthenticator: decorate });
  const { server } = srv;
  const grpc = grpcClient(GroupsService, server.port);
  try {
    const held = [
      rest(server.url, "GET", "/iam/v2beta1/groups"),
      rest(server.url, "GET", "/iam/v2beta1/groups"),
      grpc.call("listGroups", {}),
    ];
    await inside;
    const during = (await scrape(server.url)).samples;
    assert.equal(value(during, "platform_requests_in_flight", { protocol: "rest" }), 2);
    assert.equal(value(during, "platform_requests_in_flight", { protocol: "grpc" }), 1);
    release();
    await Promise.all(held);
    const done = (await scrape(server.url)).samples;
    assert.equal(value(done, "platform_requests_in_flight", { protocol: "rest" }), 0);
    assert.equal(value(done, "platform_requests_in_flight", { protocol: "grpc" }), 0);
  } finally {
    release();
    grpc.close();
    await srv.close();
  }
});

test("a call whose deadline passed before the handler answered is counted and logged as deadline_exceeded, not ok", async () => {
  // Every marked call spends longer authenticating than its 3 s deadline (timed from its arrival, which is before
  // authentication starts); 3 s is time enough for the request to reach the handler on a loaded machine. The group
  // exists, so the handler itself succeeds.
  const decorate = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      if (headers.get("x-deadline-test") !== null) await new Promise((resolve) => setTimeout(resolve, 3100));
      return inner.authenticate(headers);
    },
  });
  const lines: string[] = [];
  const logStream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(
        ...chunk
          .toString("utf8")
          .split("\n")
          .filter((l) => l !== ""),
      );
      done();
    },
  });
  const srv = await startTestServer({
    backend: "sqlite",
    env: { LOG_LEVEL: "info", ...METRICS_ENV },
    decorateAuthenticator: decorate,
    logStream,
  });
  const { server } = srv;
  try {
    const org = await createGroup(server.url, null, "deadline org");
    const kinds = ["connect-h1", "grpc-web-h1", "grpc-h2c"] as const;
    for (const kind of kinds) {
      const t = testTransport(kind, server.url);
      try {
        const err = await createClient(GroupsService, t.transport)
          .getGroup({ uid: org.uid }, { timeoutMs: 3000, headers: { "x-deadline-test": "1" } })
          .then(
            () => assert.fail(`${kind}: the deadline passes first`),
            (e: unknown) => ConnectError.from(e),
          );
        assert.equal(err.code, Code.DeadlineExceeded, kind);
      } finally {
        t.close();
      }
    }
    // The handlers finish after their clients gave up: wait for all three to be counted.
    const counted = () =>
      lines
        .filter((l) => l.includes('"msg":"rpc"') && l.includes("GroupsService/GetGroup"))
        .map((l) => JSON.parse(l) as { protocol: string; code: string });
    for (let waited = 0; counted().length < kinds.length && waited < 60_000; waited += 20)
      await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(
      counted()
        .map((c) => `${c.protocol} ${c.code}`)
        .sort(),
      ["connect deadline_exceeded", "grpc deadline_exceeded", "grpc-web deadline_exceeded"],
    );
    const { samples } = await scrape(server.url);
    for (const protocol of ["connect", "grpc-web", "grpc"]) {
      assert.equal(value(samples, "platform_requests_total", { method: "GetGroup", protocol, code: "deadline_exceeded" }), 1, protocol);
      assert.equal(find(samples, "platform_requests_total", { method: "GetGroup", protocol, code: "ok" }).length, 0, protocol);
    }
  } finally {
    await srv.close();
  }
});
