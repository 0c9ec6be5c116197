/**
 * TLS on the one port (PLATFORM_TLS_CERT_FILE/PLATFORM_TLS_KEY_FILE), called
 * by the clients users have, each trusting a throwaway test CA: curl over
 * HTTP/1.1 and HTTP/2, Node's fetch, @grpc/grpc-js, Python grpcio, and
 * connect-node's Connect, gRPC-Web and gRPC transports over h2 and HTTP/1.1.
 * TLS 1.1 and plaintext are refused cleanly; tokens keep verifying across a
 * restart while the base URL is unchanged. Reloads: test/protocols/tls-reload.test.ts.
 */
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import tls from "node:tls";
import { promisify } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { CreateGroupRequestSchema, GetGroupRequestSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { assertRestError, connectError, within } from "../support/assertions.js";
import { grpcStatus } from "../support/grpc.js";
import { startTestServer } from "../support/server.js";
import { createTestCa, type TestCa } from "../support/test-ca.js";
import { handshake, startTlsServer, startTlsServerWithCa, type TlsTestServer } from "../support/tls-server.js";

const run = promisify(execFile);
const MISSING = "f".repeat(40);

let dir: string;
let ca: TestCa;
let srv: TlsTestServer;
let close: () => Promise<void>;
/** https://localhost:<port>: the name the test certificate carries. */
let base: string;

before(async () => {
  ({ dir, ca, srv, close } = await startTlsServerWithCa());
  base = `https://localhost:${srv.port}`;
});
after(() => close?.());

/** curl trusting the test CA; prints the body then a line with the HTTP version and status. */
async function curl(...args: string[]): Promise<{ version: string; status: number; body: string }> {
  const { stdout } = await run("curl", ["-sS", "--cacert", ca.caFile, "-w", "\n%{http_version} %{http_code}", ...args], {
    timeout: 30_000,
  });
  const cut = stdout.lastIndexOf("\n");
  const [version, status] = stdout.slice(cut + 1).split(" ");
  return { version: version!, status: Number(status), body: stdout.slice(0, cut) };
}

describe("REST over TLS", () => {
  for (const [flag, version] of [
    ["--http1.1", "1.1"],
    ["--http2", "2"],
  ] as const) {
    test(`curl ${flag} --cacert: a group is created, and a missing one is 404 in the spec's error shape`, async () => {
      const auth = ["-H", `authorization: Bearer ${srv.adminToken}`];
      const created = await curl(
        flag,
        ...auth,
        "-H",
        "content-type: application/json",
        "-d",
        '{"name":"tls org"}',
        `${base}/iam/v2beta1/groups`,
      );
      assert.equal(created.version, version);
      assert.equal(created.status, 200, created.body);
      assert.equal(JSON.parse(created.body).name, "tls org");
      const missing = await curl(flag, ...auth, `${base}/iam/v2beta1/groups/${MISSING}`);
      assert.equal(missing.version, version);
      assertRestError({ status: missing.status, body: JSON.parse(missing.body), headers: new Headers() }, 404, 5, "NOT_FOUND");
    });
  }

  test("Node's fetch (undici) trusting the CA through NODE_EXTRA_CA_CERTS", async () => {
    const script = `const r = await fetch(process.argv[1], { headers: { authorization: "Bearer " + process.env.TOKEN } });
      process.stdout.write(JSON.stringify({ status: r.status, body: await r.json() }));`;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script, `${base}/iam/v2beta1/groups/${MISSING}`], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: ca.caFile, TOKEN: srv.adminToken },
      timeout: 30_000,
    });
    const { status, body } = JSON.parse(stdout) as { status: number; body: unknown };
    assertRestError({ status, body, headers: new Headers() }, 404, 5, "NOT_FOUND");
  });

  test("the start-up line says https://, and the default base URL is https://localhost:<port>", async () => {
    const line = await srv.logs.next((l) => typeof l.msg === "string" && l.msg.includes(" listening on "));
    assert.match(String(line.msg), /listening on https:\/\/127\.0\.0\.1:\d+ /);
    assert.equal(line.docs, `https://localhost:${srv.port}/docs`);
    assert.equal(srv.url, `https://127.0.0.1:${srv.port}`);
    const discovery = await curl("--http1.1", `${base}/.well-known/openid-configuration`);
    assert.equal(JSON.parse(discovery.body).issuer, "https://localhost:0", "the configured base URL (PORT=0 in tests)");
  });
});

