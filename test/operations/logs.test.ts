/**
 * The log lines of failing calls, as an operator searches them: one JSON line
 * per RPC carrying the request id the caller saw, the principal's uid, the
 * RPC, protocol, code and duration; and no bearer token or invite code on any
 * line, whatever the call.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { ConnectError, createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { GetGroupRequestSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import type { RunningServer } from "../../src/app/start.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { BROKEN_GROUP, withBrokenGroup } from "../support/broken-store.js";
import { testTransport } from "../support/connect.js";
import { parseLogLines } from "../support/log-lines.js";
import { builtinRole } from "../support/principals.js";
import { createGroup, mintAdminToken, rest, startTestServer, type TestServer } from "../support/server.js";

const MISSING = "0123456789abcdef0123456789abcdef01234567";
/** Asking the store for BROKEN throws, as a broken disk would. */
const BROKEN = BROKEN_GROUP;
const GET_GROUP = "platformapi.iam.v2beta1.GroupsService/GetGroup";
const LIST_GROUPS = "platformapi.iam.v2beta1.GroupsService/ListGroups";

interface LogLine {
  level: number;
  msg: string;
  reqId?: string;
  principal?: string;
  rpc?: string;
  protocol?: string;
  code?: string;
  durationMs?: number;
  [key: string]: unknown;
}

let server: RunningServer;
let srv: TestServer;
const raw: string[] = [];
let adminToken: string;
/** Every secret the test handed to or got from the server: none may be logged. */
const secrets: string[] = [];

/** Every line written so far, parsed; each must be one JSON object. */
const lines = () => parseLogLines<LogLine>(raw.join(""));

/** The "rpc" lines carrying this request id. */
function rpcLines(reqId: string): LogLine[] {
  return lines().filter((l) => l.msg === "rpc" && l.reqId === reqId);
}

/** Waits (a liveness bound) for the rpc line of reqId: pino writes asynchronously. */
async function rpcLine(reqId: string): Promise<LogLine> {
  for (let i = 0; i < 200 && rpcLines(reqId).length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  const found = rpcLines(reqId);
  assert.equal(found.length, 1, `exactly one rpc line for ${reqId}; lines: ${raw.join("")}`);
  return found[0]!;
}

/** A server logging at `level` into chunks, over a fresh SQLite directory; its groups store fails on BROKEN. */
async function startLoggedServer(level: string, chunks: string[]): Promise<TestServer> {
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => chunks.push(chunk.toString("utf8")));
  return startTestServer({ backend: "sqlite", env: { LOG_LEVEL: level }, logStream, decorateStore: withBrokenGroup });
}

before(async () => {
  srv = await startLoggedServer("info", raw);
  server = srv.server;
  adminToken = srv.adminToken;
  secrets.push(adminToken);
});
after(async () => {
  await srv.close();
  // Everything written, shutdown included: no secret anywhere.
  const text = raw.join("");
  assert.ok(text.length > 0);
  for (const secret of secrets) assert.ok(!text.includes(secret), `a secret (${secret.slice(0, 12)}…) appears in the logs`);
});

/** Asserts the common shape of an rpc line. */
function assertRpcLine(line: LogLine, expected: { reqId: string; principal: string; rpc: string; protocol: string; code: string }): void {
  assert.equal(line.reqId, expected.reqId);
  assert.equal(line.principal, expected.principal);
  assert.equal(line.rpc, expected.rpc);
  assert.equal(line.protocol, expected.protocol);
  assert.equal(line.code, expected.code);
  assert.equal(typeof line.durationMs, "number");
  assert.ok(line.durationMs! >= 0);
  assert.equal(typeof line.time, "number");
  assert.equal(line.level, 30, "rpc lines are at info level");
}

