/**
 * Every HTTP request writes one line, not only RPCs: a 404 or 405, /docs and
 * its assets, /openapi.json, /.well-known/*, /metrics, and the probes (at
 * debug), with the request id the client saw, method, path without its query
 * string, status, client address (the one a trusted proxy names) and
 * duration. A request that carried an RPC writes its rpc line only; one
 * refused before its call started, or whose client went away first, writes
 * a request line. A request's debug lines carry its request id.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import net from "node:net";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import { within } from "../support/assertions.js";
import { parseLogLines } from "../support/log-lines.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const BOUND_MS = 30_000;

interface LogLine {
  level: number;
  msg: string;
  reqId?: string;
  [key: string]: unknown;
}

let srv: TestServer;
const raw: string[] = [];

const lines = () => parseLogLines<LogLine>(raw.join(""));

/** Waits (a liveness bound) for the lines of reqId to include one that matches, then returns all of them. */
async function linesOf(reqId: string, until: (l: LogLine) => boolean): Promise<LogLine[]> {
  for (let i = 0; i < 3000 && !lines().some((l) => l.reqId === reqId && until(l)); i++) await new Promise((r) => setTimeout(r, 10));
  const found = lines().filter((l) => l.reqId === reqId);
  assert.ok(found.some(until), `a matching line for ${reqId}; lines: ${raw.join("")}`);
  return found;
}

let fences = 0;

/** Waits for the line of a request made now: every line of the requests answered before it has been written. */
async function fence(): Promise<void> {
  const reqId = `req-fence-${++fences}`;
  const res = await fetch(`${srv.url}/no/such/fence`, { headers: { "x-request-id": reqId } });
  await res.arrayBuffer();
  await linesOf(reqId, (l) => l.msg === "request");
}

/** The one request line of reqId (and no other line of that request but its debug lines). */
async function requestLine(reqId: string): Promise<LogLine> {
  await linesOf(reqId, (l) => l.msg === "request");
  await fence();
  const found = lines().filter((l) => l.reqId === reqId);
  const requestLines = found.filter((l) => l.msg === "request" || l.msg === "rpc");
  assert.equal(requestLines.length, 1, `exactly one line for ${reqId}: ${JSON.stringify(found)}`);
  return requestLines[0]!;
}

before(async () => {
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => raw.push(chunk.toString("utf8")));
  srv = await startTestServer({
    // Debug: the probes' lines and the refusal's debug line are written.
    env: { LOG_LEVEL: "debug", PLATFORM_TRUSTED_PROXIES: "127.0.0.1", PLATFORM_METRICS_TOKEN: "metrics-secret-3f9a" },
    logStream,
  });
});
after(async () => {
  await srv.close();
});

test("a request that is no RPC writes one line: request id, method, path, status, client address, duration", async () => {
  const cases: { method: string; path: string; status: number; headers?: Record<string, string>; body?: string }[] = [
    { method: "GET", path: "/no/such/route", status: 404 },
    { method: "PUT", path: "/iam/v2beta1/groups", status: 405 },
    { method: "GET", path: "/docs", status: 200 },
    { method: "GET", path: "/docs/swagger-ui.css", status: 200 },
    { method: "GET", path: "/openapi.json", status: 200 },
    { method: "GET", path: "/.well-known/openid-configuration", status: 200 },
    { method: "GET", path: "/metrics", status: 200, headers: { authorization: "Bearer metrics-secret-3f9a" } },
    { method: "GET", path: "/metrics", status: 401, headers: { authorization: "" } },
  ];
  for (const [i, c] of cases.entries()) {
    const reqId = `req-line-${i}`;
    const res = await fetch(srv.url + c.path, { method: c.method, headers: { "x-request-id": reqId, ...c.headers } });
    await res.arrayBuffer();
    assert.equal(res.status, c.status, `${c.method} ${c.path}`);
    const line = await requestLine(reqId);
    assert.equal(line.level, 30, `${c.path} at info`);
    assert.equal(line.method, c.method);
    assert.equal(line.path, c.path);
    assert.equal(line.status, c.status);
    assert.equal(line.remoteAddress, "127.0.0.1");
    assert.equal(typeof line.durationMs, "number");
    assert.ok((line.durationMs as number) >= 0);
  }
  // The key order of pino's own lines, as the rpc line keeps it.
  assert.deepEqual(Object.keys(await requestLine("req-line-0")), [
    "level",
    "time",
    "pid",
    "hostname",
    "reqId",
    "method",
    "path",
    "status",
    "remoteAddress",
    "durationMs",
    "msg",
  ]);
  assert.ok(!raw.join("").includes("metrics-secret-3f9a"), "the metrics token is not logged");
});

