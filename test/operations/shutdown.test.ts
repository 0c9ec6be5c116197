import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { Authenticator } from "../../src/auth/principal.js";
import { within } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { ServingStatus, watchHealth } from "../support/health-watch.js";
import { grpcPrefix, rawH2 } from "../support/raw-h2.js";
import { startServeProcess } from "../support/serve-process.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

/**
 * An authenticator that holds every call inside the server until released:
 * calls are then provably in flight (past routing, inside the handler) when
 * shutdown begins.
 */
function gatedAuthenticator(expected: number) {
  let entered = 0;
  let allEntered!: () => void;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const decorate = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      if (++entered === expected) allEntered();
      await gate;
      return inner.authenticate(headers);
    },
  });
  return { decorate, allEntered: new Promise<void>((resolve) => (allEntered = resolve)), release, entered: () => entered };
}

/**
 * Holds `restCalls` REST and `grpcCalls` gRPC creates inside their handlers,
 * starts shutdown, checks health turned NOT_SERVING, releases the calls and
 * checks each one succeeded, close() resolved, the port refuses connections
 * and every acknowledged group is in the store when it is opened again.
 */
async function shutdownWithCallsInFlight(restCalls: number, grpcCalls: number): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "platform-shutdown-"));
  const gate = gatedAuthenticator(restCalls + grpcCalls);
  const srv = await startTestServer({
    backend: "sqlite",
    dataDir,
    env: { PLATFORM_SHUTDOWN_GRACE_MS: "5000" },
    decorateAuthenticator: gate.decorate,
  });
  const { server } = srv;
  const groups = grpcClient(GroupsService, server.port);
  const health = watchHealth(server.port);
  let closing: Promise<void> | undefined;
  let reopened: TestServer | undefined;
  try {
    await within(30_000, health.next(ServingStatus.SERVING), "health watch says SERVING");

    let completed = 0;
    const restPending = Array.from({ length: restCalls }, (_, i) =>
      rest(server.url, "POST", "/iam/v2beta1/groups", { name: `rest org ${i}` }).finally(() => completed++),
    );
    const grpcPending = Array.from({ length: grpcCalls }, (_, i) =>
      groups.call("createGroup", { group: { name: `grpc org ${i}` } }).finally(() => completed++),
    );
    await within(30_000, gate.allEntered, "every call reaches its handler");

    closing = server.close();
    await within(30_000, health.next(ServingStatus.NOT_SERVING), "health watch says NOT_SERVING once shutdown begins");
    assert.equal(completed, 0, "no call finished before NOT_SERVING was announced");
    health.close();

    gate.release();
    const restResults = await within(30_000, Promise.all(restPending), "in-flight REST calls finish");
    const grpcResults = await within(30_000, Promise.all(grpcPending), "in-flight gRPC calls finish");
    const uids: string[] = [];
    for (const [i, r] of restResults.entries()) {
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.name, `rest org ${i}`);
      uids.push(r.body.uid);
    }
    for (const [i, g] of grpcResults.entries()) {
      assert.equal(g.name, `grpc org ${i}`);
      uids.push(g.uid);
    }
    for (const uid of uids) assert.match(uid, /^[0-9a-f]{40}$/);

    await within(30_000, closing, "close() resolves");

    const refused = net.connect(server.port, "127.0.0.1");
    const [err] = (await within(30_000, once(refused, "error"), "a new connection fails")) as [NodeJS.ErrnoException];
    assert.equal(err.code, "ECONNREFUSED");

    // Every acknowledged create survived the shutdown.
    reopened = await startTestServer({ backend: "sqlite", dataDir });
    for (const uid of uids) {
      const got = await rest(reopened.url, "GET", `/iam/v2beta1/groups/${uid}`);
      assert.equal(got.status, 200, `group ${uid} after restart: ${JSON.stringify(got.body)}`);
    }
  } finally {
    gate.release();
    health.close();
    groups.close();
    await (closing ?? srv.close());
    await reopened?.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

test("graceful shutdown: NOT_SERVING first, 50 REST and 20 gRPC calls in flight all complete, then the port refuses", async () => {
  await shutdownWithCallsInFlight(50, 20);
});

test("graceful shutdown: gRPC calls alone in flight complete before the store closes", async () => {
  await shutdownWithCallsInFlight(0, 20);
});

test("SIGTERM with HTTP/2 clients that never close: `serve` exits 0 once the grace period is over", async (t) => {
  const GRACE_S = 2;
  const dataDir = mkdtempSync(join(tmpdir(), "platform-sigterm-"));
  // No drain (the fixture's default): this is about the close after it (test/operations/drain.test.ts has the drain).
  const srv = await startServeProcess({ PLATFORM_DATA_DIR: dataDir, PLATFORM_SHUTDOWN_GRACE_MS: String(GRACE_S * 1000) });
  // A raw client that never acknowledges, never answers GOAWAY, never closes its end.
  const silent = await rawH2(srv.port);
  // A node:http2 client with a call whose request never ends.
  const stuck = http2.connect(srv.url);
  stuck.on("error", () => {});
  // Listened for at once: the settings may arrive while the raw client is still waiting for its own.
  const stuckConnected = once(stuck, "remoteSettings");
  try {
    await within(
      30_000,
      silent.waitFor(() => true, 30_000, "server SETTINGS"),
      "the raw client is connected",
    );
    await within(30_000, stuckConnected, "the node:http2 client is connected");
    const call = stuck.request({
      ":method": "POST",
      ":path": "/platformapi.iam.v2beta1.GroupsService/GetGroup",
      "content-type": "application/grpc",
    });
    call.on("error", () => {});
    call.write(grpcPrefix(1024));

    const start = performance.now();
    srv.kill("SIGTERM");
    // Without the grace period's end the process would wait for these clients forever: exiting at all is the point
    // (a liveness bound, not a timing assertion; the seconds are reported).
    const exit = await within(30_000, srv.exited, "the process exits");
    const seconds = (performance.now() - start) / 1000;
    t.diagnostic(`exited ${exit.signal ?? exit.code} ${seconds.toFixed(2)} s after SIGTERM (grace ${GRACE_S} s)`);
    assert.equal(exit.code, 0, srv.output());
  } finally {
    silent.close();
    stuck.destroy();
    srv.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  }
});