test("REST: a GET of a missing group logs one line with the caller's request id, the principal, rpc, protocol, code and duration", async () => {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${MISSING}`, undefined, { "x-request-id": "logs-rest-missing-1" });
  assert.equal(res.status, 404);
  assert.equal(res.headers.get("x-request-id"), "logs-rest-missing-1");
  const line = await rpcLine("logs-rest-missing-1");
  assertRpcLine(line, {
    reqId: "logs-rest-missing-1",
    principal: server.adminSubject,
    rpc: GET_GROUP,
    protocol: "rest",
    code: "not_found",
  });
});

test("REST: a forged token is logged as unauthenticated with no principal, under the request id the response carries", async () => {
  const forged = `${adminToken.slice(0, adminToken.lastIndexOf(".") + 1)}${"B".repeat(86)}`;
  secrets.push(forged, forged.slice(forged.lastIndexOf(".") + 1));
  const res = await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, {
    authorization: `Bearer ${forged}`,
    "x-request-id": "logs-rest-forged-1",
  });
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("x-request-id"), "logs-rest-forged-1");
  assertRpcLine(await rpcLine("logs-rest-forged-1"), {
    reqId: "logs-rest-forged-1",
    principal: "",
    rpc: LIST_GROUPS,
    protocol: "rest",
    code: "unauthenticated",
  });

  // A token that is not even a JWT.
  const garbage = "not-a-jwt-but-a-secret-all-the-same-7f3a9c";
  secrets.push(garbage);
  const res2 = await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, {
    authorization: `Bearer ${garbage}`,
    "x-request-id": "logs-rest-garbage-1",
  });
  assert.equal(res2.status, 401);
  assertRpcLine(await rpcLine("logs-rest-garbage-1"), {
    reqId: "logs-rest-garbage-1",
    principal: "",
    rpc: LIST_GROUPS,
    protocol: "rest",
    code: "unauthenticated",
  });
});

test("REST: without an x-request-id (or with an unusable one) the server makes one, returns it and logs it", async () => {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${MISSING}`);
  const id = res.headers.get("x-request-id");
  assert.ok(id, "a request id is returned");
  assertRpcLine(await rpcLine(id), { reqId: id, principal: server.adminSubject, rpc: GET_GROUP, protocol: "rest", code: "not_found" });

  // A header that could forge log content is replaced, not echoed.
  const evil = 'x" injected="1';
  const res2 = await rest(srv.url, "GET", `/iam/v2beta1/groups/${MISSING}`, undefined, { "x-request-id": evil });
  const id2 = res2.headers.get("x-request-id");
  assert.ok(id2 && id2 !== evil && id2 !== id);
  assert.equal((await rpcLine(id2)).code, "not_found");
  assert.ok(!raw.join("").includes("injected"));
});

/** A raw grpc-js GetGroup call that also reports the response headers (where the request id comes back). */
function grpcGetGroup(uid: string, metadata: Record<string, string>): Promise<{ err: grpc.ServiceError | null; headers: grpc.Metadata }> {
  return grpcGetGroupAt(server.port, uid, metadata);
}

function grpcGetGroupAt(
  port: number,
  uid: string,
  metadata: Record<string, string>,
): Promise<{ err: grpc.ServiceError | null; headers: grpc.Metadata }> {
  const Ctor = grpc.makeGenericClientConstructor(
    { getGroup: methodDefinition(GroupsService, GroupsService.method.getGroup) },
    "GroupsService",
  );
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    let headers = new grpc.Metadata();
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const call = (client as any).getGroup(create(GetGroupRequestSchema, { uid }), md, (err: grpc.ServiceError | null) => {
      client.close();
      resolve({ err, headers });
    }) as grpc.ClientUnaryCall;
    call.on("metadata", (m: grpc.Metadata) => (headers = m));
  });
}

test("gRPC: a failing call logs its x-request-id metadata, principal, rpc, protocol grpc, code and duration", async () => {
  const { err, headers } = await grpcGetGroup(MISSING, { authorization: `Bearer ${adminToken}`, "x-request-id": "logs-grpc-missing-1" });
  assert.equal(err?.code, grpc.status.NOT_FOUND);
  assert.deepEqual(headers.get("x-request-id"), ["logs-grpc-missing-1"]);
  assertRpcLine(await rpcLine("logs-grpc-missing-1"), {
    reqId: "logs-grpc-missing-1",
    principal: server.adminSubject,
    rpc: GET_GROUP,
    protocol: "grpc",
    code: "not_found",
  });

  const forged = `${adminToken.slice(0, -10)}${"C".repeat(10)}`;
  secrets.push(forged);
  const denied = await grpcGetGroup(MISSING, { authorization: `Bearer ${forged}`, "x-request-id": "logs-grpc-forged-1" });
  assert.equal(denied.err?.code, grpc.status.UNAUTHENTICATED);
  assertRpcLine(await rpcLine("logs-grpc-forged-1"), {
    reqId: "logs-grpc-forged-1",
    principal: "",
    rpc: GET_GROUP,
    protocol: "grpc",
    code: "unauthenticated",
  });
});

