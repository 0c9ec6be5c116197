/**
 * Issue 21, item 11 (connection pinning) and item 4's last part (pipelined
 * requests): open connections are capped per client address and in total, a
 * connection over a cap is reset on arrival and counted; an unauthenticated
 * Health/Watch stream ends at its bound so its connection can idle out; an
 * HTTP/1.1 connection cannot queue more than MAX_PIPELINED_REQUESTS requests.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http2 from "node:http2";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { Health, HealthCheckRequestSchema, HealthCheckResponseSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { DEFAULT_TIMEOUTS } from "../../src/server/http/one-port.js";
import { MAX_PIPELINED_REQUESTS } from "../../src/server/http/pipelining.js";
import { within } from "../support/assertions.js";
import { testTransport, type TransportKind } from "../support/connect.js";
import { requestHealthWatch } from "../support/health-watch.js";
import { METRICS_AUTH, METRICS_ENV } from "../support/metrics-scrape.js";
import { startTestServer, type TestServer } from "../support/server.js";

const HEALTHZ = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

/** Complete HTTP/1.1 answers with status 200 in what a socket received. */
const answers = (received: string) => (received.match(/HTTP\/1\.1 200 OK\r\n/g) ?? []).length;

/**
 * A raw TCP connection from localAddress (all of 127.0.0.0/8 is loopback on
 * Linux, each address another client) that sends GET /healthz and keeps the
 * connection open. Resolves "served" once the answer arrives, "reset" when
 * the server closes it first: the gate decides before anything is read.
 */
async function holdConnection(port: number, localAddress: string, held: net.Socket[]): Promise<"served" | "reset"> {
  const socket = net.connect({ port, host: "127.0.0.1", localAddress });
  socket.on("error", () => {});
  held.push(socket);
  let received = "";
  return within(
    30_000,
    new Promise((resolve) => {
      socket.on("data", (chunk: Buffer) => {
        received += chunk.toString("latin1");
        if (answers(received) > 0) resolve("served");
      });
      socket.on("close", () => resolve(answers(received) > 0 ? "served" : "reset"));
      socket.once("connect", () => socket.write(HEALTHZ));
    }),
    `a connection from ${localAddress}`,
  );
}

/** Opens count connections from localAddress one after the other (so the caps see them in order) and tallies the outcomes. */
async function holdConnections(port: number, localAddress: string, count: number, held: net.Socket[]) {
  const tally = { served: 0, reset: 0 };
  for (let i = 0; i < count; i++) tally[await holdConnection(port, localAddress, held)]++;
  return tally;
}

/** A counter's value in the server's /metrics (read through fastify's inject: every socket slot may be taken). */
async function metric(srv: TestServer, series: string): Promise<number> {
  const res = await srv.server.app.inject({ method: "GET", url: "/metrics", headers: METRICS_AUTH });
  assert.equal(res.statusCode, 200, res.body);
  const text = res.body;
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

describe("connections are capped per client address and in total", () => {
  let srv: TestServer;
  const held: net.Socket[] = [];
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_MAX_CONNECTIONS: "10", PLATFORM_MAX_CONNECTIONS_PER_ADDRESS: "4", ...METRICS_ENV } });
  });
  after(async () => {
    for (const s of held) s.destroy();
    await srv.close();
  });

  test("past 4 from one address the extra are reset; other addresses are served; past 10 in all, anyone's is reset", async () => {
    assert.deepEqual(await holdConnections(srv.port, "127.0.0.1", 6, held), { served: 4, reset: 2 }, "127.0.0.1");
    assert.deepEqual(await holdConnections(srv.port, "127.0.0.2", 4, held), { served: 4, reset: 0 }, "127.0.0.2, while .1 is at its cap");
    assert.deepEqual(await holdConnections(srv.port, "127.0.0.3", 3, held), { served: 2, reset: 1 }, "127.0.0.3, up to 10 in all");
    assert.equal(await metric(srv, 'platform_connections_refused_total{cap="per_address"}'), 2);
    assert.equal(await metric(srv, 'platform_connections_refused_total{cap="total"}'), 1);

    // Closed connections give their places back (once the server has seen them close).
    for (const s of held.splice(0)) s.destroy();
    await within(
      30_000,
      (async () => {
        while ((await holdConnections(srv.port, "127.0.0.1", 1, held)).served === 0) await new Promise((r) => setTimeout(r, 50));
      })(),
      "a new connection from 127.0.0.1 once the others closed",
    );
  });
});

/** A test server with env whose idle HTTP/2 connections end after 300 ms. */
const startShortIdleServer = (env: Record<string, string>) => startTestServer({ env, timeouts: { ...DEFAULT_TIMEOUTS, http2Idle: 300 } });

/** An h2c session to port (its errors ignored: the test reads what ends it) and its GOAWAY, once it comes. */
function h2cSession(port: number) {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  return { session, goaway: once(session, "goaway") };
}

