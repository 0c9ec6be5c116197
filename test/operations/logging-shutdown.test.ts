/**
 * What a stopping server logs beyond its phases: a second stop request (a
 * second Ctrl-C or SIGTERM, or the primary's close-now in worker mode),
 * whether it finds the drain running or over; and, at the end of the grace
 * period, what each cut call or request was: its RPC (or, before its call
 * started, its method and path) and request id.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { Authenticator } from "../../src/auth/principal.js";
import { within } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { startTestServer } from "../support/server.js";

/** The liveness bound of each wait. */
const BOUND_MS = 30_000;

interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

/** A log stream and its parsed lines, with a wait for the first line that matches. */
function logCapture() {
  const stream = new PassThrough();
  const lines: LogLine[] = [];
  const waiters: { match: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];
  stream.setEncoding("utf8").on("data", (s: string) => {
    for (const text of s.split("\n").filter((t) => t !== "")) {
      const line = JSON.parse(text) as LogLine;
      lines.push(line);
      for (const w of waiters.filter((w) => w.match(line))) w.resolve(line);
    }
  });
  const next = (match: (l: LogLine) => boolean) => lines.find(match) ?? new Promise<LogLine>((resolve) => waiters.push({ match, resolve }));
  return { stream, lines, next: (match: (l: LogLine) => boolean, what: string) => within(BOUND_MS, Promise.resolve(next(match)), what) };
}

/** An authenticator that holds every call until released, counting those it holds. */
function holding() {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let held = 0;
  const arrivals: (() => void)[] = [];
  const decorate = (inner: Authenticator): Authenticator => ({
    async authenticate(headers) {
      held++;
      for (const wake of arrivals.splice(0)) wake();
      await gate;
      return inner.authenticate(headers);
    },
  });
  const heldAtLeast = async (n: number) => {
    while (held < n) await new Promise<void>((resolve) => arrivals.push(resolve));
  };
  return { decorate, release, heldAtLeast };
}

test("a second stop during the drain cuts it short, and says so", async () => {
  const log = logCapture();
  const srv = await startTestServer({ env: { LOG_LEVEL: "info", PLATFORM_DRAIN_MS: "60000" }, logStream: log.stream });
  const first = srv.close();
  await log.next((l) => l.msg.startsWith("draining"), "the drain began");
  const second = srv.server.close();
  const cut = await log.next((l) => l.msg.startsWith("drain cut short"), "the second stop is logged");
  assert.equal(cut.level, 30);
  assert.equal(cut.callsInFlight, 0);
  await within(BOUND_MS, Promise.all([first, second]), "the server stops long before the drain's end");
  assert.equal(log.lines.at(-1)?.msg, "platform-api stopped");
});

test("the end of the grace period logs what it cut: each call's RPC or request, and request ids; a second stop after the drain is logged", async () => {
  const log = logCapture();
  const hold = holding();
  const srv = await startTestServer({
    env: { LOG_LEVEL: "info", PLATFORM_SHUTDOWN_GRACE_MS: "300" },
    logStream: log.stream,
    decorateAuthenticator: hold.decorate,
  });
  const groups = grpcClient(GroupsService, srv.port);
  try {
    // Held in its handler (native gRPC authenticates there) and held in REST's admission, before its call starts.
    const viaGrpc = groups.call("listGroups", {}, { "x-request-id": "cut-grpc-1" }).catch((err: { code: number }) => err.code);
    const viaRest = fetch(`${srv.url}/iam/v2beta1/groups`, {
      headers: { authorization: `Bearer ${srv.adminToken}`, "x-request-id": "cut-rest-1" },
    }).then(
      (res) => res.status,
      () => "cut",
    );
    await within(BOUND_MS, hold.heldAtLeast(2), "both calls are held");
    const closing = srv.close();
    await log.next((l) => l.msg === "listener closed", "the listener closed");
    void srv.server.close();
    const again = await log.next((l) => l.msg.startsWith("second stop request"), "the second stop is logged");
    assert.equal(again.callsInFlight, 2);
    await within(BOUND_MS, closing, "close() resolves after the grace period");
    const cut = await log.next((l) => l.msg.startsWith("grace period over"), "the cut is logged");
    assert.equal(cut.level, 40);
    assert.equal(cut.callsCut, 2);
    assert.deepEqual(cut.what, { "platformapi.iam.v2beta1.GroupsService/ListGroups": 1, "GET /iam/v2beta1/groups": 1 });
    assert.deepEqual([...(cut.reqIds as string[])].sort(), ["cut-grpc-1", "cut-rest-1"]);
    assert.notEqual(await within(BOUND_MS, viaGrpc, "the gRPC call ends"), 0);
    assert.equal(await within(BOUND_MS, viaRest, "the REST call ends"), "cut");
  } finally {
    hold.release();
    groups.close();
  }
});
