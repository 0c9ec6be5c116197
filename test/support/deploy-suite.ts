import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { create } from "@bufbuild/protobuf";
import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { CreateGroupRequestSchema, GetGroupRequestSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { ENVIRONMENT_VARIABLES } from "../../src/config.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { assertRestError, connectError } from "./assertions.js";
import { grpcStatus } from "./grpc.js";
import { METRICS_AUTH, METRICS_ENV } from "./metrics-scrape.js";
import { http1From } from "./proxied-calls.js";
import { skipUnlessInstalled, startProxy, upstreamIdleTimeoutsMs, type ProxyKind, type RunningProxy } from "./proxies.js";
import { startTestServer, type RestResult, type TestServer } from "./server.js";
import { createTestCa, type TestCa } from "./test-ca.js";

const execFileP = promisify(execFile);

/**
 * The client's own address in the address tests. Linux routes all of
 * 127.0.0.0/8 to loopback, so a client bound to 127.0.0.2 is told apart from
 * the proxy (127.0.0.1), and a logged 127.0.0.2 can only come from what the
 * proxy passed on: the TCP peer the server sees is always the proxy.
 */
const CLIENT_ADDRESS = "127.0.0.2";
/** What a client writes in X-Forwarded-For / Forwarded to pass for someone else. */
const SPOOFED = "203.0.113.7";
const MISSING_UID = "f".repeat(40);

/** A log line of the server, as JSON. */
interface LogLine {
  msg?: string;
  reqId?: string;
  remoteAddress?: string;
  [key: string]: unknown;
}

/** One line of the server's JSON log; a line that is not JSON fails the test (log shippers would drop it). */
function parseLogLine(line: string): LogLine {
  try {
    return JSON.parse(line) as LogLine;
  } catch {
    return assert.fail(`the server wrote a log line that is not JSON: ${line}`);
  }
}

/**
 * curl, the way an operator checks a deployment: TLS verified against the test CA, from CLIENT_ADDRESS. The
 * path is sent as written (--path-as-is: no dot segment resolved by curl).
 */
export async function curl(
  proxy: RunningProxy,
  ca: TestCa,
  opts: { method?: string; path: string; http: "1.1" | "2"; headers?: Record<string, string>; body?: unknown },
): Promise<RestResult & { httpVersion: string }> {
  const args = ["-sS", "--path-as-is", "--cacert", ca.caFile, "--interface", CLIENT_ADDRESS, opts.http === "2" ? "--http2" : "--http1.1"];
  args.push("-X", opts.method ?? "GET", "-D", "-", "-w", "\n%{http_version}");
  for (const [k, v] of Object.entries(opts.headers ?? {})) args.push("-H", `${k}: ${v}`);
  if (opts.body !== undefined) args.push("-H", "content-type: application/json", "--data-binary", JSON.stringify(opts.body));
  args.push(`${proxy.url}${opts.path}`);
  const { stdout } = await execFileP("curl", args, { maxBuffer: 16 << 20 });
  // -D - writes the header block first, then the body, then -w's line.
  const versionAt = stdout.lastIndexOf("\n");
  const httpVersion = stdout.slice(versionAt + 1);
  const response = stdout.slice(0, versionAt);
  const split = response.indexOf("\r\n\r\n");
  const [statusLine, ...headerLines] = response.slice(0, split).split("\r\n");
  const headers = new Headers();
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  const text = response.slice(split + 4);
  let body: unknown = text;
  try {
    body = text === "" ? undefined : JSON.parse(text);
  } catch {
    // not JSON: the test reads it as text
  }
  return { status: Number(statusLine!.split(" ")[1]), body, headers, httpVersion };
}

/** A grpc-js GroupsService client over TLS to the proxy, trusting the test CA; calls settle with the error or the response. */
function grpcGroups(proxy: RunningProxy, ca: TestCa, token: string) {
  const definition: grpc.ServiceDefinition = {};
  for (const m of GroupsService.methods) (definition as Record<string, unknown>)[m.localName] = methodDefinition(GroupsService, m);
  const Ctor = grpc.makeGenericClientConstructor(definition, GroupsService.typeName);
  // SNI "localhost", as a client naming the host sends it (an IP address as SNI is deprecated in Node).
  const client = new Ctor(`127.0.0.1:${proxy.port}`, grpc.credentials.createSsl(ca.ca), {
    "grpc.ssl_target_name_override": "localhost",
    "grpc.default_authority": `localhost:${proxy.port}`,
  });
  const unary = <T>(method: string, request: unknown, metadata: Record<string, string>) =>
    new Promise<{ err: grpc.ServiceError | null; res: T | undefined }>((resolve) => {
      const md = new grpc.Metadata();
      md.set("authorization", `Bearer ${token}`);
      for (const [k, v] of Object.entries(metadata)) md.set(k, v);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any)[method](request, md, (err: grpc.ServiceError | null, res: T) => resolve({ err, res }));
    });
  return {
    createGroup: (name: string) =>
      unary<{ uid: string }>("createGroup", create(CreateGroupRequestSchema, { parent: "", group: { name } }), {}),
    getGroup: (uid: string, metadata: Record<string, string> = {}) =>
      unary<{ name: string }>("getGroup", create(GetGroupRequestSchema, { uid }), metadata),
    close: () => client.close(),
  };
}