test("Connect: a failing call logs the request id the response carries", async () => {
  const t = testTransport("connect-h1", srv.url);
  try {
    let responseId: string | null = null;
    await assert.rejects(
      createClient(GroupsService, t.transport).getGroup({ uid: MISSING }, { headers: { "x-request-id": "logs-connect-missing-1" } }),
      (err: unknown) => {
        assert.ok(err instanceof ConnectError && err.code === 5);
        responseId = err.metadata.get("x-request-id");
        return true;
      },
    );
    assert.equal(responseId, "logs-connect-missing-1");
    assertRpcLine(await rpcLine("logs-connect-missing-1"), {
      reqId: "logs-connect-missing-1",
      principal: server.adminSubject,
      rpc: GET_GROUP,
      protocol: "connect",
      code: "not_found",
    });
  } finally {
    t.close();
  }
});

test("an internal error is logged once, at error level, with the request id of its call, on every protocol", async () => {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${BROKEN}`, undefined, { "x-request-id": "logs-rest-broken-1" });
  assert.equal(res.status, 500);
  assert.ok(!JSON.stringify(res.body).includes("injected"), "the cause stays in the logs, not the response");
  assertRpcLine(await rpcLine("logs-rest-broken-1"), {
    reqId: "logs-rest-broken-1",
    principal: server.adminSubject,
    rpc: GET_GROUP,
    protocol: "rest",
    code: "internal",
  });

  const viaGrpc = await grpcGetGroup(BROKEN, { authorization: `Bearer ${adminToken}`, "x-request-id": "logs-grpc-broken-1" });
  assert.equal(viaGrpc.err?.code, grpc.status.INTERNAL);
  assert.equal((await rpcLine("logs-grpc-broken-1")).code, "internal");

  const t = testTransport("connect-h1", srv.url);
  try {
    await assert.rejects(
      createClient(GroupsService, t.transport).getGroup({ uid: BROKEN }, { headers: { "x-request-id": "logs-connect-broken-1" } }),
    );
  } finally {
    t.close();
  }
  assert.equal((await rpcLine("logs-connect-broken-1")).code, "internal");

  const errors = lines().filter((l) => l.level >= 50);
  assert.deepEqual(
    errors.map((l) => [l.msg, l.reqId]),
    [
      ["internal error", "logs-rest-broken-1"],
      ["internal error", "logs-grpc-broken-1"],
      ["internal error", "logs-connect-broken-1"],
    ],
    "one error line per failed call, naming its request",
  );
  for (const l of errors) assert.match(JSON.stringify(l.err), /disk I\/O error \(injected by the test\)/, "the cause is logged");
});

test("an invite code created over REST and presented back never reaches the logs", async () => {
  const org = await createGroup(srv.url, null, "logs org");
  const viewer = await builtinRole(srv, "viewer");
  const created = await rest(
    srv.url,
    "POST",
    `/iam/v2beta1/groupInvites/${org.uid}`,
    { roleUid: viewer, ttl: "3600s" },
    { "x-request-id": "logs-invite-create-1" },
  );
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const code: string = created.body.code;
  assert.ok(code.length > 20);
  secrets.push(code, code.slice(code.indexOf(".") + 1));
  assertRpcLine(await rpcLine("logs-invite-create-1"), {
    reqId: "logs-invite-create-1",
    principal: server.adminSubject,
    rpc: "platformapi.iam.v2beta1.GroupInvitesService/CreateGroupInvite",
    protocol: "rest",
    code: "ok",
  });

  // The code comes back in a request (the administrator is no person, so it is refused): still not logged.
  const presented = await rest(srv.url, "POST", "/auth/v1/register", { code }, { "x-request-id": "logs-invite-register-1" });
  assert.notEqual(presented.status, 200);
  const line = await rpcLine("logs-invite-register-1");
  assert.equal(line.protocol, "rest");
  assert.notEqual(line.code, "ok");
  for (const secret of secrets) assert.ok(!raw.join("").includes(secret), "no secret in the logs so far");
});

test("the rpc line, formatted by the server rather than pino, is laid out as pino lays out its own lines", async () => {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${MISSING}`, undefined, { "x-request-id": "logs-layout-1" });
  assert.equal(res.status, 404);
  const line = await rpcLine("logs-layout-1");
  // A line pino wrote itself (the start-up line, or any other that is not an rpc line).
  const pinos = lines().filter((l) => l.msg !== "rpc");
  assert.ok(pinos.length > 0, "pino wrote lines of its own");
  const pinoLine = pinos[0]!;
  const keys = Object.keys(line);
  assert.deepEqual(keys, [
    "level",
    "time",
    "pid",
    "hostname",
    "reqId",
    "principal",
    "remoteAddress",
    "rpc",
    "protocol",
    "code",
    "durationMs",
    "msg",
  ]);
  assert.equal(line.remoteAddress, "127.0.0.1", "the client's address");
  assert.deepEqual(Object.keys(pinoLine).slice(0, 4), keys.slice(0, 4), "pino's own lines start the same way");
  assert.equal(Object.keys(pinoLine).at(-1), "msg", "and end with msg");
  assert.equal(line.pid, pinoLine.pid);
  assert.equal(line.hostname, pinoLine.hostname);
  assert.ok(Math.abs((line.time as number) - Date.now()) < 60_000, "time is epoch milliseconds, as pino writes it");
});

