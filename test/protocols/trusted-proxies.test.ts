/**
 * Issue 22 §3: behind a trusted proxy (PLATFORM_TRUSTED_PROXIES) the client
 * address comes from X-Forwarded-For (or Forwarded, PLATFORM_FORWARDED_HEADER), on every protocol; from
 * anyone else those headers are ignored. The address is the one the log line
 * shows and the invite attempt limiter counts under, so clients behind one
 * proxy no longer share a bucket and no client escapes its own by spoofing.
 */
import assert from "node:assert/strict";
import type net from "node:net";
import { after, before, describe, test } from "node:test";
import { INVITE_ADDRESS_FAILURE_LIMIT, INVITE_FAILURE_LIMIT } from "../../src/services/auth/auth.js";
import { createCaller, type Caller } from "../support/principals.js";
import { answeredOrClosed, connectFrom, http2From, LogLines, type Origin } from "../support/proxied-calls.js";
import { PROTOCOLS, registerFrom, wrongInviteCode, type Protocol } from "../support/register-calls.js";
import { createGroup, startTestServer, type TestServer } from "../support/server.js";

const PROXY = "127.0.0.2";
let srv: TestServer;
let org: string;
const logs = new LogLines();
let callers = 0;

before(async () => {
  srv = await startTestServer({
    env: { PLATFORM_TRUSTED_PROXIES: `${PROXY}, 10.0.0.0/8, fd00::/8`, LOG_LEVEL: "info" },
    logStream: logs.stream,
  });
  org = (await createGroup(srv.url, null, "trusted proxies org")).uid;
});
after(() => srv.close());

const caller = (): Promise<Caller> => createCaller(srv, org, `proxied caller ${++callers}`, null);
const from = (address: string): Origin => ({ port: srv.port, from: address });
/** One Register with a wrong code: the log line's code and remoteAddress. */
const failOnce = async (protocol: Protocol, origin: Origin, who: Caller, headers: Record<string, string> = {}) =>
  registerFrom(logs, protocol, origin, who.token, wrongInviteCode(), headers);

/** Fails `count` times from origin with these headers, a fresh caller every INVITE_FAILURE_LIMIT failures; returns the codes. */
async function failMany(count: number, origin: Origin, headers: Record<string, string> = {}): Promise<unknown[]> {
  const codes: unknown[] = [];
  let who = await caller();
  for (let i = 0; i < count; i++) {
    if (i > 0 && i % INVITE_FAILURE_LIMIT === 0) who = await caller();
    codes.push((await failOnce(PROTOCOLS[i % PROTOCOLS.length]!, origin, who, headers)).code);
  }
  return codes;
}

describe("client address on every protocol", () => {
  for (const protocol of PROTOCOLS) {
    test(`${protocol}: spoofed X-Forwarded-For and Forwarded from an untrusted peer are ignored`, async () => {
      const who = await caller();
      const spoofed = { "x-forwarded-for": "203.0.113.50", forwarded: "for=203.0.113.50" };
      assert.deepEqual(await failOnce(protocol, from("127.0.0.3"), who, spoofed), {
        code: "permission_denied",
        remoteAddress: "127.0.0.3",
      });
      const xff = await failOnce(protocol, from("127.0.0.3"), who, { "x-forwarded-for": "203.0.113.50" });
      assert.equal(xff.remoteAddress, "127.0.0.3");
    });

    test(`${protocol}: the same headers from a trusted proxy name the client`, async () => {
      const who = await caller();
      const viaXff = await failOnce(protocol, from(PROXY), who, { "x-forwarded-for": "203.0.113.50, 198.51.100.7" });
      assert.deepEqual(viaXff, { code: "permission_denied", remoteAddress: "198.51.100.7" });
      // Only X-Forwarded-For is read (the default): a Forwarded header the proxy passed through from the client is not.
      const both = { forwarded: "for=203.0.113.66", "x-forwarded-for": "198.51.100.9, 10.1.2.3" };
      assert.equal((await failOnce(protocol, from(PROXY), who, both)).remoteAddress, "198.51.100.9");
      assert.equal((await failOnce(protocol, from(PROXY), who, { forwarded: "for=203.0.113.66" })).remoteAddress, PROXY);
      // Malformed hops never become the address: the walk stops at the last proxy believed.
      assert.equal((await failOnce(protocol, from(PROXY), who, { "x-forwarded-for": "bogus, 10.9.9.9" })).remoteAddress, "10.9.9.9");
      assert.equal((await failOnce(protocol, from(PROXY), who, { "x-forwarded-for": "<script>" })).remoteAddress, PROXY);
      assert.equal((await failOnce(protocol, from(PROXY), who)).remoteAddress, PROXY);
    });
  }
});

test("REST and Connect over h2c from a trusted proxy (one HTTP/2 upstream) name the client too", async () => {
  const who = await caller();
  for (const [path, id] of [
    ["/auth/v1/register", "h2c-rest"],
    ["/platformapi.auth.v1.AuthService/Register", "h2c-connect"],
  ]) {
    const headers = {
      ":method": "POST",
      ":path": path,
      "content-type": "application/json",
      authorization: `Bearer ${who.token}`,
      "x-request-id": `${id}-${process.pid}`,
      "x-forwarded-for": "198.51.100.77",
    };
    assert.equal(await http2From(from(PROXY), headers, JSON.stringify({ code: wrongInviteCode() })), 403);
    assert.deepEqual(await logs.rpc(`${id}-${process.pid}`).then((l) => [l.code, l.remoteAddress]), ["permission_denied", "198.51.100.77"]);
  }
});