/**
 * The connect-node transports through the proxy: Connect (POST, and GET for
 * side-effect-free methods) and gRPC-Web, each over HTTP/1.1 and HTTP/2,
 * from CLIENT_ADDRESS.
 */
function connectTransports(proxy: RunningProxy, ca: TestCa, token: string) {
  const nodeOptions = { ca: ca.ca, localAddress: CLIENT_ADDRESS };
  const bearer: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req));
  const agent = new https.Agent({ keepAlive: true, ...nodeOptions });
  const sessions: Http2SessionManager[] = [];
  const make = (protocol: "connect" | "connect-get" | "grpc-web", httpVersion: "1.1" | "2") => {
    const options = { baseUrl: proxy.url, interceptors: [bearer], useHttpGet: protocol === "connect-get" };
    const create = protocol === "grpc-web" ? createGrpcWebTransport : createConnectTransport;
    if (httpVersion === "1.1") return create({ ...options, httpVersion, nodeOptions: { ...nodeOptions, agent } });
    const sessionManager = new Http2SessionManager(proxy.url, undefined, nodeOptions);
    sessions.push(sessionManager);
    return create({ ...options, httpVersion, sessionManager });
  };
  return {
    list: [
      { label: "Connect over HTTP/1.1", name: "connect-h1", transport: make("connect", "1.1") },
      { label: "Connect over HTTP/2", name: "connect-h2", transport: make("connect", "2") },
      { label: "Connect GET over HTTP/1.1", name: "connect-get-h1", transport: make("connect-get", "1.1") },
      { label: "Connect GET over HTTP/2", name: "connect-get-h2", transport: make("connect-get", "2") },
      { label: "gRPC-Web over HTTP/1.1", name: "grpc-web-h1", transport: make("grpc-web", "1.1") },
      { label: "gRPC-Web over HTTP/2", name: "grpc-web-h2", transport: make("grpc-web", "2") },
    ],
    close() {
      agent.destroy();
      for (const s of sessions) s.abort();
    },
  };
}

/** Creates a group named name through the proxy over HTTP/1.1 with headers; asserts it was made (diagnosis added to the message). */
export async function createThrough(
  proxy: RunningProxy,
  ca: TestCa,
  headers: Record<string, string>,
  name: string,
  diagnosis: string,
): Promise<{ uid: string; name: string }> {
  const res = await curl(proxy, ca, { method: "POST", path: "/iam/v2beta1/groups", http: "1.1", headers, body: { name } });
  assert.equal(res.status, 200, `create ${name}: ${JSON.stringify(res.body)}${diagnosis}`);
  return res.body;
}