test("every line is JSON with a level and time; every rpc line has a request id", async () => {
  const all = lines();
  assert.ok(all.length >= 10);
  for (const l of all) {
    assert.equal(typeof l.level, "number");
    assert.equal(typeof l.time, "number");
    if (l.msg === "rpc") assert.match(l.reqId ?? "", /^[A-Za-z0-9._:-]{1,64}$/);
  }
  const text = raw.join("");
  assert.ok(!/bearer /i.test(text), "no authorization header value in the logs");
  for (const secret of secrets) assert.ok(!text.includes(secret));
});

test("at LOG_LEVEL=trace too, no token or invite code is written", async () => {
  const chunks: string[] = [];
  const traced = await startLoggedServer("trace", chunks);
  const token = await mintAdminToken(traced.server);
  const forged = `${token.slice(0, -12)}${"D".repeat(12)}`;
  const mine: string[] = [token, forged];
  try {
    const auth = { authorization: `Bearer ${token}` };
    const org = await rest(traced.url, "POST", "/iam/v2beta1/groups", { name: "trace org" }, auth);
    assert.equal(org.status, 200);
    const roles = await rest(traced.url, "GET", "/iam/v2beta1/roles?name=viewer", undefined, auth);
    const viewer = (roles.body.roles as { uid: string; name: string }[]).find((r) => r.name === "viewer")!.uid;
    const invite = await rest(traced.url, "POST", `/iam/v2beta1/groupInvites/${org.body.uid}`, { roleUid: viewer, ttl: "3600s" }, auth);
    assert.equal(invite.status, 200);
    mine.push(invite.body.code);
    await rest(traced.url, "POST", "/auth/v1/register", { code: invite.body.code }, auth);
    await rest(traced.url, "GET", `/iam/v2beta1/groups/${MISSING}`, undefined, { authorization: `Bearer ${forged}` });
    await rest(traced.url, "GET", `/iam/v2beta1/groups?page_token=${encodeURIComponent(token)}`, undefined, {
      authorization: `Bearer ${forged}`,
      cookie: `session=${token}`,
    });
    const { err } = await grpcGetGroupAt(traced.port, MISSING, { authorization: `Bearer ${forged}` });
    assert.equal(err?.code, grpc.status.UNAUTHENTICATED);
  } finally {
    await traced.close();
  }
  const text = chunks.join("");
  assert.ok(text.split("\n").filter((l) => l !== "").length >= 6, "the calls were logged");
  for (const secret of mine) assert.ok(!text.includes(secret), `a secret (${secret.slice(0, 12)}…) appears in the trace logs`);
});

test("at LOG_LEVEL=warn, calls write no rpc line; a failing one still writes its error", async () => {
  const chunks: string[] = [];
  const quiet = await startLoggedServer("warn", chunks);
  try {
    const auth = { authorization: `Bearer ${await mintAdminToken(quiet.server)}` };
    assert.equal((await rest(quiet.url, "GET", `/iam/v2beta1/groups/${MISSING}`, undefined, auth)).status, 404);
    assert.equal(
      (await rest(quiet.url, "GET", `/iam/v2beta1/groups/${BROKEN}`, undefined, { ...auth, "x-request-id": "logs-warn-1" })).status,
      500,
    );
  } finally {
    await quiet.close();
  }
  const written = parseLogLines<LogLine>(chunks.join(""));
  assert.deepEqual(
    written.filter((l) => l.msg === "rpc"),
    [],
    "no rpc line below info",
  );
  assert.deepEqual(
    written.filter((l) => l.level >= 50).map((l) => [l.msg, l.reqId]),
    [["internal error", "logs-warn-1"]],
  );
});