test("the query string, which may carry a token, is left out of the path", async () => {
  const res = await fetch(`${srv.url}/no/such/route?access_token=query-secret-77c1&page=2`, { headers: { "x-request-id": "req-query" } });
  assert.equal(res.status, 404);
  assert.equal((await requestLine("req-query")).path, "/no/such/route");
  assert.ok(!raw.join("").includes("query-secret-77c1"));
});

test("the probes (/healthz, /readyz, grpc.health.v1 over Connect) are logged at debug", async () => {
  const probes: [string, RequestInit][] = [
    ["/healthz", {}],
    ["/readyz", {}],
    ["/grpc.health.v1.Health/Check", { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }],
  ];
  for (const [i, [path, init]] of probes.entries()) {
    const reqId = `req-probe-${i}`;
    const res = await fetch(srv.url + path, { ...init, headers: { ...(init.headers as Record<string, string>), "x-request-id": reqId } });
    assert.equal(res.status, 200, path);
    await res.arrayBuffer();
    const line = await requestLine(reqId);
    assert.equal(line.level, 20, `${path} at debug`);
    assert.equal(line.path, path);
    assert.equal(line.status, 200);
  }
});

test("an RPC writes its rpc line only; a request refused before its call started writes a request line", async () => {
  const ok = await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { "x-request-id": "req-rpc-1" });
  assert.equal(ok.status, 200);
  await linesOf("req-rpc-1", (l) => l.msg === "rpc");
  await fence();
  assert.deepEqual(
    lines()
      .filter((l) => l.reqId === "req-rpc-1")
      .map((l) => l.msg),
    ["rpc"],
    "one rpc line, no request line",
  );

  // Refused by Connect's admission (no token), before the body is read: its rpc line only, too.
  const refused = await fetch(`${srv.url}/platformapi.iam.v2beta1.GroupsService/ListGroups`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-request-id": "req-connect-refused" },
    body: "{}",
  });
  assert.equal(refused.status, 401);
  await refused.arrayBuffer();
  await linesOf("req-connect-refused", (l) => l.msg === "rpc");
  await fence();
  assert.deepEqual(
    lines()
      .filter((l) => l.reqId === "req-connect-refused")
      .filter((l) => l.msg === "rpc" || l.msg === "request")
      .map((l) => `${l.msg} ${l.protocol} ${l.code}`),
    ["rpc connect unauthenticated"],
  );

  // Not JSON: refused by the body parser, before the call's handler runs.
  const bad = await rest(srv.url, "POST", "/iam/v2beta1/groups", "{not json", {
    "content-type": "application/json",
    "x-request-id": "req-bad-json",
  });
  assert.equal(bad.status, 400);
  const line = await requestLine("req-bad-json");
  assert.equal(line.method, "POST");
  assert.equal(line.path, "/iam/v2beta1/groups");
  assert.equal(line.status, 400);
});

test("the client address is the one a trusted proxy names", async () => {
  const res = await fetch(`${srv.url}/no/such/route`, { headers: { "x-request-id": "req-proxied", "x-forwarded-for": "203.0.113.7" } });
  assert.equal(res.status, 404);
  assert.equal((await requestLine("req-proxied")).remoteAddress, "203.0.113.7");
});

