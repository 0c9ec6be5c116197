/**
 * OpenTelemetry tracing end to end: the real server exporting to an OTLP/HTTP
 * collector on loopback (test/support/otlp-receiver.ts). Each call carries a
 * W3C traceparent; the tests check that its span joins the caller's trace
 * under the given parent on every protocol, with its attributes, that store
 * calls and outbound exchanges are its children, that the issuer and a
 * webhook sink receive the traceparent of the span that called them, and that
 * a graceful stop exports what is still held. Every wait is on spans
 * arriving, with a generous bound.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { after, before, describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { EventsService, WatchEventsRequestSchema } from "../../gen/platformapi/events/v1/events_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { BROKEN_GROUP, withBrokenGroup } from "../support/broken-store.js";
import { testTransport } from "../support/connect.js";
import { startEventReceiver, type EventReceiver } from "../support/event-receiver.js";
import { grpcClient } from "../support/grpc.js";
import { parseLogLines } from "../support/log-lines.js";
import { generateIssuerKey, signJwt, type IssuerKey } from "../support/oidc-issuer.js";
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../support/otlp-receiver.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const SUBJECT = "repo:org/app:ref:refs/heads/main";

/** A fresh caller context: W3C traceparent (sampled) and the ids it names. */
function callerContext(): { traceId: string; parentId: string; traceparent: string; tracestate: string } {
  const traceId = randomBytes(16).toString("hex");
  const parentId = randomBytes(8).toString("hex");
  return { traceId, parentId, traceparent: `00-${traceId}-${parentId}-01`, tracestate: "vendor=opaque" };
}

/**
 * An OIDC issuer on loopback that records the headers of every request by
 * path, so a test sees the traceparent each fetch carried.
 */
interface RecordingIssuer {
  url: string;
  seen: { path: string; headers: IncomingHttpHeaders }[];
  idToken(claims: Record<string, unknown>): string;
  close(): Promise<void>;
}

