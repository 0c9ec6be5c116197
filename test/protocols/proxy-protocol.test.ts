/**
 * Issue 22 §3: with PLATFORM_PROXY_PROTOCOL=on every connection starts with
 * a PROXY protocol v1 or v2 header (HAProxy send-proxy and send-proxy-v2),
 * whose client address becomes the connection's: the log line and the
 * per-address limits see it, over HTTP/1.1 and h2c gRPC alike. A connection
 * without one, or with a malformed or oversized one, or from a peer that is
 * not a trusted proxy when some are listed, is closed unanswered.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import type net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { DEFAULT_TIMEOUTS } from "../../src/server/http/one-port.js";
import { MAX_V2_BYTES } from "../../src/server/http/proxy-protocol.js";
import { createCaller, type Caller } from "../support/principals.js";
import { answeredOrClosed, connectFrom, headerRelay, http1From, LogLines, type Origin } from "../support/proxied-calls.js";
import { PROTOCOLS, registerFrom, wrongInviteCode } from "../support/register-calls.js";
import { createGroup, setDefaultToken, startTestServer, type TestServer } from "../support/server.js";
import { createTestCa } from "../support/test-ca.js";

const SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

/** A version 2 header: command 0 (LOCAL) or 1 (PROXY), its family byte, and the address block (plus any TLVs). */
function v2(command: number, family: number, body: Buffer): Buffer {
  const head = Buffer.concat([SIGNATURE, Buffer.from([0x20 | command, family, 0, 0])]);
  head.writeUInt16BE(body.length, 14);
  return Buffer.concat([head, body]);
}

/** A v2 TCP4 address block: source, destination, ports. */
function tcp4(source: string, port: number): Buffer {
  const block = Buffer.alloc(12);
  block.set(source.split(".").map(Number), 0);
  block.set([127, 0, 0, 1], 4);
  block.writeUInt16BE(port, 8);
  block.writeUInt16BE(443, 10);
  return block;
}

/** A v2 TCP6 address block for a fully written source address (eight groups). */
function tcp6(source: string, port: number): Buffer {
  const block = Buffer.alloc(36);
  source.split(":").forEach((group, i) => block.writeUInt16BE(parseInt(group, 16), 2 * i));
  block[31] = 1;
  block.writeUInt16BE(port, 32);
  block.writeUInt16BE(443, 34);
  return block;
}

/** Writes bytes on a fresh connection from origin; resolves what came back before the server closed it. */
async function answerTo(origin: Origin, bytes: Buffer | string): Promise<string> {
  const socket = connectFrom(origin);
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  socket.on("error", () => {});
  socket.write(bytes);
  await once(socket, "close");
  return Buffer.concat(chunks).toString("latin1");
}

let srv: TestServer;
let org: string;
const logs = new LogLines();
/** Callers made at set-up; each test's few failures stay under the per-caller limit (10) with one of its own. */
const callerPool: Caller[] = [];
let callers = 0;
const caller = async (): Promise<Caller> => callerPool[callers++ % callerPool.length]!;

before(async () => {
  // A short first-bytes timeout: the test of a header that never completes waits for it.
  srv = await startTestServer({
    env: { PLATFORM_PROXY_PROTOCOL: "on", LOG_LEVEL: "info" },
    logStream: logs.stream,
    timeouts: { ...DEFAULT_TIMEOUTS, firstBytes: 500 },
  });
  // The helpers' set-up calls (fetch) go through a relay that sends a v2 LOCAL header, as a health check would.
  const relay = await headerRelay(srv.port, v2(0, 0x00, Buffer.alloc(0)));
  setDefaultToken(relay.port, srv.adminToken);
  try {
    org = (await createGroup(relay.url, null, "proxy protocol org")).uid;
    for (let i = 0; i < 8; i++) callerPool.push(await createCaller({ ...srv, url: relay.url }, org, `proxy protocol caller ${i}`, null));
  } finally {
    await relay.close();
  }
});
after(() => srv.close());

