/**
 * The drain on SIGTERM, as a balancer and its clients see it: /readyz and gRPC
 * health turn NOT_SERVING while calls are still served, a second SIGTERM goes
 * on to the close, a request begun before the close is answered, idle
 * keep-alive and HTTP/2 connections do not hold the exit (the grace period is
 * far longer than the test's bound), and every phase is logged. Worker mode
 * drains every worker; close() cuts what is left at the grace and says how
 * many calls it cut.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { after, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { Authenticator } from "../../src/auth/principal.js";
import { deferred, within } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { ServingStatus, watchHealth as watchHealthOf } from "../support/health-watch.js";
import { heldRestCreate } from "../support/held-create.js";
import { watchLogs } from "../support/log-lines.js";
import { isListening, startServeProcess } from "../support/serve-process.js";
import { startTestServer } from "../support/server.js";
import { tempDirs } from "../support/temp-dirs.js";

/** Identical for serve and admin-token, so the token's audience is the server's. */
const BASE_URL = "http://127.0.0.1:1";
/** Far longer than any bound below: nothing in these tests waits it out. */
const LONG_MS = "60000";
/** The liveness bound of each wait (well below LONG_MS). */
const BOUND_MS = 30_000;

const tempDir = tempDirs("platform-drain-");
const cleanups: (() => void)[] = [];
after(() => {
  for (const cleanup of cleanups) cleanup();
});

/** `platform-api serve` in a child process over a fresh data directory, logging at info. */
const serve = (env: Record<string, string>) =>
  startServeProcess({ PLATFORM_DATA_DIR: tempDir(), PLATFORM_BASE_URL: BASE_URL, LOG_LEVEL: "info", ...env });

/** A health watch, closed when the file's tests end. */
function watchHealth(port: number, service = "") {
  const watch = watchHealthOf(port, service);
  cleanups.push(watch.close);
  return watch;
}