describe("gRPC over TLS", () => {
  test("@grpc/grpc-js with credentials.createSsl(ca): a call succeeds, an error carries its details, the log names the client's address", async () => {
    const Ctor = grpc.makeGenericClientConstructor(
      Object.fromEntries(GroupsService.methods.map((m) => [m.localName, methodDefinition(GroupsService, m)])),
      GroupsService.typeName,
    );
    const client = new Ctor(`localhost:${srv.port}`, grpc.credentials.createSsl(ca.ca));
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${srv.adminToken}`);
    const call = (method: string, req: unknown) =>
      new Promise<unknown>((resolve, reject) =>
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (client as any)[method](req, md, (err: grpc.ServiceError | null, res: unknown) => (err ? reject(err) : resolve(res))),
      );
    try {
      const created = (await call("createGroup", create(CreateGroupRequestSchema, { group: { name: "grpc tls org" } }))) as {
        uid: string;
        name: string;
      };
      assert.equal(created.name, "grpc tls org");
      const err = (await call("getGroup", create(GetGroupRequestSchema, { uid: MISSING })).then(
        () => assert.fail("found"),
        (e: unknown) => e,
      )) as grpc.ServiceError;
      assert.equal(err.code, grpc.status.NOT_FOUND);
      const status = grpcStatus(err);
      assert.equal((status.details[0] as { reason?: string }).reason, "NOT_FOUND");
      const line = await srv.logs.next((l) => l.rpc === `${GroupsService.typeName}/GetGroup` && l.protocol === "grpc");
      assert.equal(line.remoteAddress, "127.0.0.1", "grpc-js sees the TCP peer through the TLS socket");
    } finally {
      client.close();
    }
  });

  test("Python grpcio trusting the CA: Health/Check and an error's grpc-status-details-bin", { skip: pythonGrpcMissing() }, async () => {
    const request = Buffer.from(toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: "not-a-uid" }))).toString("hex");
    const script = `
import grpc, json, os, sys
creds = grpc.ssl_channel_credentials(root_certificates=open(sys.argv[2], "rb").read())
with grpc.secure_channel(sys.argv[1], creds) as channel:
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    health = check(b"", timeout=10).hex()
    get = channel.unary_unary("/${GroupsService.typeName}/GetGroup")
    try:
        get(bytes.fromhex(sys.argv[3]), metadata=(("authorization", "Bearer " + os.environ["TOKEN"]),), timeout=10)
        error = None
    except grpc.RpcError as e:
        error = {"code": e.code().name, "details": [k for k, _ in e.trailing_metadata() or () if k == "grpc-status-details-bin"]}
print(json.dumps({"health": health, "error": error}))
`;
    const { stdout } = await run("/usr/bin/python3", ["-c", script, `localhost:${srv.port}`, ca.caFile, request], {
      env: { ...process.env, TOKEN: srv.adminToken },
      timeout: 60_000,
    });
    assert.deepEqual(JSON.parse(stdout), { health: "0801", error: { code: "INVALID_ARGUMENT", details: ["grpc-status-details-bin"] } });
  });
});

describe("connect-node over TLS", () => {
  const transports: [string, () => Transport][] = [
    ["Connect over h2", () => createConnectTransport({ baseUrl: base, httpVersion: "2", nodeOptions: { ca: ca.ca } })],
    ["Connect over HTTP/1.1", () => createConnectTransport({ baseUrl: base, httpVersion: "1.1", nodeOptions: { ca: ca.ca } })],
    [
      "Connect GET over h2",
      () => createConnectTransport({ baseUrl: base, httpVersion: "2", useHttpGet: true, nodeOptions: { ca: ca.ca } }),
    ],
    ["gRPC-Web over h2", () => createGrpcWebTransport({ baseUrl: base, httpVersion: "2", nodeOptions: { ca: ca.ca } })],
    ["gRPC-Web over HTTP/1.1", () => createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1", nodeOptions: { ca: ca.ca } })],
    ["gRPC over h2", () => createGrpcTransport({ baseUrl: base, nodeOptions: { ca: ca.ca } })],
  ];
  for (const [name, make] of transports) {
    test(`${name}: a group is created; a missing one is NotFound with its ErrorInfo`, async () => {
      const headers = { authorization: `Bearer ${srv.adminToken}` };
      const client = createClient(GroupsService, make());
      const created = await client.createGroup({ group: { name: `${name.toLowerCase().replace(/[^a-z0-9]+/g, " ")}` } }, { headers });
      assert.match(created.uid, /^[0-9a-f]{40}$/);
      const err = await connectError(client.getGroup({ uid: MISSING }, { headers }));
      assert.equal(err.code, Code.NotFound);
      assert.deepEqual(
        err.findDetails(ErrorInfoSchema).map((d) => d.reason),
        ["NOT_FOUND"],
      );
    });
  }
});

describe("what the TLS port refuses", () => {
  test("TLS 1.1 is refused by the server (a protocol_version alert); TLS 1.2 and 1.3 are served", async () => {
    // SECLEVEL=0 lets this client offer TLS 1.1 at all: the refusal must come from the server.
    const old = handshake(srv.port, ca.ca, { minVersion: "TLSv1", maxVersion: "TLSv1.1", ciphers: "DEFAULT@SECLEVEL=0" });
    await assert.rejects(old, (err: NodeJS.ErrnoException) => /ALERT_PROTOCOL_VERSION/.test(String(err.code)));
    assert.equal((await handshake(srv.port, ca.ca, { maxVersion: "TLSv1.2" })).version, "TLSv1.2");
    assert.equal((await handshake(srv.port, ca.ca)).version, "TLSv1.3");
    assert.equal((await handshake(srv.port, ca.ca, { ALPNProtocols: ["h2"] })).alpn, "h2");
  });

  test("plaintext HTTP/1.1 gets a 400 saying to use https; h2c is closed; neither hangs", async () => {
    const res = await within(
      30_000,
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.get(`http://127.0.0.1:${srv.port}/healthz`, (r) => {
          let body = "";
          r.setEncoding("utf8").on("data", (c: string) => (body += c));
          r.on("end", () => resolve({ status: r.statusCode!, body }));
        });
        req.on("error", reject);
      }),
      "plaintext HTTP/1.1",
    );
    assertRestError({ status: res.status, body: JSON.parse(res.body), headers: new Headers() }, 400, 3, "TLS_REQUIRED");

    const session = http2.connect(`http://127.0.0.1:${srv.port}`);
    session.on("error", () => {});
    await within(30_000, once(session, "close"), "h2c to the TLS port closes");
    assert.equal((await curl("--http1.1", `${base}/healthz`)).status, 200, "the server serves on");
  });
});