describe("an unauthenticated Health/Watch stream ends at its bound (PLATFORM_HEALTH_WATCH_MAX_MS)", () => {
  const WATCH_MAX_MS = 300;
  let srv: TestServer;
  before(async () => {
    srv = await startShortIdleServer({ PLATFORM_HEALTH_WATCH_MAX_MS: String(WATCH_MAX_MS) });
  });
  after(() => srv.close());

  test("native gRPC: SERVING, then status OK after the bound, and the idle connection then gets GOAWAY", async () => {
    const { session, goaway } = h2cSession(srv.port);
    try {
      const started = performance.now();
      const req = requestHealthWatch(session);
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      const [trailers] = (await within(30_000, once(req, "trailers"), "the Watch stream's trailers")) as [http2.IncomingHttpHeaders];
      assert.equal(trailers["grpc-status"], "0");
      assert.ok(performance.now() - started >= WATCH_MAX_MS - 5, "not before its bound");
      const body = Buffer.concat(chunks);
      assert.equal(body.readUInt32BE(1), body.length - 5, "exactly one message");
      assert.equal(fromBinary(HealthCheckResponseSchema, body.subarray(5)).status, 1, "SERVING");
      // Nothing holds the connection any more: the idle timeout closes it.
      const [code] = (await within(30_000, goaway, "GOAWAY on the idle connection")) as [number];
      assert.equal(code, http2.constants.NGHTTP2_NO_ERROR);
    } finally {
      session.destroy();
    }
  });

  test("a grpc-js client's Watch ends with status OK", async () => {
    const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
    try {
      const call = client.makeServerStreamRequest(
        "/grpc.health.v1.Health/Watch",
        (b: Buffer) => b,
        (b: Buffer) => fromBinary(HealthCheckResponseSchema, b),
        Buffer.from(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema))),
      );
      const statuses: number[] = [];
      call.on("data", (m: { status: number }) => statuses.push(m.status));
      const [status] = (await within(30_000, once(call, "status"), "the Watch call's status")) as [grpc.StatusObject];
      assert.equal(status.code, grpc.status.OK);
      assert.deepEqual(statuses, [1]);
    } finally {
      client.close();
    }
  });

  for (const kind of ["connect-h1", "grpc-web-h1"] as TransportKind[]) {
    test(`${kind}: the Watch stream ends normally after the bound`, async () => {
      const { transport, close } = testTransport(kind, srv.url, undefined);
      try {
        const statuses: number[] = [];
        await within(
          30_000,
          (async () => {
            for await (const answer of createClient(Health, transport).watch({ service: "" })) statuses.push(answer.status);
          })(),
          "the Watch stream ends",
        );
        assert.deepEqual(statuses, [1]);
      } finally {
        close();
      }
    });
  }
});

describe("an HTTP/2 connection is closed at its maximum age (PLATFORM_HTTP2_MAX_CONNECTION_AGE_MS) even while a stream holds it", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startShortIdleServer({ PLATFORM_HTTP2_MAX_CONNECTION_AGE_MS: "300" });
  });
  after(() => srv.close());

  test("a Watch stream left open (its own bound: 30 minutes): GOAWAY (NO_ERROR) at the age, then the connection closes after the grace", async () => {
    const { session, goaway } = h2cSession(srv.port);
    const closed = once(session, "close");
    try {
      const req = requestHealthWatch(session);
      req.resume();
      await within(30_000, once(req, "response"), "the Watch stream starts");
      const [code] = (await within(30_000, goaway, "GOAWAY at the maximum age")) as [number];
      assert.equal(code, http2.constants.NGHTTP2_NO_ERROR);
      await within(30_000, closed, "the connection closes after the grace, its stream with it");
      assert.equal(req.closed, true);
    } finally {
      session.destroy();
    }
  });
});

describe(`an HTTP/1.1 connection queues at most ${MAX_PIPELINED_REQUESTS} pipelined requests`, () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  /** Writes `requests` in one write and reads until the server closes or `expected` answers came. */
  async function pipeline(requests: string, expected = Infinity) {
    const socket = net.connect(srv.port, "127.0.0.1");
    socket.on("error", () => {});
    let received = "";
    let closed = false;
    try {
      await once(socket, "connect");
      await within(
        30_000,
        new Promise<void>((resolve) => {
          socket.on("data", (c: Buffer) => {
            received += c.toString("latin1");
            if (answers(received) >= expected) resolve();
          });
          socket.on("close", () => ((closed = true), resolve()));
          socket.write(requests);
        }),
        "the answers, or the server's close",
      );
      return { answered: answers(received), closed };
    } finally {
      socket.destroy();
    }
  }

  test("1,000 GET /healthz in one write: at most 16 are answered, then the server closes the connection", async (t) => {
    const { answered, closed } = await pipeline(HEALTHZ.repeat(1000));
    t.diagnostic(`1,000 pipelined requests (${HEALTHZ.length * 1000} bytes): ${answered} answered`);
    assert.equal(closed, true, "the server closed the connection");
    // At most the bound per read of the socket; a 40 KB loopback write arrives in one.
    assert.ok(answered >= 1 && answered <= MAX_PIPELINED_REQUESTS, `${answered} answered`);
  });

  test(`${MAX_PIPELINED_REQUESTS} pipelined requests are all answered and the connection stays open`, async () => {
    assert.deepEqual(await pipeline(HEALTHZ.repeat(MAX_PIPELINED_REQUESTS), MAX_PIPELINED_REQUESTS), {
      answered: MAX_PIPELINED_REQUESTS,
      closed: false,
    });
  });

  test("a keep-alive client sending 50 requests one after the other is served on one connection", async () => {
    const socket = net.connect(srv.port, "127.0.0.1");
    socket.on("error", () => {});
    try {
      await once(socket, "connect");
      let received = "";
      socket.on("data", (c: Buffer) => (received += c.toString("latin1")));
      for (let i = 1; i <= 50; i++) {
        socket.write(HEALTHZ);
        await within(
          30_000,
          waitFor(() => answers(received) >= i),
          `answer ${i}`,
        );
      }
      assert.equal(socket.destroyed || socket.readableEnded, false);
    } finally {
      socket.destroy();
    }
  });
});

/** Resolves once check() holds, checking every few milliseconds. */
async function waitFor(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 2));
}