/** One GET on its own connection: the status and body, or the connection error's code. */
async function getOnce(port: number, path: string): Promise<{ status: number; body: string; connection?: string } | { error: string }> {
  return new Promise((resolve) => {
    const req = http.get({ host: "127.0.0.1", port, path, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (s: string) => (body += s));
      res.on("end", () => resolve({ status: res.statusCode!, body, connection: res.headers.connection }));
    });
    req.on("error", (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
  });
}

/**
 * Polls /readyz, one connection a request, until stop() (or a 503 when
 * untilNotReady): what a balancer's health check sees.
 */
function pollReadyz(port: number) {
  const answers: { status: number; body: string }[] = [];
  const errors: string[] = [];
  let stopped = false;
  const { promise: notReady, resolve: sawNotReady } = deferred();
  const { promise: ready, resolve: sawReady } = deferred();
  const loop = (async () => {
    while (!stopped) {
      const r = await getOnce(port, "/readyz");
      if ("error" in r) errors.push(r.error);
      else {
        answers.push(r);
        if (r.status === 200) sawReady();
        if (r.status === 503) sawNotReady();
      }
    }
  })();
  return {
    answers,
    errors,
    ready,
    notReady,
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
}

/** A keep-alive HTTP/1.1 connection that made one request and then sits idle; `closed` settles when the server closes it. */
async function idleKeepAlive(port: number) {
  const socket = net.connect(port, "127.0.0.1");
  socket.on("error", () => {});
  cleanups.push(() => socket.destroy());
  await once(socket, "connect");
  const closed = once(socket, "close").then(() => true);
  socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  let text = "";
  socket.setEncoding("utf8");
  await within(
    BOUND_MS,
    new Promise<void>((resolve) =>
      socket.on("data", (s: string) => {
        text += s;
        if (text.includes('"status":"ok"')) resolve();
      }),
    ),
    "the keep-alive connection's answer",
  );
  assert.doesNotMatch(text, /connection: close/i, "the answer keeps the connection open");
  return { closed };
}

/** An h2c connection with no stream open; `closed` settles when the server closes it. */
async function idleH2c(port: number) {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  cleanups.push(() => session.destroy());
  await within(BOUND_MS, once(session, "remoteSettings"), "the h2c connection is up");
  const goaway = once(session, "goaway").then(() => true);
  const closed = once(session, "close").then(() => true);
  return { goaway, closed };
}

test("SIGTERM drains: /readyz 503 with a body (never refused) and gRPC health NOT_SERVING while calls are served; a second SIGTERM closes; a request begun is answered; idle connections do not hold the exit; each phase logged", async () => {
  const srv = await serve({ PLATFORM_DRAIN_MS: LONG_MS, PLATFORM_SHUTDOWN_GRACE_MS: LONG_MS });
  const token = await srv.adminToken();
  const auth = { authorization: `Bearer ${token}` };
  const keepAlive = await idleKeepAlive(srv.port);
  const h2c = await idleH2c(srv.port);
  const health = watchHealth(srv.port);
  const groupsHealth = watchHealth(srv.port, "platformapi.iam.v2beta1.GroupsService");
  const groups = grpcClient(GroupsService, srv.port, { token });
  cleanups.push(() => groups.close());
  const poll = pollReadyz(srv.port);

  await within(BOUND_MS, health.next(ServingStatus.SERVING), "health watch says SERVING");
  await within(BOUND_MS, groupsHealth.next(ServingStatus.SERVING), "a service's health watch says SERVING");
  await within(BOUND_MS, poll.ready, "/readyz says 200 before the signal");

  srv.kill("SIGTERM");
  await within(BOUND_MS, health.next(ServingStatus.NOT_SERVING), "the server's health turns NOT_SERVING");
  await within(BOUND_MS, groupsHealth.next(ServingStatus.NOT_SERVING), "every service's health turns NOT_SERVING");
  await within(BOUND_MS, poll.notReady, "/readyz says 503");
  await srv.logged((l) => l.msg.startsWith("draining"), "draining", BOUND_MS);

  // Still serving while draining: REST (its answer closes the connection) and gRPC.
  const list = await fetch(`http://127.0.0.1:${srv.port}/iam/v2beta1/groups`, { headers: auth });
  assert.equal(list.status, 200, await list.text());
  const created = await groups.call("createGroup", { group: { name: "made while draining" } });
  assert.equal(created.name, "made while draining");
  const healthz = await getOnce(srv.port, "/healthz");
  assert.ok(!("error" in healthz));
  assert.deepEqual([healthz.status, healthz.connection], [200, "close"], "alive, and the answer closes its keep-alive connection");
  const racing = await within(BOUND_MS, heldRestCreate(srv.port, token, "begun before the close"), "the server read the request's headers");

  await poll.stop();
  assert.deepEqual(poll.errors, [], "/readyz never refused a connection while draining");
  const afterSignal = poll.answers.slice(poll.answers.findIndex((a) => a.status === 503));
  for (const a of afterSignal) assert.deepEqual([a.status, JSON.parse(a.body)], [503, { status: "not ready" }]);

  srv.kill("SIGTERM");
  await srv.logged((l) => l.msg === "listener closed", "listener closed", BOUND_MS);
  const refused = await getOnce(srv.port, "/readyz");
  assert.deepEqual(refused, { error: "ECONNREFUSED" }, "the listener is closed");

  racing.send();
  const answer = await within(BOUND_MS, racing.response, "the request begun before the close is answered");
  assert.equal(answer.status, 200, answer.body);
  assert.equal(JSON.parse(answer.body).name, "begun before the close");
  assert.equal(answer.connection, "close");

  assert.ok(await within(BOUND_MS, keepAlive.closed, "the idle keep-alive connection is closed"));
  assert.ok(await within(BOUND_MS, h2c.goaway, "the idle h2c connection gets GOAWAY"));
  assert.ok(await within(BOUND_MS, h2c.closed, "the idle h2c connection is closed"));
  health.close();
  groupsHealth.close();
  groups.close();
  const exit = await within(BOUND_MS, srv.exited, "the process exits long before the grace period");
  assert.deepEqual(exit, { code: 0, signal: null }, srv.output());

  const phases = ["shutting down", "draining", "drain cut short", "listener closed", "connections drained", "platform-api stopped"];
  const order = phases.map((p) => srv.lines().findIndex((l) => l.msg.startsWith(p)));
  assert.ok(
    order.every((at, i) => at >= 0 && (i === 0 || at > order[i - 1]!)),
    `phases in order: ${srv
      .lines()
      .map((l) => l.msg)
      .join(" | ")}`,
  );
  const draining = srv.lines()[order[1]!]!;
  assert.equal(draining.drainMs, Number(LONG_MS));
});

test("worker mode: SIGTERM to the primary drains every worker (/readyz 503 from each, never refused); a second SIGTERM closes them; the primary exits 0 after them", async () => {
  const srv = await serve({ PLATFORM_WORKERS: "2", PLATFORM_DRAIN_MS: LONG_MS, PLATFORM_SHUTDOWN_GRACE_MS: LONG_MS });
  // Both workers listen before the test signals (a worker still starting would not drain): the fixture waits for both.
  assert.equal(srv.lines().filter(isListening).length, 2, "two workers listen");
  srv.kill("SIGTERM");
  const drainingPids = new Set<number>();
  await srv.logged(
    (l) => {
      if (l.msg.startsWith("draining") && l.pid !== undefined) drainingPids.add(l.pid);
      return drainingPids.size === 2;
    },
    "both workers drain",
    BOUND_MS,
  );
  // Each connection goes to one worker or the other: every one answers 503, none is refused.
  const answers = await Promise.all(Array.from({ length: 8 }, () => getOnce(srv.port, "/readyz")));
  for (const a of answers) assert.deepEqual("error" in a ? a : [a.status, JSON.parse(a.body)], [503, { status: "not ready" }]);
  assert.equal(srv.child.exitCode, null, "the primary waits for its workers");

  srv.kill("SIGTERM");
  const exit = await within(BOUND_MS, srv.exited, "the primary exits once its workers have closed");
  assert.deepEqual(exit, { code: 0, signal: null }, srv.output());
  const stopped = new Set(
    srv
      .lines()
      .filter((l) => l.msg === "platform-api stopped")
      .map((l) => l.pid),
  );
  assert.deepEqual(stopped, drainingPids, "each worker stopped after its drain");
});

test("close() at the end of the grace period cuts the calls still running and logs how many", async () => {
  const { promise: inHandler, resolve: entered } = deferred();
  const { promise: gate, resolve: release } = deferred();
  const hold = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      entered();
      await gate;
      return inner.authenticate(headers);
    },
  });
  const { lines, stream: log } = watchLogs();
  // A grace short enough to wait out: the call is held until after it.
  const srv = await startTestServer({
    env: { LOG_LEVEL: "info", PLATFORM_SHUTDOWN_GRACE_MS: "200" },
    logStream: log,
    decorateAuthenticator: hold,
  });
  const groups = grpcClient(GroupsService, srv.port);
  try {
    const held = groups.call("listGroups", {}).then(
      () => "answered",
      (err: grpc.ServiceError) => err.code,
    );
    await within(BOUND_MS, inHandler, "the call is in flight");
    await within(BOUND_MS, srv.close(), "close() resolves after the grace period");
    const ended = await within(BOUND_MS, held, "the held call ends");
    assert.ok(ended === grpc.status.CANCELLED || ended === grpc.status.UNAVAILABLE, `cut with its connection, not answered: ${ended}`);
    const cut = lines.find((l) => l.msg.startsWith("grace period over"));
    assert.ok(cut, lines.map((l) => l.msg).join(" | "));
    assert.equal(cut.callsCut, 1);
    assert.ok(!lines.some((l) => l.msg === "connections drained"));
  } finally {
    release();
    groups.close();
  }
});