describe("PROXY protocol in front of TLS", () => {
  test("the address a PROXY header names is the client's, read before the handshake (HAProxy send-proxy to a TLS backend)", async () => {
    const proxied = await startTlsServer(ca, { env: { PLATFORM_PROXY_PROTOCOL: "on" } });
    try {
      const raw = net.connect(proxied.port, "127.0.0.1");
      await once(raw, "connect");
      raw.write("PROXY TCP4 203.0.113.44 127.0.0.1 40000 443\r\n");
      const secure = tls.connect({ socket: raw, servername: "localhost", ca: ca.ca, ALPNProtocols: ["http/1.1"] });
      await once(secure, "secureConnect");
      secure.write(
        `GET /iam/v2beta1/groups/${MISSING} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${proxied.adminToken}\r\nConnection: close\r\n\r\n`,
      );
      let answer = "";
      for await (const chunk of secure) answer += String(chunk);
      assert.match(answer, /^HTTP\/1\.1 404 /);
      const line = await proxied.logs.next((l) => l.rpc === `${GroupsService.typeName}/GetGroup`);
      assert.equal(line.remoteAddress, "203.0.113.44");
    } finally {
      await proxied.close();
    }
  });
});

describe("tokens and the base URL across a restart with TLS", () => {
  test("a token keeps verifying while the base URL is unchanged; a new base URL refuses it (audience, and issuer when PLATFORM_AUTH_URL follows it)", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "platform-tls-restart-"));
    let server = await startTlsServer(ca, { dataDir, env: { PLATFORM_BASE_URL: "https://api.example.test" } });
    const { databaseUrl } = server;
    const token = server.adminToken;
    await server.close();
    /** GET of a missing group with the first run's token on a restart with env. */
    const getAfterRestart = async (env: Record<string, string>) => {
      server = await startTlsServer(ca, { dataDir, databaseUrl, env });
      const res = await curl(
        "--http1.1",
        "-H",
        `authorization: Bearer ${token}`,
        `https://localhost:${server.port}/iam/v2beta1/groups/${MISSING}`,
      );
      await server.close();
      return { status: res.status, body: JSON.parse(res.body), headers: new Headers() };
    };
    try {
      assert.equal(
        (await getAfterRestart({ PLATFORM_BASE_URL: "https://api.example.test" })).status,
        404,
        "authenticated: the group is missing",
      );
      const audience = await getAfterRestart({
        PLATFORM_BASE_URL: "https://other.example.test",
        PLATFORM_AUTH_URL: "https://api.example.test",
      });
      assert.match(assertRestError(audience, 401, 16, "UNAUTHENTICATED").message, /issued for another audience/);
      const issuer = await getAfterRestart({ PLATFORM_BASE_URL: "https://other.example.test" });
      assert.match(assertRestError(issuer, 401, 16, "UNAUTHENTICATED").message, /issued by another address/);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("start-up with a bad pair", () => {
  test("a missing key file or a mismatched pair fails the start with one line naming the file", async () => {
    const other = createTestCa(join(dir, "other"));
    const cases: [Record<string, string>, RegExp][] = [
      [
        { PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: join(dir, "absent.key") },
        /cannot read PLATFORM_TLS_KEY_FILE .*absent\.key: no such file/,
      ],
      [{ PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: other.keyFile }, /is unusable: .*key values mismatch/],
    ];
    for (const [env, message] of cases) {
      await assert.rejects(
        startTestServer({ env }),
        (err: Error) => err.name === "StartupError" && message.test(err.message) && !err.message.includes("\n"),
      );
    }
  });
});

/** Why the Python test cannot run here, or false. */
function pythonGrpcMissing(): string | false {
  if (process.env.CI) return false;
  try {
    execFileSync("/usr/bin/python3", ["-c", "import grpc"], { stdio: "ignore" });
    return false;
  } catch {
    return "python3-grpcio not installed (apt-get install python3-grpcio; .ci/run does)";
  }
}