describe("PROXY headers name the client", () => {
  const cases: [string, Buffer, string][] = [
    ["v1 TCP4", Buffer.from("PROXY TCP4 203.0.113.10 127.0.0.1 40000 443\r\n"), "203.0.113.10"],
    ["v1 TCP6", Buffer.from("PROXY TCP6 2001:db8::10 ::1 40000 443\r\n"), "2001:db8::10"],
    ["v1 UNKNOWN (the TCP peer)", Buffer.from("PROXY UNKNOWN\r\n"), "127.0.0.1"],
    [
      "v2 TCP4 with a TLV",
      v2(1, 0x11, Buffer.concat([tcp4("203.0.113.11", 40001), Buffer.from([0x01, 0, 2, 0x68, 0x32])])),
      "203.0.113.11",
    ],
    ["v2 TCP6", v2(1, 0x21, tcp6("2001:db8:0:0:0:0:0:11", 40002)), "2001:db8::11"],
    ["v2 LOCAL (a health check: the TCP peer)", v2(0, 0x00, Buffer.alloc(0)), "127.0.0.1"],
  ];
  for (const [name, header, client] of cases) {
    test(`${name}, then HTTP/1.1 (REST, Connect, gRPC-Web) and h2c gRPC`, async () => {
      const who = await caller();
      for (const protocol of PROTOCOLS) {
        const line = await registerFrom(logs, protocol, { port: srv.port, proxyHeader: header }, who.token, wrongInviteCode());
        assert.deepEqual(line, { code: "permission_denied", remoteAddress: client }, protocol);
      }
      const health = await http1From({ port: srv.port, proxyHeader: header }, "GET", "/healthz", {});
      assert.equal(health.status, 200);
    });
  }

  test("a header that arrives byte by byte, and one sent in the same packet as the request", async () => {
    const origin = { port: srv.port };
    const socket = connectFrom(origin);
    const header = Buffer.from("PROXY TCP4 203.0.113.12 127.0.0.1 40000 443\r\n");
    for (const byte of header) socket.write(Buffer.from([byte]));
    socket.write("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    await once(socket, "close");
    assert.match(Buffer.concat(chunks).toString(), /^HTTP\/1\.1 200 /);
    const together = await answerTo(
      origin,
      Buffer.concat([header, Buffer.from("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")]),
    );
    assert.match(together, /^HTTP\/1\.1 200 /);
  });

  test("the forwarding headers of a client named by a PROXY header are not believed (it is no trusted proxy)", async () => {
    const header = Buffer.from("PROXY TCP4 203.0.113.13 127.0.0.1 40000 443\r\n");
    const line = await registerFrom(logs, "rest", { port: srv.port, proxyHeader: header }, (await caller()).token, wrongInviteCode(), {
      "x-forwarded-for": "198.51.100.13",
    });
    assert.equal(line.remoteAddress, "203.0.113.13");
  });
});

describe("connections without a valid PROXY header are closed unanswered", () => {
  const origin = () => ({ port: srv.port });
  const refused: [string, Buffer | string][] = [
    ["plain HTTP/1.1", "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"],
    ["the HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"],
    ["a v1 header longer than 107 bytes", `PROXY UNKNOWN ${"x".repeat(200)}\r\nGET /healthz HTTP/1.1\r\n\r\n`],
    ["a v1 header with garbage addresses", "PROXY TCP4 999.1.1.1 127.0.0.1 1 2\r\nGET /healthz HTTP/1.1\r\n\r\n"],
    ["a v1 header of an unknown protocol", "PROXY UDP4 1.1.1.1 127.0.0.1 1 2\r\nGET /healthz HTTP/1.1\r\n\r\n"],
    ["a v2 header over the size bound", v2(1, 0x11, Buffer.alloc(MAX_V2_BYTES))],
    ["a v2 header announcing 64 KiB", Buffer.concat([SIGNATURE, Buffer.from([0x21, 0x11, 0xff, 0xff])])],
    ["a v2 header of version 3", Buffer.concat([SIGNATURE, Buffer.from([0x31, 0x11, 0, 12]), tcp4("203.0.113.1", 1)])],
    ["random bytes", Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256))],
  ];
  for (const [name, bytes] of refused) {
    test(name, async () => {
      assert.equal(await answerTo(origin(), bytes), "");
    });
  }

  test("a header never completed is closed at the first-bytes timeout; the server serves on", async () => {
    assert.equal(await answerTo(origin(), "PROXY TCP4 203.0.113.1 "), "");
    const health = await http1From({ port: srv.port, proxyHeader: Buffer.from("PROXY UNKNOWN\r\n") }, "GET", "/healthz", {});
    assert.equal(health.status, 200);
  });
});

describe("with trusted proxies listed", () => {
  let guarded: TestServer;
  before(async () => {
    guarded = await startTestServer({ env: { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TRUSTED_PROXIES: "127.0.0.2" } });
  });
  after(() => guarded.close());

  test("a PROXY header from a peer not in the list is closed; from one in it, served", async () => {
    const header = Buffer.from(
      "PROXY TCP4 203.0.113.20 127.0.0.1 40000 443\r\nGET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert.equal(await answerTo({ port: guarded.port, from: "127.0.0.3" }, header), "");
    assert.match(await answerTo({ port: guarded.port, from: "127.0.0.2" }, header), /^HTTP\/1\.1 200 /);
  });
});

test("PROXY header, then TLS: the carried address on HTTP/1.1 over TLS and on gRPC over h2 (ALPN)", async () => {
  const caDir = mkdtempSync(join(tmpdir(), "proxy-tls-"));
  const ca = createTestCa(caDir);
  const secure = await startTestServer({
    env: { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: ca.keyFile, LOG_LEVEL: "info" },
    logStream: logs.stream,
  });
  try {
    const token = (await secure.server.tokens.mint(secure.server.adminSubject)).token;
    for (const protocol of PROTOCOLS) {
      const origin = { port: secure.port, tlsCa: ca.ca, proxyHeader: v2(1, 0x11, tcp4("203.0.113.40", 40040)) };
      const line = await registerFrom(logs, protocol, origin, token, wrongInviteCode());
      assert.equal(line.remoteAddress, "203.0.113.40", protocol);
    }
  } finally {
    await secure.close();
    rmSync(caDir, { recursive: true, force: true });
  }
});

test("per-address connection caps count the address a PROXY header carried", async () => {
  const capped = await startTestServer({ env: { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_MAX_CONNECTIONS_PER_ADDRESS: "1" } });
  const open: net.Socket[] = [];
  const request = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
  const answered = async (client: string) => {
    const socket = connectFrom({ port: capped.port, proxyHeader: Buffer.from(`PROXY TCP4 ${client} 127.0.0.1 40000 443\r\n`) });
    open.push(socket);
    socket.write(request);
    return answeredOrClosed(socket);
  };
  try {
    assert.deepEqual([await answered("203.0.113.30"), await answered("203.0.113.31"), await answered("203.0.113.30")], [true, true, false]);
  } finally {
    for (const socket of open) socket.destroy();
    await capped.close();
  }
});