test("a request arriving on an open connection after the listener closed is UNAVAILABLE in the spec's error shape, with Connection: close", async () => {
  const { promise: inHandler, resolve: entered } = deferred();
  const { promise: gate, resolve: release } = deferred();
  let held = true;
  const hold = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      if (held) {
        held = false;
        entered();
        await gate;
      }
      return inner.authenticate(headers);
    },
  });
  const logs = watchLogs();
  const srv = await startTestServer({
    env: { LOG_LEVEL: "info", PLATFORM_SHUTDOWN_GRACE_MS: LONG_MS },
    logStream: logs.stream,
    decorateAuthenticator: hold,
  });
  const socket = net.connect(srv.port, "127.0.0.1");
  let received = "";
  socket.setEncoding("latin1").on("data", (s: string) => (received += s));
  try {
    // The first request is held in authentication, so the connection is busy (not idle) when the listener closes.
    socket.write(`GET /iam/v2beta1/groups HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${srv.adminToken}\r\n\r\n`);
    await within(BOUND_MS, inHandler, "the first request is in flight");
    const closing = srv.close();
    await within(
      BOUND_MS,
      logs.next((l) => l.msg === "listener closed"),
      "the listener closed",
    );
    socket.write("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    release();
    await within(BOUND_MS, once(socket, "close"), "the server closes the connection after the second answer");
    await within(BOUND_MS, closing, "close() resolves");
    const answers = received.split(/(?=HTTP\/1\.1 )/);
    assert.equal(answers.length, 2, received);
    assert.match(answers[0]!, /^HTTP\/1\.1 200 /);
    assert.match(answers[1]!, /^HTTP\/1\.1 503 /);
    assert.match(answers[1]!, /\r\nconnection: close\r\n/i);
    const body = JSON.parse(answers[1]!.slice(answers[1]!.indexOf("\r\n\r\n") + 4)) as { code: number; details: { reason?: string }[] };
    assert.equal(body.code, 14);
    assert.equal(body.details[0]?.reason, "SHUTTING_DOWN");
  } finally {
    release();
    socket.destroy();
  }
});