async function startRecordingIssuer(): Promise<RecordingIssuer> {
  const key: IssuerKey = await generateIssuerKey("RS256", "trace-rsa");
  const seen: RecordingIssuer["seen"] = [];
  let url = "";
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", url).pathname;
    seen.push({ path, headers: req.headers });
    const send = (body: object) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body));
    if (path === "/.well-known/openid-configuration")
      return send({ issuer: url, jwks_uri: `${url}/jwks`, id_token_signing_alg_values_supported: ["RS256"] });
    if (path === "/jwks") return send({ keys: [key.publicJwk] });
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    seen,
    idToken(claims) {
      const now = Math.floor(Date.now() / 1000);
      return signJwt({ alg: "RS256", typ: "JWT", kid: key.kid }, { iss: url, iat: now, exp: now + 300, ...claims }, key.privateKey);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The OTEL_* variables the SDK reads from process.env, set for one server's start and restored after. */
async function withOtelEnv<T>(env: Record<string, string>, start: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    return await start();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

/** The server span of the call with this caller trace and method, once exported. */
function rpcSpan(otlp: OtlpReceiver, traceId: string, method: string): Promise<ReceivedSpan> {
  return otlp.waitFor((spans) => spans.find((s) => s.traceId === traceId && s.kind === SPAN_KIND.server && s.name.endsWith(`/${method}`)));
}

/** Asserts the span's caller link and the attributes every RPC span carries. */
function assertRpcSpan(span: ReceivedSpan, caller: { traceId: string; parentId: string }, expect: Record<string, string | number>): void {
  assert.equal(span.traceId, caller.traceId, "the caller's trace");
  assert.equal(span.parentSpanId, caller.parentId, "the caller's span is the parent");
  assert.equal(span.kind, SPAN_KIND.server);
  for (const [key, value] of Object.entries(expect)) assert.equal(span.attributes[key], value, `${span.name}: ${key}`);
}

let otlp: OtlpReceiver;
let issuer: RecordingIssuer;

before(async () => {
  otlp = await startOtlpReceiver();
  issuer = await startRecordingIssuer();
});
after(async () => {
  await issuer.close();
  await otlp.close();
});

/** A log line as the server writes it (JSON). */
type LogLine = Record<string, unknown>;

describe("a traced server", () => {
  let srv: TestServer;
  const logChunks: string[] = [];
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => logChunks.push(chunk.toString("utf8")));
  const logLines = () => parseLogLines<LogLine>(logChunks.join(""));
  /** The one line that matches, once written (pino writes asynchronously; a liveness bound). */
  const logLine = async (match: (l: LogLine) => boolean, what: string): Promise<LogLine> => {
    for (let i = 0; i < 3000 && !logLines().some(match); i++) await new Promise((r) => setTimeout(r, 10));
    const found = logLines().filter(match);
    assert.equal(found.length, 1, `exactly one ${what} line`);
    return found[0]!;
  };
  let sinks: EventReceiver;
  let org: { uid: string };
  let admin: string;
  /** Creates a group named name under the suite's organization over REST, the request carrying traceparent. */
  const createChild = (name: string, traceparent: string) =>
    rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name }, { traceparent });

  before(async () => {
    srv = await withOtelEnv(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
        // OTLP's JSON encoding here; the graceful stop below uses the default, binary protobuf.
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_HEADERS: "x-collector-token=s3cret",
        OTEL_SERVICE_NAME: "platform-api-under-test",
        // Batches leave within 50 ms rather than 5 s: the tests wait less, they do not depend on it.
        OTEL_BSP_SCHEDULE_DELAY: "50",
      },
      () =>
        startTestServer({
          logStream,
          decorateStore: withBrokenGroup,
          env: {
            LOG_LEVEL: "info",
            PLATFORM_BASE_URL: BASE,
            PLATFORM_AUTH_URL: AUTH,
            PLATFORM_USER_ISSUERS: issuer.url,
            PLATFORM_DELIVERY_POLL_MS: "50",
            // A watch ends (OK) within a second, so the stream tests see their spans end.
            PLATFORM_EVENT_WATCH_MAX_MS: "1000",
          },
        }),
    );
    sinks = await startEventReceiver(srv);
    org = await createGroup(srv.url, null, "traced org");
    admin = srv.server.adminSubject;
  });
  after(async () => {
    await sinks.close();
    await srv.close();
  });

  test("REST: the RPC span continues the caller's traceparent, with its attributes; store calls are its children", async () => {
    const caller = callerContext();
    const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`, undefined, {
      traceparent: caller.traceparent,
      tracestate: caller.tracestate,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
    assert.equal(span.name, "platformapi.iam.v2beta1.GroupsService/GetGroup");
    assertRpcSpan(span, caller, {
      "rpc.method": "platformapi.iam.v2beta1.GroupsService/GetGroup",
      "rpc.status_code": "OK",
      "platform.rpc.protocol": "rest",
      "http.request.method": "GET",
      "url.path": `/iam/v2beta1/groups/${org.uid}`,
      "http.response.status_code": 200,
      "user.id": admin,
    });
    assert.equal(span.attributes["rpc.system.name"], undefined, "REST is described as HTTP");
    assert.equal(span.status.code, 0, "status unset on success");
    assert.equal(span.resource["service.name"], "platform-api-under-test", "OTEL_SERVICE_NAME");
    assert.equal(typeof span.resource["service.version"], "string");

    const store = await otlp.waitFor((spans) => {
      const children = spans.filter((s) => s.parentSpanId === span.spanId && s.attributes["db.system.name"] !== undefined);
      return children.length > 0 ? children : undefined;
    });
    for (const child of store) {
      assert.equal(child.traceId, caller.traceId);
      assert.equal(child.kind, SPAN_KIND.client);
      assert.equal(child.attributes["db.system.name"], srv.databaseUrl === "" ? "sqlite" : "postgresql");
      assert.equal(child.name, `${child.attributes["db.operation.name"]} ${child.name.split(" ")[1]}`);
    }
    assert.ok(
      store.some((s) => s.name === "get groups" && s.attributes["db.collection.name"] === "groups"),
      store.map((s) => s.name).join(", "),
    );
    // The exports carried OTEL_EXPORTER_OTLP_HEADERS, in the encoding OTEL_EXPORTER_OTLP_PROTOCOL asked for.
    assert.ok(otlp.requests.every((h) => h["x-collector-token"] === "s3cret" && h["content-type"] === "application/json"));
  });

  test("REST over h2c: the same span, from the traceparent of an HTTP/2 request", async () => {
    const caller = callerContext();
    const session = http2.connect(srv.url);
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const req = session.request({
          ":method": "GET",
          ":path": `/iam/v2beta1/groups/${org.uid}`,
          authorization: `Bearer ${srv.adminToken}`,
          traceparent: caller.traceparent,
        });
        req.on("response", (headers) => resolve(Number(headers[":status"])));
        req.on("error", reject);
        req.resume();
        req.end();
      });
      assert.equal(status, 200);
    } finally {
      session.close();
    }
    const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
    assertRpcSpan(span, caller, { "platform.rpc.protocol": "rest", "http.request.method": "GET", "http.response.status_code": 200 });
  });

  test("REST create: the write's transaction span is a child of the RPC span and the part calls its children", async () => {
    const caller = callerContext();
    const res = await createChild("traced child", caller.traceparent);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const span = await rpcSpan(otlp, caller.traceId, "CreateGroup");
    assertRpcSpan(span, caller, { "http.request.method": "POST", "rpc.status_code": "OK", "http.response.status_code": 200 });
    const write = await otlp.waitFor((spans) =>
      spans.find((s) => s.parentSpanId === span.spanId && (s.name === "insertWithEvents" || s.name === "transaction")),
    );
    const create = await otlp.waitFor((spans) => spans.find((s) => s.parentSpanId === write.spanId && s.name === "create groups"));
    assert.equal(create.traceId, caller.traceId);
  });

  test("concurrent writes committed in one group each stay in their own caller's trace", async () => {
    // SQLite's group commit runs every writer's transaction in the turn of the first: each must keep its own parent.
    const callers = [callerContext(), callerContext(), callerContext()];
    const answers = await Promise.all(
      callers.map((c, i) =>
        rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: `concurrent ${i}` }, { traceparent: c.traceparent }),
      ),
    );
    for (const res of answers) assert.equal(res.status, 200, JSON.stringify(res.body));
    for (const caller of callers) {
      const span = await rpcSpan(otlp, caller.traceId, "CreateGroup");
      const create = await otlp.waitFor((spans) => spans.find((s) => s.traceId === caller.traceId && s.name === "create groups"));
      const write = otlp.spans.find((s) => s.spanId === create.parentSpanId);
      assert.ok(write, "the create's parent was exported");
      assert.equal(write.parentSpanId, span.spanId, "under this caller's RPC span");
    }
  });

  test("native gRPC (grpc-js): traceparent in the metadata; a NOT_FOUND is recorded, not an error span", async () => {
    const client = grpcClient(GroupsService, srv.port);
    try {
      const caller = callerContext();
      const got = await client.call("getGroup", { uid: org.uid }, { traceparent: caller.traceparent, tracestate: caller.tracestate });
      assert.equal(got.uid, org.uid);
      const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
      assertRpcSpan(span, caller, {
        "rpc.system.name": "grpc",
        "platform.rpc.protocol": "grpc",
        "rpc.status_code": "OK",
        "user.id": admin,
      });
      assert.equal(span.attributes["http.request.method"], undefined);

      const missing = callerContext();
      await assert.rejects(client.call("getGroup", { uid: `${org.uid}/0123456789abcdef` }, { traceparent: missing.traceparent }), {
        code: 5,
      });
      const failed = await rpcSpan(otlp, missing.traceId, "GetGroup");
      assertRpcSpan(failed, missing, { "rpc.status_code": "NOT_FOUND" });
      assert.equal(failed.status.code, 0, "a NOT_FOUND is the server's answer: status unset");
      assert.equal(failed.attributes["error.type"], undefined);
    } finally {
      client.close();
    }
  });

  test("an unauthenticated call's span ends at admission, on Connect, with its code", async () => {
    const t = testTransport("connect-h1", srv.url, "");
    try {
      const caller = callerContext();
      await assert.rejects(
        createClient(GroupsService, t.transport).getGroup({ uid: org.uid }, { headers: { traceparent: caller.traceparent } }),
      );
      const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
      assertRpcSpan(span, caller, { "rpc.status_code": "UNAUTHENTICATED", "rpc.system.name": "connectrpc" });
      assert.equal(span.attributes["user.id"], undefined, "no principal before authentication");
    } finally {
      t.close();
    }
  });

  for (const [kind, system, protocol] of [
    ["connect-h1", "connectrpc", "connect"],
    ["grpc-web-h1", "grpc", "grpc-web"],
    ["connect-h2c", "connectrpc", "connect"],
  ] as const) {
    test(`${kind}: the RPC span continues the caller's trace`, async () => {
      const t = testTransport(kind, srv.url);
      try {
        const caller = callerContext();
        const client = createClient(GroupsService, t.transport);
        const got = await client.getGroup(
          { uid: org.uid },
          { headers: { traceparent: caller.traceparent, tracestate: caller.tracestate } },
        );
        assert.equal(got.uid, org.uid);
        const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
        assertRpcSpan(span, caller, {
          "rpc.system.name": system,
          "platform.rpc.protocol": protocol,
          "rpc.status_code": "OK",
          "user.id": admin,
        });
        await otlp.waitFor((spans) => spans.find((s) => s.parentSpanId === span.spanId && s.kind === SPAN_KIND.client));
      } finally {
        t.close();
      }
    });
  }

  test("a server stream is one span from its first message to its end; a client that goes away makes it CANCELLED", async () => {
    const caller = callerContext();
    const res = await fetch(`${srv.url}/events/v1/events:watch?uidp.descendants_of=${org.uid}&start_time=1970-01-01T00:00:00Z`, {
      headers: { authorization: `Bearer ${srv.adminToken}`, traceparent: caller.traceparent },
    });
    assert.equal(res.status, 200);
    const lines = (await res.text()).trim().split("\n");
    assert.ok(lines.length > 0 && lines.every((l) => "result" in JSON.parse(l)), "events, then the stream's OK end");
    const span = await rpcSpan(otlp, caller.traceId, "WatchEvents");
    assertRpcSpan(span, caller, { "rpc.status_code": "OK", "http.response.status_code": 200, "user.id": admin });
    await otlp.waitFor((spans) => spans.find((s) => s.parentSpanId === span.spanId && s.attributes["db.system.name"] !== undefined));

    const gone = callerContext();
    const Ctor = grpc.makeGenericClientConstructor(
      { watchEvents: methodDefinition(EventsService, EventsService.method.watchEvents) },
      EventsService.typeName,
    );
    const raw = new Ctor(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
    try {
      const md = new grpc.Metadata();
      md.set("authorization", `Bearer ${srv.adminToken}`);
      md.set("traceparent", gone.traceparent);
      const request = create(WatchEventsRequestSchema, { uidp: { descendantsOf: org.uid }, startTime: { seconds: 1n } });
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const call = (raw as any).watchEvents(request, md) as grpc.ClientReadableStream<unknown>;
      call.on("error", () => {});
      // The org's events are there from the start: after the first, the client hangs up.
      await new Promise<void>((resolve) => call.once("data", () => resolve()));
      call.cancel();
      const cancelled = await rpcSpan(otlp, gone.traceId, "WatchEvents");
      assertRpcSpan(cancelled, gone, { "rpc.system.name": "grpc", "rpc.status_code": "CANCELLED" });
      assert.equal(cancelled.status.code, 0, "a client going away is not a server fault");
    } finally {
      raw.close();
    }
  });

  test("log lines written inside a call carry its span's ids: the server's rpc line and pino's internal-error line alike", async () => {
    const caller = callerContext();
    const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`, undefined, {
      traceparent: caller.traceparent,
      "x-request-id": "traced-log-ok",
    });
    assert.equal(res.status, 200);
    const span = await rpcSpan(otlp, caller.traceId, "GetGroup");
    const line = await logLine((l) => l.msg === "rpc" && l.reqId === "traced-log-ok", "rpc");
    assert.deepEqual(
      { trace_id: line.trace_id, span_id: line.span_id, trace_flags: line.trace_flags },
      { trace_id: caller.traceId, span_id: span.spanId, trace_flags: "01" },
    );
    const keys = Object.keys(line);
    assert.deepEqual(keys.slice(0, 8), ["level", "time", "pid", "hostname", "trace_id", "span_id", "trace_flags", "reqId"]);

    const failing = callerContext();
    const broken = await rest(srv.url, "GET", `/iam/v2beta1/groups/${BROKEN_GROUP}`, undefined, {
      traceparent: failing.traceparent,
      "x-request-id": "traced-log-broken",
    });
    assert.equal(broken.status, 500);
    const brokenSpan = await rpcSpan(otlp, failing.traceId, "GetGroup");
    const error = await logLine((l) => l.msg === "internal error" && l.reqId === "traced-log-broken", "internal error");
    assert.equal(error.trace_id, failing.traceId);
    assert.equal(error.span_id, brokenSpan.spanId);
    // pino puts its mixin's fields where the server's own rpc line puts them.
    assert.deepEqual(Object.keys(error).slice(0, 7), keys.slice(0, 7));
    const rpc = await logLine((l) => l.msg === "rpc" && l.reqId === "traced-log-broken", "rpc");
    assert.equal(rpc.span_id, brokenSpan.spanId);

    // A line written outside every span (the start-up line) carries none.
    const startup = logLines().find((l) => typeof l.msg === "string" && l.msg.startsWith("tracing:"));
    assert.ok(startup, "the tracing start-up line");
    assert.equal(startup.trace_id, undefined);
  });

  test("a call without traceparent starts a trace of its own", async () => {
    const before = new Set(otlp.spans.map((s) => s.traceId));
    const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`);
    assert.equal(res.status, 200);
    const span = await otlp.waitFor((spans) =>
      spans.find((s) => s.kind === SPAN_KIND.server && s.name.endsWith("/GetGroup") && !before.has(s.traceId)),
    );
    assert.equal(span.parentSpanId, "");
    assert.match(span.traceId, /^[0-9a-f]{32}$/);
  });

  test("token exchange: the issuer fetches are client spans under the RPC span, and the issuer receives their traceparent", async () => {
    const created = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "traced deployer",
      claimMatch: { issuer: issuer.url, subject: SUBJECT },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const caller = callerContext();
    const seenBefore = issuer.seen.length;
    const q = new URLSearchParams({ aud: BASE, identity: created.body.uid });
    const res = await rest(srv.url, "GET", `/sts/exchange?${q}`, undefined, {
      authorization: `Bearer ${issuer.idToken({ sub: SUBJECT, aud: AUTH })}`,
      traceparent: caller.traceparent,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const span = await rpcSpan(otlp, caller.traceId, "Exchange");
    assertRpcSpan(span, caller, { "rpc.method": "platformapi.oidc.v1.SecurityTokenService/Exchange", "rpc.status_code": "OK" });

    const fetched = issuer.seen.slice(seenBefore);
    assert.deepEqual(fetched.map((f) => f.path).sort(), ["/.well-known/openid-configuration", "/jwks"]);
    const port = Number(new URL(issuer.url).port);
    for (const { path, headers } of fetched) {
      const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(headers.traceparent));
      assert.ok(m, `${path} carried a traceparent: ${headers.traceparent}`);
      assert.equal(m[1], caller.traceId, `${path}: the caller's trace`);
      assert.equal(headers.tracestate, undefined, "no tracestate was given");
      const fetch = await otlp.waitFor((spans) => spans.find((s) => s.spanId === m[2]));
      assert.equal(fetch.kind, SPAN_KIND.client);
      assert.equal(fetch.parentSpanId, span.spanId, `${path}: its span is the RPC span's child`);
      assert.equal(fetch.name, "GET");
      assert.equal(fetch.attributes["http.request.method"], "GET");
      assert.equal(fetch.attributes["server.address"], "127.0.0.1");
      assert.equal(fetch.attributes["server.port"], port);
      assert.equal(fetch.attributes["http.response.status_code"], 200);
      assert.equal(fetch.attributes["url.full"], undefined, "the URL is not recorded");
    }
  });

  test("a delivery is a span of its own whose traceparent the sink receives", async () => {
    const sink = sinks.sink("traced");
    const created = await rest(srv.url, "POST", `/events/v1/subscriptions/${org.uid}`, { sink: sink.url, types: [] });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    sink.secret = created.body.secret;
    const caller = callerContext();
    const res = await createChild("delivered child", caller.traceparent);
    assert.equal(res.status, 200);
    const [delivery] = await sink.waitForDeliveries(1);
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(delivery!.headers.traceparent));
    assert.ok(m, `the delivery carried a traceparent: ${delivery!.headers.traceparent}`);
    const span = await otlp.waitFor((spans) => spans.find((s) => s.spanId === m[2]));
    assert.equal(span.name, "deliver event");
    assert.equal(span.kind, SPAN_KIND.client);
    assert.equal(span.traceId, m[1]);
    assert.equal(span.attributes["cloudevents.event_id"], delivery!.headers["ce-id"]);
    assert.equal(span.attributes["cloudevents.event_type"], delivery!.headers["ce-type"]);
    assert.equal(span.attributes["platform.subscription.uid"], created.body.uid);
    assert.equal(span.attributes["http.response.status_code"], 204);
    // Woken by the create's commit, the delivery loop starts its own trace rather than joining the call.
    assert.notEqual(span.traceId, caller.traceId);
    assert.equal(span.parentSpanId, "");
  });
});