test("a request whose client went away before the answer writes its line, with status 499", async () => {
  const socket = net.connect(srv.port, "127.0.0.1");
  await once(socket, "connect");
  let received = "";
  const continued = new Promise<void>((resolve) =>
    socket.setEncoding("latin1").on("data", (s: string) => {
      received += s;
      if (received.includes("100 Continue")) resolve();
    }),
  );
  // Half a body: the request waits for the rest, and its client goes away.
  socket.write(
    `POST /iam/v2beta1/groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${srv.adminToken}\r\nExpect: 100-continue\r\n` +
      `Content-Type: application/json\r\nContent-Length: 100\r\nX-Request-Id: req-gone\r\n\r\n{"name":`,
  );
  // The interim answer says the server has the request.
  await within(BOUND_MS, continued, "100 Continue");
  socket.destroy();
  const line = await requestLine("req-gone");
  assert.equal(line.status, 499);
  assert.equal(line.path, "/iam/v2beta1/groups");
});

test("a request's debug lines carry its request id: a refused bearer token", async () => {
  const forged = `${srv.adminToken.slice(0, -8)}AAAAAAAA`;
  const res = await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, {
    authorization: `Bearer ${forged}`,
    "x-request-id": "req-forged",
  });
  assert.equal(res.status, 401);
  await linesOf("req-forged", (l) => l.msg === "rpc");
  await fence();
  const found = lines().filter((l) => l.reqId === "req-forged");
  const refused = found.find((l) => l.msg === "bearer token refused")!;
  assert.equal(refused.level, 20);
  assert.equal(typeof refused.reason, "string");
  assert.deepEqual(
    found.filter((l) => l.msg === "rpc" || l.msg === "request").map((l) => `${l.msg} ${l.code}`),
    ["rpc unauthenticated"],
    "refused by admission: its rpc line, no request line",
  );
  assert.ok(!raw.join("").includes(forged), "the token is not logged");
});

test("native gRPC streams grpc-js serves outside the API (health, an unknown method) write a request line with their code", async () => {
  const grpc = await import("@grpc/grpc-js");
  const client = new grpc.Client(new URL(srv.url).host, grpc.credentials.createInsecure());
  // Raw bytes both ways: an empty HealthCheckRequest is checked on the server, an unknown method answered UNIMPLEMENTED.
  const call = (path: string, reqId: string) =>
    new Promise<number>((resolve) => {
      const metadata = new grpc.Metadata();
      metadata.set("x-request-id", reqId);
      client.makeUnaryRequest(
        path,
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.alloc(0),
        metadata,
        (err) => resolve(err?.code ?? 0),
      );
    });
  try {
    assert.equal(await call("/grpc.health.v1.Health/Check", "req-native-health"), 0);
    assert.equal(await call("/platformapi.iam.v2beta1.NoSuchService/Nothing", "req-native-unknown"), 12);
    const health = await requestLine("req-native-health");
    assert.equal(health.level, 20, "health checks at debug");
    assert.deepEqual([health.method, health.path, health.status, health.code], ["POST", "/grpc.health.v1.Health/Check", 200, "ok"]);
    assert.equal(health.remoteAddress, "127.0.0.1");
    const unknown = await requestLine("req-native-unknown");
    assert.equal(unknown.level, 30);
    assert.deepEqual([unknown.path, unknown.code], ["/platformapi.iam.v2beta1.NoSuchService/Nothing", "unimplemented"]);
    // An API call answered before its handler ran (a message that does not decode) writes a request line; one that
    // reached its handler writes its rpc line only.
    const getGroup = "/platformapi.iam.v2beta1.GroupsService/GetGroup";
    const undecodable = await new Promise<number>((resolve) => {
      const metadata = new grpc.Metadata();
      metadata.set("x-request-id", "req-native-undecodable");
      client.makeUnaryRequest(
        getGroup,
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0xff, 0xff, 0xff]),
        metadata,
        (err) => resolve(err?.code ?? 0),
      );
    });
    assert.notEqual(undecodable, 0);
    const early = await requestLine("req-native-undecodable");
    assert.deepEqual([early.msg, early.path, early.level], ["request", getGroup, 30]);
    assert.notEqual(early.code, "ok");
    assert.equal(await call(getGroup, "req-native-handled"), 16, "no token: UNAUTHENTICATED from the handler's wrapper");
    await linesOf("req-native-handled", (l) => l.msg === "rpc");
    await fence();
    assert.deepEqual(
      lines()
        .filter((l) => l.reqId === "req-native-handled" && l.level >= 30)
        .map((l) => l.msg),
      ["rpc"],
    );
  } finally {
    client.close();
  }
});
