import assert from "node:assert/strict";
import { describe, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { normalizeAddress, parseTrustedProxies, trustedProxyProblems } from "../../src/domain/trusted-proxies.js";
import { createClientAddresses, type PeerRequest } from "../../src/server/http/client-address.js";
import { forwardedClient, forwardedHops, xForwardedForHops } from "../../src/server/http/forwarded.js";
import { MAX_V1_BYTES, MAX_V2_BYTES, parseProxyHeader } from "../../src/server/http/proxy-protocol.js";

const proxies = parseTrustedProxies(["10.0.0.0/8", "192.168.1.5", "fd00::/8"]);
const xff = (header: string, peer = "10.0.0.1") => forwardedClient(peer, "x-forwarded-for", header, proxies);
const fwd = (header: string, peer = "10.0.0.1") => forwardedClient(peer, "forwarded", header, proxies);

describe("trusted proxy list", () => {
  test("CIDR ranges and single addresses, IPv4 and IPv6 (IPv4-mapped as IPv4)", () => {
    assert.equal(proxies.has("10.200.3.4"), true);
    assert.equal(proxies.has("192.168.1.5"), true);
    assert.equal(proxies.has("192.168.1.6"), false);
    assert.equal(proxies.has("fd12:3456::1"), true);
    assert.equal(proxies.has("2001:db8::1"), false);
    assert.equal(proxies.has(normalizeAddress("::ffff:10.1.2.3")!), true);
    assert.equal(proxies.has(""), false);
    assert.equal(proxies.has("not an address"), false);
    const partial = parseTrustedProxies(["172.16.0.0/12", "2001:db8:8000::/33", "::1", "0.0.0.0/0"]);
    assert.equal(partial.has("172.31.255.255"), true);
    assert.equal(partial.has("2001:db8:ffff::1"), true);
    assert.equal(partial.has("2001:db8:7fff::1"), false);
    assert.equal(partial.has("::1"), true);
    assert.equal(partial.has("::2"), false);
    const narrow = parseTrustedProxies(["172.16.0.0/12"]);
    assert.deepEqual(["172.15.255.255", "172.16.0.0", "172.32.0.0"].map(narrow.has), [false, true, false]);
    assert.equal(parseTrustedProxies(["0.0.0.0/0"]).has("2001:db8::1"), false, "an IPv4 range holds no IPv6 address");
  });

  test("invalid entries are named, valid ones pass", () => {
    assert.deepEqual(trustedProxyProblems(["10.0.0.0/8", "::1", "2001:db8::/32"]), []);
    const problems = trustedProxyProblems(["10.0.0.0/33", "nginx", "fd00::/129", "1.2.3.4/x"]);
    assert.equal(problems.length, 4);
    assert.match(problems[0]!, /10\.0\.0\.0\/33: the prefix length must be 0 to 32/);
    assert.match(problems[1]!, /nginx is not an IP address/);
    assert.throws(() => parseTrustedProxies(["nginx"]), /PLATFORM_TRUSTED_PROXIES: nginx/);
  });

  test("addresses have one spelling", () => {
    assert.equal(normalizeAddress("::ffff:127.0.0.1"), "127.0.0.1");
    assert.equal(normalizeAddress("2001:DB8:0:0:0:0:0:1"), "2001:db8::1");
    assert.equal(normalizeAddress("fe80::1%eth0"), null);
    assert.equal(normalizeAddress("01.2.3.4"), null);
    assert.equal(normalizeAddress("unknown"), null);
  });
});

describe("X-Forwarded-For walk", () => {
  test("the rightmost untrusted hop is the client; what the client wrote to its left is never read", () => {
    assert.equal(xff("203.0.113.9"), "203.0.113.9");
    assert.equal(xff("6.6.6.6, 203.0.113.9"), "203.0.113.9");
    assert.equal(xff("6.6.6.6, 203.0.113.9, 10.1.1.1, 192.168.1.5"), "203.0.113.9");
  });

  test("every hop trusted: the leftmost", () => {
    assert.equal(xff("10.9.9.9, 10.8.8.8"), "10.9.9.9");
  });

  test("ports, brackets and IPv6 are understood and normalized", () => {
    assert.equal(xff("203.0.113.9:5555"), "203.0.113.9");
    assert.equal(xff("[2001:DB8::7]:443"), "2001:db8::7");
    assert.equal(xff("2001:db8::7"), "2001:db8::7");
    assert.equal(xff("::ffff:203.0.113.9"), "203.0.113.9");
  });

  test("malformed and unknown hops end the walk at the last proxy believed, never at a value the client chose", () => {
    assert.equal(xff("unknown"), "10.0.0.1");
    assert.equal(xff("203.0.113.9, garbage"), "10.0.0.1");
    assert.equal(xff("203.0.113.9, , 10.2.2.2"), "10.2.2.2");
    assert.equal(xff("fe80::1%eth0"), "10.0.0.1");
    assert.equal(xff("1.2.3.4.5"), "10.0.0.1");
    assert.equal(xff(""), "10.0.0.1");
    assert.equal(xff("x".repeat(10_000)), "10.0.0.1");
    assert.deepEqual(xForwardedForHops("1.1.1.1,[::1],_hidden"), ["1.1.1.1", "::1", null]);
  });
});

describe("Forwarded (RFC 7239) walk", () => {
  test("for= of each element from the right, several elements and joined header lines", () => {
    assert.equal(fwd("for=203.0.113.9;proto=https;by=10.0.0.1"), "203.0.113.9");
    assert.equal(fwd("for=6.6.6.6, for=203.0.113.9, for=10.3.3.3"), "203.0.113.9");
    assert.equal(fwd('For="[2001:db8:cafe::17]:4711"'), "2001:db8:cafe::17");
    assert.equal(fwd('for="203.0.113.9:8080"; proto=http'), "203.0.113.9");
    assert.equal(fwd("for=10.5.5.5, for=10.6.6.6"), "10.5.5.5");
  });

  test("obfuscated, unknown, missing or doubled for= ends the walk", () => {
    assert.equal(fwd("for=203.0.113.9, for=unknown"), "10.0.0.1");
    assert.equal(fwd("for=203.0.113.9, for=_hidden, for=10.4.4.4"), "10.4.4.4");
    assert.equal(fwd("proto=https"), "10.0.0.1");
    assert.equal(fwd("for=1.1.1.1;for=2.2.2.2"), "10.0.0.1");
    assert.equal(fwd('for="[2001:db8::1]'), "10.0.0.1");
    assert.equal(fwd("garbage"), "10.0.0.1");
  });

  test("a client's unbalanced quote cannot swallow the elements the proxies appended", () => {
    assert.equal(fwd('for="6.6.6.6, for=203.0.113.9'), "203.0.113.9");
    assert.deepEqual(forwardedHops('for="a,b", for=1.2.3.4'), [null, null, "1.2.3.4"]);
  });

  test("no header: the trusted peer itself", () => {
    assert.equal(forwardedClient("10.0.0.1", "forwarded", undefined, proxies), "10.0.0.1");
  });
});

describe("client addresses of connections and requests", () => {
  const clients = createClientAddresses({ trustedProxies: ["127.0.0.2"] });
  const request = (peer: string, headers: PeerRequest["headers"]): PeerRequest => ({
    socket: { remoteAddress: peer, remotePort: 40000 },
    headers,
  });

  test("headers from an untrusted peer are ignored", () => {
    assert.equal(clients.ofRequest(request("::ffff:127.0.0.3", { "x-forwarded-for": "1.2.3.4", forwarded: "for=1.2.3.4" })), "127.0.0.3");
  });

  test("headers from a trusted peer name the client; several lines are one list", () => {
    assert.equal(clients.ofRequest(request("127.0.0.2", { "x-forwarded-for": "1.2.3.4" })), "1.2.3.4");
    assert.equal(clients.ofRequest(request("127.0.0.2", { "x-forwarded-for": ["5.5.5.5", "1.2.3.4"] })), "1.2.3.4");
    assert.equal(clients.ofRequest(request("127.0.0.2", {})), "127.0.0.2");
  });

  test("only the configured forwarding header is read: a client's own header of the other kind passes the proxy untouched", () => {
    // A balancer appending to X-Forwarded-For forwards the client's Forwarded as it came, and the other way round.
    const both = { "x-forwarded-for": "198.51.100.1", forwarded: "for=203.0.113.66" };
    assert.equal(clients.ofRequest(request("127.0.0.2", both)), "198.51.100.1");
    assert.equal(clients.ofRequest(request("127.0.0.2", { forwarded: "for=203.0.113.66" })), "127.0.0.2");
    const forwardedOnly = createClientAddresses({ trustedProxies: ["127.0.0.2"], forwardedHeader: "forwarded" });
    assert.equal(forwardedOnly.ofRequest(request("127.0.0.2", both)), "203.0.113.66");
    assert.equal(forwardedOnly.ofRequest(request("127.0.0.2", { forwarded: ["for=5.5.5.5", "for=1.2.3.4"] })), "1.2.3.4");
    assert.equal(forwardedOnly.ofRequest(request("127.0.0.2", { "x-forwarded-for": "198.51.100.1" })), "127.0.0.2");
  });

  test("native gRPC: the peer string and metadata", () => {
    const metadata = new grpc.Metadata();
    metadata.add("x-forwarded-for", "6.6.6.6, 1.2.3.4");
    assert.equal(clients.ofGrpcCall("127.0.0.2:5000", metadata), "1.2.3.4");
    assert.equal(clients.ofGrpcCall("127.0.0.3:5000", metadata), "127.0.0.3");
    assert.equal(clients.ofGrpcCall("::ffff:127.0.0.3:5000", metadata), "127.0.0.3");
    assert.equal(clients.ofGrpcCall("unknown", metadata), "");
  });

  test("a trusted proxy's connections are not counted as one client", () => {
    assert.match(clients.limitKeyOf({ remoteAddress: "127.0.0.2", remotePort: 1 }), /^proxy connection /);
    assert.notEqual(
      clients.limitKeyOf({ remoteAddress: "127.0.0.2", remotePort: 1 }),
      clients.limitKeyOf({ remoteAddress: "127.0.0.2", remotePort: 2 }),
    );
    assert.equal(clients.limitKeyOf({ remoteAddress: "127.0.0.3", remotePort: 1 }), "127.0.0.3");
    assert.equal(clients.limitKeyOf({ remoteAddress: "2001:db8:1:2:3::4", remotePort: 1 }), "2001:db8:1:2::/64");
  });

  test("PROXY headers only from trusted proxies when some are listed, from anyone when none are", () => {
    assert.equal(clients.mayProxy({ remoteAddress: "127.0.0.2", remotePort: 1 }), true);
    assert.equal(clients.mayProxy({ remoteAddress: "127.0.0.3", remotePort: 1 }), false);
    assert.equal(createClientAddresses({ proxyProtocol: true }).mayProxy({ remoteAddress: "127.0.0.3", remotePort: 1 }), true);
  });
});

describe("PROXY protocol header parsing", () => {
  const v2 = (command: number, family: number, body: Buffer) => {
    const head = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x20 | command, family, 0, 0]);
    head.writeUInt16BE(body.length, 14);
    return Buffer.concat([head, body]);
  };
  const tcp4 = Buffer.from([203, 0, 113, 9, 127, 0, 0, 1, 0x30, 0x39, 0x1f, 0x90]);

  test("v1 TCP4, TCP6 and UNKNOWN", () => {
    const line = "PROXY TCP4 203.0.113.9 127.0.0.1 12345 8080\r\nGET";
    assert.deepEqual(parseProxyHeader(Buffer.from(line)), {
      state: "complete",
      length: line.length - 3,
      source: { address: "203.0.113.9", port: 12345 },
    });
    const six = parseProxyHeader(Buffer.from("PROXY TCP6 2001:DB8::9 ::1 4711 443\r\n"));
    assert.deepEqual(six.state === "complete" && six.source, { address: "2001:db8::9", port: 4711 });
    assert.deepEqual(parseProxyHeader(Buffer.from("PROXY UNKNOWN\r\n")), { state: "complete", length: 15, source: null });
  });

  test("v1 incomplete until CRLF, refused past 107 bytes or when malformed", () => {
    assert.equal(parseProxyHeader(Buffer.from("PROX")).state, "incomplete");
    assert.equal(parseProxyHeader(Buffer.from("PROXY TCP4 203.0.113.9 ")).state, "incomplete");
    assert.equal(parseProxyHeader(Buffer.from(`PROXY UNKNOWN ${"x".repeat(MAX_V1_BYTES)}`)).state, "invalid");
    for (const bad of [
      "PROXY TCP4 203.0.113.9 ::1 1 2\r\n",
      "PROXY TCP4 203.0.113.9 127.0.0.1 99999 2\r\n",
      "PROXY TCP4 203.0.113.9 127.0.0.1 1\r\n",
      "PROXY TCP5 a b 1 2\r\n",
      "PROXY  TCP4 203.0.113.9 127.0.0.1 1 2\r\n",
      "GET / HTTP/1.1\r\n",
      "PRI * HTTP/2.0\r\n",
    ])
      assert.equal(parseProxyHeader(Buffer.from(bad)).state, "invalid", bad);
  });

  test("v2 PROXY TCP4 and TCP6, TLVs skipped; LOCAL and unspecified families use the TCP peer", () => {
    const tlv = Buffer.from([0x01, 0x00, 0x02, 0x68, 0x32]);
    const four = parseProxyHeader(Buffer.concat([v2(1, 0x11, Buffer.concat([tcp4, tlv])), Buffer.from("rest")]));
    assert.deepEqual(four, { state: "complete", length: 16 + 12 + 5, source: { address: "203.0.113.9", port: 12345 } });
    const src6 = Buffer.alloc(36);
    src6.write("20010db8000000000000000000000017", 0, "hex");
    src6.writeUInt16BE(4711, 32);
    const six = parseProxyHeader(v2(1, 0x21, src6));
    assert.deepEqual(six.state === "complete" && six.source, { address: "2001:db8::17", port: 4711 });
    assert.deepEqual(parseProxyHeader(v2(0, 0x00, Buffer.alloc(0))), { state: "complete", length: 16, source: null });
    assert.deepEqual(parseProxyHeader(v2(0, 0x11, tcp4)), { state: "complete", length: 28, source: null });
    assert.deepEqual(parseProxyHeader(v2(1, 0x00, Buffer.alloc(0))), { state: "complete", length: 16, source: null });
  });

  test("v2 incomplete, oversized, short or unknown headers", () => {
    const whole = v2(1, 0x11, tcp4);
    for (let n = 1; n < whole.length; n++) assert.equal(parseProxyHeader(whole.subarray(0, n)).state, "incomplete", `${n} bytes`);
    assert.equal(parseProxyHeader(v2(1, 0x11, Buffer.alloc(MAX_V2_BYTES))).state, "invalid");
    assert.equal(parseProxyHeader(v2(1, 0x11, Buffer.alloc(4))).state, "invalid");
    assert.equal(parseProxyHeader(v2(1, 0x21, tcp4)).state, "invalid");
    assert.equal(parseProxyHeader(v2(2, 0x11, tcp4)).state, "invalid");
    assert.equal(parseProxyHeader(v2(1, 0x44, tcp4)).state, "invalid");
    const v3 = v2(1, 0x11, tcp4);
    v3[12] = 0x31;
    assert.equal(parseProxyHeader(v3).state, "invalid");
  });
});