describe("a graceful stop", () => {
  test("exports the spans still held before close() resolves (OTLP's default encoding, protobuf)", async () => {
    const srv = await withOtelEnv(
      {
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${otlp.url}/v1/traces`,
        OTEL_EXPORTER_OTLP_ENDPOINT: "",
        // No scheduled export within the test: only the stop can send these spans.
        OTEL_BSP_SCHEDULE_DELAY: "600000",
      },
      () => startTestServer(),
    );
    const caller = callerContext();
    try {
      const res = await rest(srv.url, "GET", `/iam/v2beta1/groups?page_size=1`, undefined, { traceparent: caller.traceparent });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(
        otlp.spans.find((s) => s.traceId === caller.traceId),
        undefined,
        "held until the stop",
      );
    } finally {
      await srv.close();
    }
    const span = otlp.spans.find((s) => s.traceId === caller.traceId && s.kind === SPAN_KIND.server);
    assert.ok(span, "exported by the time close() resolved");
    assertRpcSpan(span, caller, {
      "rpc.method": "platformapi.iam.v2beta1.GroupsService/ListGroups",
      "rpc.status_code": "OK",
      "http.response.status_code": 200,
    });
    assert.equal(span.resource["service.name"], "platform-api", "the default service name");
    assert.equal(otlp.requests.at(-1)?.["content-type"], "application/x-protobuf");
    const store = otlp.spans.filter((s) => s.parentSpanId === span.spanId);
    assert.ok(store.length > 0 && store.every((s) => s.kind === SPAN_KIND.client && s.attributes["db.operation.name"] !== undefined));
  });
});
