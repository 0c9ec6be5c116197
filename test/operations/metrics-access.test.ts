/**
 * Who may read /metrics: the numbers tell an outsider the server's load, its
 * callers' error rates and its tenants' activity, so the public port does not
 * serve them to anonymous callers unless the operator says so.
 * - Default (no setting): every scrape of the public port is refused, 403
 *   PERMISSION_DENIED with one ErrorInfo (METRICS_NOT_PUBLIC) naming what the
 *   operator can set, whatever credential is sent, and no other protocol's
 *   path (h2c, native gRPC, Connect, gRPC-Web) serves the numbers either.
 * - PLATFORM_METRICS_TOKEN: that bearer token only; 401 with a challenge otherwise.
 * - PLATFORM_METRICS_PUBLIC=on: anyone, as before this change.
 * - PLATFORM_METRICS_ADDR: the public port has no /metrics; the address of its
 *   own serves anyone who reaches it, or the token's holders when one is set.
 * Each server says at start which it is, never printing the token; the
 * contradictory pairs refuse to start. Worker mode: test/operations/metrics-cluster.test.ts.
 */
import assert from "node:assert/strict";
import http2 from "node:http2";
import { Writable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config.js";
import { assertRestError } from "../support/assertions.js";
import { getFresh, parseExposition, valueOf } from "../support/metrics-scrape.js";
import { createGroup, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const TOKEN = "access-test-metrics-token-5b0e";

/** A server started with env, and the JSON lines it logged. */
async function loggedServer(env: Record<string, string>): Promise<{ srv: TestServer; lines: Record<string, unknown>[] }> {
  const lines: Record<string, unknown>[] = [];
  // Written synchronously as pino writes, so every start-up line is here once the server has started.
  const logStream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString("utf8").split("\n")) if (line.startsWith("{")) lines.push(JSON.parse(line));
      done();
    },
  });
  const srv = await startTestServer({ env: { LOG_LEVEL: "info", ...env }, logStream });
  return { srv, lines };
}

/** The start-up line about metrics (one, whichever the mode). */
function metricsNote(lines: Record<string, unknown>[]): { msg: string; metricsAccess: string; metrics?: string } {
  const notes = lines.filter((l) => "metricsAccess" in l);
  assert.equal(notes.length, 1, JSON.stringify(lines));
  return notes[0] as { msg: string; metricsAccess: string; metrics?: string };
}