/** What a proxy's suite needs beyond the shared steps. */
export interface DeploySuiteOptions {
  /** The server settings the deploy README tells operators to set behind this proxy. */
  serverEnv: Record<string, string>;
  /** Whether the proxy polls /readyz itself (HAProxy and Caddy; open-source nginx cannot). */
  activeHealthChecks: boolean;
}

/** A setting's documented default, in ms. */
function defaultMs(name: string): number {
  return Number(ENVIRONMENT_VARIABLES.find((v) => v.name === name)!.default);
}

/**
 * One proxy's end-to-end suite: the real server on port 0, the proxy on
 * loopback with its docs/deploy/ file, TLS in front with a fresh test CA, and
 * all four protocols called through it as their users call them.
 */
export function runDeploySuite(kind: ProxyKind, opts: DeploySuiteOptions): void {
  describe(`behind ${kind} with docs/deploy/`, { skip: skipUnlessInstalled(kind) }, () => {
    let dir: string;
    let ca: TestCa;
    let srv: TestServer;
    let proxy: RunningProxy;
    const logText: string[] = [];

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), `deploy-${kind}-`));
      ca = createTestCa(join(dir, "tls"));
      const logStream = new PassThrough();
      logStream.on("data", (chunk: Buffer) => logText.push(chunk.toString("utf8")));
      // With the metrics token set, the server itself would answer /metrics to a scraper holding it: the proxy must not ask.
      srv = await startTestServer({ env: { LOG_LEVEL: "info", ...METRICS_ENV, ...opts.serverEnv }, logStream });
      proxy = await startProxy(kind, { dir, upstreamPort: srv.port, ca });
    });
    after(async () => {
      await proxy?.stop();
      await srv?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const auth = () => ({ authorization: `Bearer ${srv.adminToken}` });
    const diagnose = () => `\n--- ${kind} output ---\n${proxy.output()}`;

    /** The server's rpc log line for a request id; waits for pino's asynchronous write (a liveness bound). */
    async function rpcLine(reqId: string): Promise<LogLine> {
      const find = () =>
        logText
          .join("")
          .split("\n")
          .filter((l) => l.startsWith("{"))
          .map((l) => parseLogLine(l))
          .filter((l) => l.msg === "rpc" && l.reqId === reqId);
      // The bound (30 s) only ends a wait for a line that never comes; a loaded machine writes it late, never not.
      for (let i = 0; i < 3_000 && find().length === 0; i++) await new Promise((r) => setTimeout(r, 10));
      const found = find();
      assert.equal(found.length, 1, `one rpc line for ${reqId}; the log:\n${logText.join("")}`);
      return found[0]!;
    }

    test("the proxy closes idle connections to the server before the server's own idle timeouts do", () => {
      const keepAlive = defaultMs("PLATFORM_KEEP_ALIVE_TIMEOUT_MS");
      const http2Idle = defaultMs("PLATFORM_HTTP2_IDLE_TIMEOUT_MS");
      for (const ms of upstreamIdleTimeoutsMs(kind)) {
        assert.ok(
          ms < keepAlive && ms < http2Idle,
          `${kind} keeps idle connections ${ms} ms; the server closes them after ${keepAlive} ms (HTTP/1.1) / ${http2Idle} ms (HTTP/2)`,
        );
      }
    });

    test("/readyz, the health checks' target, answers 200 through the proxy", async () => {
      const res = await curl(proxy, ca, { path: "/readyz", http: "1.1" });
      assert.equal(res.status, 200, `body: ${JSON.stringify(res.body)}${diagnose()}`);
      assert.deepEqual(res.body, { status: "ready" });
    });

    for (const http of ["1.1", "2"] as const) {
      test(`REST over HTTP/${http} (curl): a group is created and read back; a missing one is 404 with its ErrorInfo`, async () => {
        const created = await curl(proxy, ca, {
          method: "POST",
          path: "/iam/v2beta1/groups",
          http,
          headers: auth(),
          body: { name: `rest-h${http}` },
        });
        assert.equal(created.status, 200, `body: ${JSON.stringify(created.body)}${diagnose()}`);
        assert.equal(created.httpVersion, http, "the client spoke the HTTP version under test to the proxy");
        const got = await curl(proxy, ca, { path: `/iam/v2beta1/groups/${created.body.uid}`, http, headers: auth() });
        assert.equal(got.status, 200);
        assert.equal(got.body.name, `rest-h${http}`);
        assertRestError(await curl(proxy, ca, { path: `/iam/v2beta1/groups/${MISSING_UID}`, http, headers: auth() }), 404, 5, "NOT_FOUND");
      });
    }

    test("gRPC (grpc-js over TLS): GetGroup; a NOT_FOUND keeps its grpc-status-details-bin (ErrorInfo) through the proxy", async () => {
      const client = grpcGroups(proxy, ca, srv.adminToken);
      try {
        const created = await client.createGroup("grpc");
        assert.equal(created.err, null, `${created.err?.message}${diagnose()}`);
        const ok = await client.getGroup(created.res!.uid);
        assert.equal(ok.err, null, `${ok.err?.message}${diagnose()}`);
        assert.equal(ok.res?.name, "grpc");
        const missing = await client.getGroup(MISSING_UID);
        assert.equal(missing.err?.code, grpc.status.NOT_FOUND, `${missing.err?.message}${diagnose()}`);
        const status = grpcStatus(missing.err!);
        assert.equal(status.code, 5);
        const info = status.details.find((d) => d.$typeName === "google.rpc.ErrorInfo") as { reason?: string } | undefined;
        assert.equal(info?.reason, "NOT_FOUND");
      } finally {
        client.close();
      }
    });

    test("Connect (POST and GET) and gRPC-Web (connect-node) over HTTP/1.1 and HTTP/2: GetGroup; a NOT_FOUND keeps its ErrorInfo", async (t) => {
      const transports = connectTransports(proxy, ca, srv.adminToken);
      try {
        for (const { label, name, transport } of transports.list) {
          await t.test(label, async () => {
            const client = createClient(GroupsService, transport);
            const group = await client.createGroup({ parent: "", group: { name } });
            assert.equal((await client.getGroup({ uid: group.uid })).name, name);
            const ce = await connectError(client.getGroup({ uid: MISSING_UID }));
            assert.equal(ce.code, Code.NotFound, `${ce.message}${diagnose()}`);
            assert.deepEqual(
              ce.findDetails(ErrorInfoSchema).map((d) => d.reason),
              ["NOT_FOUND"],
            );
          });
        }
      } finally {
        transports.close();
      }
    });

    test("the server logs the real client's address, not the proxy's and not one the client wrote in X-Forwarded-For or Forwarded", async () => {
      const spoof = { "x-forwarded-for": SPOOFED, forwarded: `for=${SPOOFED}` };
      for (const http of ["1.1", "2"] as const) {
        const reqId = `deploy-${kind}-rest-h${http}`;
        const res = await curl(proxy, ca, {
          path: `/iam/v2beta1/groups/${MISSING_UID}`,
          http,
          headers: { ...auth(), ...spoof, "x-request-id": reqId },
        });
        assert.equal(res.status, 404, `body: ${JSON.stringify(res.body)}${diagnose()}`);
        const line = await rpcLine(reqId);
        assert.equal(line.remoteAddress, CLIENT_ADDRESS, `REST over HTTP/${http}: ${JSON.stringify(line)}`);
      }

      // Native gRPC (nginx's grpc_pass path) from CLIENT_ADDRESS: connect-node's gRPC transport can bind a
      // source address, grpc-js cannot. (From 127.0.0.1, the trusted proxy's own address, a client is
      // indistinguishable from the proxy, and the server rightly believes the hop it wrote.)
      // tls.connect takes net.connect's localAddress; Node's http2 option types leave it out.
      const fromClient = { ca: ca.ca, localAddress: CLIENT_ADDRESS };
      const sessionManager = new Http2SessionManager(proxy.url, undefined, fromClient);
      try {
        const client = createClient(GroupsService, createGrpcTransport({ baseUrl: proxy.url, sessionManager }));
        const reqId = `deploy-${kind}-grpc`;
        const headers = { ...auth(), ...spoof, "x-request-id": reqId };
        const err = await connectError(client.getGroup({ uid: MISSING_UID }, { headers }));
        assert.equal(err.code, Code.NotFound, `${err.message}${diagnose()}`);
        const line = await rpcLine(reqId);
        assert.equal(line.protocol, "grpc");
        assert.equal(line.remoteAddress, CLIENT_ADDRESS, `gRPC: ${JSON.stringify(line)}`);
      } finally {
        sessionManager.abort();
      }
    });

    test("/metrics is not published: the proxy answers 404 itself, in the API's error shape, for every spelling", async () => {
      // Spellings the server itself serves to the token's holder (checked first, directly), then ones a proxy might
      // normalize into /metrics. Through the proxy none gets the numbers, and the served spellings never reach
      // the server: the answer has no x-request-id, which the server puts on every answer of its own.
      const served = ["/metrics", "/metrics?name=x", "/%6detrics", "/%6D%65%74rics"];
      // Directly as the proxy connects (behind HAProxy the server wants a PROXY header first).
      const origin = { port: srv.port, proxyHeader: opts.serverEnv.PLATFORM_PROXY_PROTOCOL ? Buffer.from("PROXY UNKNOWN\r\n") : undefined };
      for (const path of served) {
        const direct = await http1From(origin, "GET", path, METRICS_AUTH);
        assert.equal(direct.status, 200, `${path} directly: ${direct.text}`);
        assert.match(direct.text, /^# TYPE platform_requests_total counter$/m, `${path} directly`);
      }
      for (const http of ["1.1", "2"] as const) {
        for (const path of [...served, "//metrics", "/./metrics", "/x/../metrics", "/metrics/"]) {
          const res = await curl(proxy, ca, { path, http, headers: METRICS_AUTH });
          const where = `${path} over HTTP/${http}${diagnose()}`;
          assert.doesNotMatch(typeof res.body === "string" ? res.body : JSON.stringify(res.body), /platform_/, where);
          assertRestError(res, 404, 5, "ROUTE_NOT_FOUND");
          if (served.includes(path)) {
            assert.equal(res.headers.get("x-request-id"), null, `${where}: answered by the server, not the proxy`);
            assert.match(res.headers.get("content-type") ?? "", /^application\/json/, where);
          }
        }
      }
    });

    test("the proxy's own log names no failure of the upstream", () => {
      const out = proxy.output();
      assert.ok(
        !/upstream prematurely closed|no live upstreams|Connection refused|is DOWN|unhealthy|no upstreams available|unexpected status code/i.test(
          out,
        ),
        out,
      );
    });

    // Last: health.shutdown() is what SIGTERM does first, and it cannot be undone.
    test(
      "once /readyz answers 503 (a drain begins), the proxy's own health check stops sending it calls",
      { skip: !opts.activeHealthChecks && `${kind} has no active health checks` },
      async () => {
        const created = await createThrough(proxy, ca, auth(), "drained", diagnose());
        const read = () => curl(proxy, ca, { path: `/iam/v2beta1/groups/${created.uid}`, http: "1.1", headers: auth() });
        srv.server.health.shutdown();
        // The checks run every 2 s; the bound only ends a proxy that never notices.
        let last = await read();
        for (let i = 0; i < 300 && last.status !== 503; i++) {
          await new Promise((r) => setTimeout(r, 100));
          last = await read();
        }
        assert.equal(last.status, 503, `the proxy still forwards calls to a server whose /readyz says 503${diagnose()}`);
        // The server keeps serving calls while it drains; this 503 is the proxy's, not an API error body.
        assert.ok(typeof last.body !== "object" || !("code" in (last.body as object)), JSON.stringify(last.body));
      },
    );
  });
}