describe("the invite attempt limiter counts real clients", () => {
  test("two clients behind one trusted proxy no longer share a bucket: one is locked out, the other not", async () => {
    const clientA = { "x-forwarded-for": "198.51.100.1" };
    const codes = await failMany(INVITE_ADDRESS_FAILURE_LIMIT, from(PROXY), clientA);
    assert.deepEqual(new Set(codes), new Set(["permission_denied"]));
    for (const protocol of PROTOCOLS) {
      assert.deepEqual(await failOnce(protocol, from(PROXY), await caller(), clientA), {
        code: "resource_exhausted",
        remoteAddress: "198.51.100.1",
      });
      const clientB = await failOnce(protocol, from(PROXY), await caller(), { "x-forwarded-for": "198.51.100.2" });
      assert.deepEqual(clientB, { code: "permission_denied", remoteAddress: "198.51.100.2" }, protocol);
    }
  });

  test("a client behind the proxy cannot escape its bucket by writing its own forwarding headers", async () => {
    const codes = await failMany(INVITE_ADDRESS_FAILURE_LIMIT, from(PROXY), { "x-forwarded-for": "198.51.100.3" });
    assert.deepEqual(new Set(codes), new Set(["permission_denied"]));
    // What the proxy sends when the client wrote a header of its own: the client's part first, the proxy's appended.
    const spoofs: Record<string, string>[] = [
      { "x-forwarded-for": "203.0.113.99, 198.51.100.3" },
      { "x-forwarded-for": "198.51.100.3", forwarded: "for=203.0.113.99" },
      { "x-forwarded-for": "203.0.113.99,198.51.100.3", "x-real-ip": "203.0.113.99" },
      { "x-forwarded-for": "10.0.0.1, 198.51.100.3" },
    ];
    for (const headers of spoofs) {
      const line = await failOnce("rest", from(PROXY), await caller(), headers);
      assert.deepEqual(line, { code: "resource_exhausted", remoteAddress: "198.51.100.3" }, JSON.stringify(headers));
    }
  });

  test("a client connected directly cannot escape its bucket by spoofing", async () => {
    const direct = from("127.0.0.4");
    const codes = await failMany(INVITE_ADDRESS_FAILURE_LIMIT, direct);
    assert.deepEqual(new Set(codes), new Set(["permission_denied"]));
    for (const protocol of PROTOCOLS) {
      const spoofed = { "x-forwarded-for": "198.51.100.4", forwarded: "for=198.51.100.4" };
      assert.deepEqual(await failOnce(protocol, direct, await caller(), spoofed), {
        code: "resource_exhausted",
        remoteAddress: "127.0.0.4",
      });
    }
  });
});

/** Opens a connection from address and sends a request; resolves whether it was answered (false: closed unanswered). */
function answered(port: number, address: string, open: net.Socket[]): Promise<boolean> {
  const socket = connectFrom({ port, from: address });
  open.push(socket);
  socket.write("GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n");
  return answeredOrClosed(socket);
}

describe("connection caps", () => {
  test("a trusted proxy's connections count only in the total, not per address; others' still do", async () => {
    const capped = await startTestServer({ env: { PLATFORM_TRUSTED_PROXIES: PROXY, PLATFORM_MAX_CONNECTIONS_PER_ADDRESS: "2" } });
    const open: net.Socket[] = [];
    try {
      const viaProxy = [];
      for (let i = 0; i < 4; i++) viaProxy.push(await answered(capped.port, PROXY, open));
      assert.deepEqual(viaProxy, [true, true, true, true]);
      const direct = [];
      for (let i = 0; i < 3; i++) direct.push(await answered(capped.port, "127.0.0.5", open));
      assert.deepEqual(direct, [true, true, false]);
    } finally {
      for (const socket of open) socket.destroy();
      await capped.close();
    }
  });
});

describe("PLATFORM_FORWARDED_HEADER=forwarded: RFC 7239 only", () => {
  let fwd: TestServer;
  let fwdOrg: string;
  before(async () => {
    fwd = await startTestServer({
      env: { PLATFORM_TRUSTED_PROXIES: `${PROXY}, 10.0.0.0/8`, PLATFORM_FORWARDED_HEADER: "forwarded", LOG_LEVEL: "info" },
      logStream: logs.stream,
    });
    fwdOrg = (await createGroup(fwd.url, null, "forwarded org")).uid;
  });
  after(() => fwd.close());

  for (const protocol of PROTOCOLS) {
    test(`${protocol}: Forwarded names the client; X-Forwarded-For is not read; obfuscated hops end the walk`, async () => {
      const who = await createCaller(fwd, fwdOrg, `forwarded caller ${++callers}`, null);
      const origin = { port: fwd.port, from: PROXY };
      // A quoted IPv6 node with a port; proxies in the list are skipped.
      const quoted = { forwarded: 'for="[2001:DB8::7]:4711";proto=https, for=10.1.2.3', "x-forwarded-for": "198.51.100.9" };
      assert.equal((await registerFrom(logs, protocol, origin, who.token, wrongInviteCode(), quoted)).remoteAddress, "2001:db8::7");
      const xffOnly = { "x-forwarded-for": "198.51.100.9" };
      assert.equal((await registerFrom(logs, protocol, origin, who.token, wrongInviteCode(), xffOnly)).remoteAddress, PROXY);
      const hidden = { forwarded: "for=_hidden, for=10.9.9.9" };
      assert.equal((await registerFrom(logs, protocol, origin, who.token, wrongInviteCode(), hidden)).remoteAddress, "10.9.9.9");
    });
  }
});