/** GET (or HEAD) /metrics on the public port over HTTP/1.1 (with a query string if given). */
async function scrape(url: string, headers: Record<string, string> = {}, method = "GET", query = "") {
  const res = await fetch(`${url}/metrics${query}`, { method, headers });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A REST-shaped result from a scrape, for assertRestError. */
function asRest(res: { status: number; headers: Headers; text: string }): RestResult {
  return { status: res.status, headers: res.headers, body: JSON.parse(res.text) };
}

/** One request over h2c on a session of its own: status, grpc-status (headers or trailers) and body. */
async function h2(url: string, headers: http2.OutgoingHttpHeaders, body?: Buffer) {
  const session = http2.connect(url);
  session.on("error", () => {});
  try {
    return await new Promise<{ status: number; grpcStatus?: string; text: string }>((resolve, reject) => {
      const req = session.request(headers);
      let status = 0;
      let grpcStatus: string | undefined;
      const parts: Buffer[] = [];
      req.on("response", (h) => ((status = Number(h[":status"])), (grpcStatus = h["grpc-status"] as string | undefined)));
      req.on("trailers", (t) => (grpcStatus ??= t["grpc-status"] as string | undefined));
      req.on("data", (c: Buffer) => parts.push(c));
      req.on("error", reject);
      req.on("close", () => resolve({ status, grpcStatus, text: Buffer.concat(parts).toString("utf8") }));
      req.end(body);
    });
  } finally {
    session.close();
  }
}

/** An exposition with the request counter in it. */
function assertExposition(text: string): void {
  assert.match(text, /^# TYPE platform_requests_total counter$/m);
  parseExposition(text);
}

describe("no metrics setting: /metrics is private on the public port", () => {
  let srv: TestServer;
  let lines: Record<string, unknown>[];
  before(async () => {
    ({ srv, lines } = await loggedServer({}));
    await createGroup(srv.url, null, "private metrics org");
  });
  after(() => srv.close());

  test("the start-up line says that metrics are private and which settings open them", () => {
    const note = metricsNote(lines);
    assert.equal(note.metricsAccess, "private");
    assert.match(note.msg, /^metrics are private: /);
    for (const name of ["PLATFORM_METRICS_TOKEN", "PLATFORM_METRICS_ADDR", "PLATFORM_METRICS_PUBLIC=on"])
      assert.ok(note.msg.includes(name), name);
  });

  test("an anonymous scrape is 403 with one ErrorInfo in the spec's error shape, naming what to set and no number", async () => {
    const res = await scrape(srv.url);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const body = assertRestError(asRest(res), 403, 7, "METRICS_NOT_PUBLIC");
    assert.deepEqual(Object.keys(body).sort(), ["code", "details", "message"]);
    assert.equal(body.details.length, 1);
    assert.deepEqual(body.details[0], {
      "@type": "type.googleapis.com/google.rpc.ErrorInfo",
      reason: "METRICS_NOT_PUBLIC",
      domain: "platform.api",
    });
    assert.match(body.message, /^Permission denied: /);
    for (const name of ["PLATFORM_METRICS_TOKEN", "PLATFORM_METRICS_ADDR", "PLATFORM_METRICS_PUBLIC=on"])
      assert.ok(body.message.includes(name), name);
    assert.doesNotMatch(res.text, /platform_|process_|nodejs_/);
    assert.equal(res.headers.get("www-authenticate"), null, "no credential is asked for: none would do");
  });

  test("no credential opens it: a bearer guess, the administrator's API token, Basic; HEAD and a query string alike", async () => {
    for (const authorization of ["Bearer guess", `Bearer ${srv.adminToken}`, `Bearer ${TOKEN}`, "Basic YWRtaW46YWRtaW4="]) {
      const res = await scrape(srv.url, { authorization });
      assertRestError(asRest(res), 403, 7, "METRICS_NOT_PUBLIC");
    }
    const head = await scrape(srv.url, {}, "HEAD");
    assert.equal(head.status, 403);
    assert.equal(head.text, "");
    assertRestError(asRest(await scrape(srv.url, {}, "GET", "?name[]=x")), 403, 7, "METRICS_NOT_PUBLIC");
  });

  test("no other protocol's path serves the numbers: h2c GET, native gRPC, Connect POST and GET, gRPC-Web", async () => {
    const overH2 = await h2(srv.url, { ":method": "GET", ":path": "/metrics" });
    assert.equal(overH2.status, 403);
    assert.equal(JSON.parse(overH2.text).details[0].reason, "METRICS_NOT_PUBLIC");
    const emptyMessage = Buffer.from([0, 0, 0, 0, 0]);
    for (const contentType of ["application/grpc", "application/grpc+proto"]) {
      const grpc = await h2(srv.url, { ":method": "POST", ":path": "/metrics", "content-type": contentType, te: "trailers" }, emptyMessage);
      assert.equal(grpc.grpcStatus, "12", `${contentType}: UNIMPLEMENTED`);
      assert.equal(grpc.text, "");
    }
    const connectGet = await h2(srv.url, { ":method": "GET", ":path": "/metrics?connect=v1&encoding=json&message=%7B%7D" });
    assert.equal(connectGet.status, 403);
    for (const [contentType, body] of [
      ["application/json", Buffer.from("{}")],
      ["application/proto", Buffer.alloc(0)],
      ["application/grpc-web+proto", emptyMessage],
    ] as const) {
      for (const res of [
        await h2(srv.url, { ":method": "POST", ":path": "/metrics", "content-type": contentType, "connect-protocol-version": "1" }, body),
        await fetch(`${srv.url}/metrics`, {
          method: "POST",
          headers: { "content-type": contentType, "connect-protocol-version": "1" },
          body,
        }).then(async (r) => ({ status: r.status, text: await r.text() })),
      ]) {
        assert.ok(res.status >= 400, `${contentType}: ${res.status}`);
        assert.doesNotMatch(res.text, /platform_/, contentType);
      }
    }
  });
});

describe("PLATFORM_METRICS_TOKEN: the public port serves /metrics for that bearer token only", () => {
  let srv: TestServer;
  let lines: Record<string, unknown>[];
  before(async () => {
    ({ srv, lines } = await loggedServer({ PLATFORM_METRICS_TOKEN: TOKEN }));
  });
  after(() => srv.close());

  test("the start-up line says so, without the token", () => {
    const note = metricsNote(lines);
    assert.deepEqual(
      { access: note.metricsAccess, msg: note.msg },
      {
        access: "token",
        msg: "metrics on the public port at /metrics, for scrapers sending PLATFORM_METRICS_TOKEN in the Authorization header",
      },
    );
    assert.ok(!JSON.stringify(lines).includes(TOKEN), "the token is never logged");
    assert.doesNotMatch(JSON.stringify(lines), /bearer /i, "nothing in the log looks like an authorization header");
  });

  test("the token is served, over HTTP/1.1 and h2c; none, a wrong one or an API token is 401 with a challenge", async () => {
    const ok = await scrape(srv.url, { authorization: `Bearer ${TOKEN}` });
    assert.equal(ok.status, 200);
    assert.match(ok.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    assertExposition(ok.text);
    const overH2 = await h2(srv.url, { ":method": "GET", ":path": "/metrics", authorization: `Bearer ${TOKEN}` });
    assert.equal(overH2.status, 200);
    assertExposition(overH2.text);

    const anonymous = await scrape(srv.url);
    assertRestError(asRest(anonymous), 401, 16, "UNAUTHENTICATED");
    assert.equal(anonymous.headers.get("www-authenticate"), 'Bearer realm="metrics"');
    for (const authorization of [`Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(1)}`, `Bearer ${srv.adminToken}`, TOKEN]) {
      const res = await scrape(srv.url, { authorization });
      assertRestError(asRest(res), 401, 16, "UNAUTHENTICATED");
      assert.doesNotMatch(res.text, /platform_/);
    }
    const wrong = await scrape(srv.url, { authorization: "Bearer wrong" });
    assert.match(wrong.headers.get("www-authenticate") ?? "", /error="invalid_token"/);
  });
});

describe("PLATFORM_METRICS_PUBLIC=on: the operator opens /metrics to anyone on the public port", () => {
  let srv: TestServer;
  let lines: Record<string, unknown>[];
  before(async () => {
    ({ srv, lines } = await loggedServer({ PLATFORM_METRICS_PUBLIC: "on" }));
  });
  after(() => srv.close());

  test("the start-up line says so, and an anonymous scrape is served", async () => {
    const note = metricsNote(lines);
    assert.deepEqual(
      { access: note.metricsAccess, msg: note.msg },
      { access: "anyone", msg: "metrics on the public port at /metrics, for anyone (PLATFORM_METRICS_PUBLIC=on)" },
    );
    await createGroup(srv.url, null, "public metrics org");
    const res = await scrape(srv.url);
    assert.equal(res.status, 200);
    assertExposition(res.text);
    assert.equal(valueOf(parseExposition(res.text).samples, "platform_requests_total", { method: "CreateGroup", code: "ok" }), 1);
  });
});

describe("PLATFORM_METRICS_ADDR: /metrics on an address of its own, none on the public port", () => {
  test("without a token the address serves anyone; the public port answers 404 for /metrics, with no numbers", async () => {
    const { srv, lines } = await loggedServer({ PLATFORM_METRICS_ADDR: "127.0.0.1:0" });
    try {
      const url = srv.server.metricsUrl!;
      const note = metricsNote(lines);
      assert.deepEqual(
        { access: note.metricsAccess, metrics: note.metrics, msg: note.msg },
        {
          access: "anyone",
          metrics: url,
          msg: `metrics on ${url}, for anyone who reaches that address; the public port serves no /metrics`,
        },
      );
      const res = await getFresh(url);
      assert.equal(res.status, 200);
      assertExposition(res.text);
      for (const headers of [{}, { authorization: `Bearer ${TOKEN}` }] as Record<string, string>[]) {
        const publicRes = await scrape(srv.url, headers);
        assertRestError(asRest(publicRes), 404, 5, "ROUTE_NOT_FOUND");
      }
    } finally {
      await srv.close();
    }
  });

  test("with a token the address wants it too", async () => {
    const { srv, lines } = await loggedServer({ PLATFORM_METRICS_ADDR: "127.0.0.1:0", PLATFORM_METRICS_TOKEN: TOKEN });
    try {
      const url = srv.server.metricsUrl!;
      assert.equal(
        metricsNote(lines).msg,
        `metrics on ${url}, for scrapers sending PLATFORM_METRICS_TOKEN in the Authorization header; the public port serves no /metrics`,
      );
      const anonymous = await getFresh(url);
      assert.equal(anonymous.status, 401);
      assert.equal(JSON.parse(anonymous.text).details[0].reason, "UNAUTHENTICATED");
      assert.equal((await getFresh(url, { authorization: "Bearer wrong" })).status, 401);
      const ok = await getFresh(url, { authorization: `Bearer ${TOKEN}` });
      assert.equal(ok.status, 200);
      assertExposition(ok.text);
    } finally {
      await srv.close();
    }
  });
});

test("PLATFORM_METRICS_PUBLIC=on with a token or a metrics address is a start-up problem naming both settings", () => {
  const problems = (env: Record<string, string>) => {
    try {
      loadConfig(env);
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
    return [];
  };
  assert.deepEqual(problems({ PLATFORM_METRICS_PUBLIC: "on", PLATFORM_METRICS_TOKEN: TOKEN }), [
    "PLATFORM_METRICS_PUBLIC=on serves /metrics without a token, but PLATFORM_METRICS_TOKEN is set: set one of them",
  ]);
  assert.deepEqual(problems({ PLATFORM_METRICS_PUBLIC: "yes", PLATFORM_METRICS_ADDR: "127.0.0.1:9464" }), [
    "PLATFORM_METRICS_PUBLIC=on serves /metrics on the public port, but PLATFORM_METRICS_ADDR moves it to its own address: set one of them",
  ]);
  // Off, it contradicts nothing.
  assert.deepEqual(
    problems({ PLATFORM_METRICS_PUBLIC: "off", PLATFORM_METRICS_TOKEN: TOKEN, PLATFORM_METRICS_ADDR: "127.0.0.1:9464" }),
    [],
  );
  assert.equal(loadConfig({}).metricsPublic, false);
});
