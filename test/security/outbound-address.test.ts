/**
 * Issue 30, item 2: one outbound-address guard for every URL a tenant makes
 * this server fetch (src/domain/outbound-address.ts, enforced by
 * src/auth/guarded-fetch.ts). Every spelling of an internal host is refused
 * when a sink or issuer URL is accepted, and every address is refused before
 * a socket connects to it, so a tenant cannot tell an open internal port from
 * a closed one: not from a delivery's log (ListDeliveries, RedeliverEvent),
 * not from /sts/exchange (the same 403 either way), and the open port sees
 * no connection at all.
 */
import assert from "node:assert/strict";
import dns, { type LookupAddress } from "node:dns";
import { createServer as createHttpServer } from "node:http";
import { syncBuiltinESMExports } from "node:module";
import { createServer, type AddressInfo, type Server } from "node:net";
import { after, before, describe, test } from "node:test";
import { ExchangeFailedError, requestGuarded, type FetchLimits, type Resolver } from "../../src/auth/guarded-fetch.js";
import { postToSink, sinkUrlProblem } from "../../src/delivery/sink.js";
import { userIssuerProblem } from "../../src/domain/issuer.js";
import {
  canonicalAddress,
  isInternalAddress,
  isLoopbackAddress,
  outboundAddressAllowed,
  urlHostScope,
} from "../../src/domain/outbound-address.js";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const PRODUCTION = { allowLoopback: false };
const LOOPBACK_ALLOWED = { allowLoopback: true };
const INTERNAL = "must not be a loopback, private or link-local address";

/**
 * Internal hosts as a tenant may spell them in a URL, and the hostname URL
 * makes of each (null: not a URL at all). The loopback ones reach a listener
 * on this machine; the rest name loopback, private, shared, link-local,
 * unspecified, multicast, broadcast, reserved, documentation and
 * benchmarking ranges, directly or embedded in IPv6.
 */
const INTERNAL_HOSTS: [host: string, hostname: string | null][] = [
  // IPv4, in every spelling URL turns into a dotted quad
  ["127.0.0.1", "127.0.0.1"],
  ["127.1", "127.0.0.1"],
  ["0x7f.1", "127.0.0.1"],
  ["0x7f000001", "127.0.0.1"],
  ["2130706433", "127.0.0.1"],
  ["0177.0.0.1", "127.0.0.1"],
  ["127.000.000.001", "127.0.0.1"],
  ["127.0.0.1.", "127.0.0.1"],
  ["127.255.255.254", "127.255.255.254"],
  ["0.0.0.0", "0.0.0.0"],
  ["0", "0.0.0.0"],
  ["10.0.0.1", "10.0.0.1"],
  ["172.16.0.1", "172.16.0.1"],
  ["172.31.255.255", "172.31.255.255"],
  ["192.168.1.1", "192.168.1.1"],
  ["100.64.0.1", "100.64.0.1"],
  ["100.127.255.255", "100.127.255.255"],
  ["169.254.169.254", "169.254.169.254"],
  ["224.0.0.1", "224.0.0.1"],
  ["255.255.255.255", "255.255.255.255"],
  ["240.0.0.1", "240.0.0.1"],
  ["192.0.2.1", "192.0.2.1"],
  ["198.51.100.7", "198.51.100.7"],
  ["203.0.113.9", "203.0.113.9"],
  ["198.18.0.1", "198.18.0.1"],
  // IPv6 loopback and unspecified
  ["[::1]", "[::1]"],
  ["[0:0:0:0:0:0:0:1]", "[::1]"],
  ["[0000:0000:0000:0000:0000:0000:0000:0001]", "[::1]"],
  ["[::]", "[::]"],
  // IPv4 embedded in IPv6: mapped, compatible, translated, NAT64, 6to4, Teredo
  ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]"],
  ["[::ffff:7f00:1]", "[::ffff:7f00:1]"],
  ["[::FFFF:7F00:1]", "[::ffff:7f00:1]"],
  ["[0:0:0:0:0:ffff:7f00:1]", "[::ffff:7f00:1]"],
  ["[::ffff:a9fe:a9fe]", "[::ffff:a9fe:a9fe]"],
  ["[::ffff:10.0.0.1]", "[::ffff:a00:1]"],
  ["[::127.0.0.1]", "[::7f00:1]"],
  ["[::7f00:1]", "[::7f00:1]"],
  ["[::ffff:0:127.0.0.1]", "[::ffff:0:7f00:1]"],
  ["[64:ff9b::127.0.0.1]", "[64:ff9b::7f00:1]"],
  ["[64:ff9b::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]"],
  ["[64:ff9b:1::808:808]", "[64:ff9b:1::808:808]"],
  ["[2002:7f00:1::1]", "[2002:7f00:1::1]"],
  ["[2002:a9fe:a9fe::]", "[2002:a9fe:a9fe::]"],
  // Teredo: client 127.0.0.1 (the last 32 bits inverted), then server 10.0.0.1 (bits 32–63)
  ["[2001:0:4136:e378:8000:63bf:80ff:fffe]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]"],
  ["[2001:0:a00:1:8000:63bf:a247:29dd]", "[2001:0:a00:1:8000:63bf:a247:29dd]"],
  // IPv6 outside global unicast, and documentation
  ["[fe80::1]", "[fe80::1]"],
  ["[FE80::1]", "[fe80::1]"],
  ["[fe80::1%25eth0]", null],
  ["[fc00::1]", "[fc00::1]"],
  ["[fd12:3456::1]", "[fd12:3456::1]"],
  ["[fec0::1]", "[fec0::1]"],
  ["[ff02::1]", "[ff02::1]"],
  ["[100::1]", "[100::1]"],
  ["[2001:db8::1]", "[2001:db8::1]"],
  // localhost names (RFC 6761)
  ["localhost", "localhost"],
  ["LOCALHOST", "localhost"],
  ["localhost.", "localhost."],
  ["api.localhost", "api.localhost"],
  ["a.b.LOCALHOST.", "a.b.localhost."],
  ["%6c%6fcalhost", "localhost"],
];

/** URLs a tenant may use: public addresses (also embedded in NAT64, 6to4, Teredo) and names. */
const PUBLIC_URLS = [
  "https://93.184.216.34/",
  "https://[2606:2800:220:1::1]/",
  "https://example.com/",
  "https://hooks.example.com:8443/x",
  "https://172.32.0.1/",
  "https://100.128.0.1/",
  "https://8.8.8.8/",
  "https://[64:ff9b::5db8:d822]/",
  "https://[2002:5db8:d822::1]/",
  "https://[2001:0:5db8:d822:8000:63bf:a247:29dd]/",
  "https://localhost.example.com/",
  "https://xlocalhost/",
];

/** Addresses as a resolver, a socket or a caller gives them: their canonical text (undefined: not an address), internal or not. */
const ADDRESSES: [text: string, canonical: string | undefined, internal: boolean][] = [
  ["127.0.0.1", "127.0.0.1", true],
  ["127.1", "127.0.0.1", true],
  ["0x7f.0.0.1", "127.0.0.1", true],
  ["2130706433", "127.0.0.1", true],
  ["127.0.0.1.", "127.0.0.1", true],
  ["::1", "::1", true],
  ["0:0:0:0:0:0:0:1", "::1", true],
  ["0000::0001", "::1", true],
  ["::", "::", true],
  ["::ffff:127.0.0.1", "::ffff:7f00:1", true],
  ["::FFFF:7F00:1", "::ffff:7f00:1", true],
  ["::127.0.0.1", "::7f00:1", true],
  ["::ffff:0:10.1.2.3", "::ffff:0:a01:203", true],
  ["64:ff9b::192.168.0.1", "64:ff9b::c0a8:1", true],
  ["64:ff9b:1::1", "64:ff9b:1::1", true],
  ["2002:c0a8:101::1", "2002:c0a8:101::1", true],
  ["fe80::1%eth0", "fe80::1", true],
  ["FE80::ABCD%25eth0", "fe80::abcd", true],
  ["[fd00::1]", "fd00::1", true],
  ["fec0::1", "fec0::1", true],
  ["ff02::1", "ff02::1", true],
  ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", true],
  ["3fff::1", "3fff::1", true],
  ["93.184.216.34", "93.184.216.34", false],
  ["2606:2800:220:1::1", "2606:2800:220:1::1", false],
  ["64:ff9b::8.8.8.8", "64:ff9b::808:808", false],
  ["2002:808:808::1", "2002:808:808::1", false],
  ["::ffff:8.8.8.8", "::ffff:808:808", false],
  ["example.com", undefined, true],
  ["1.2.3.4::", undefined, true],
  ["1:2:3:4:5:6:7:8:9", undefined, true],
  ["1::2::3", undefined, true],
  ["::ffff:127.0.0.01", "::ffff:7f00:1", true],
  ["::ffff:127.0.0.0001", undefined, true],
  ["256.0.0.1", undefined, true],
  ["", undefined, true],
];

/** The spellings that are URLs, with a port. */
const urlHosts = () => INTERNAL_HOSTS.filter(([, hostname]) => hostname !== null).map(([host]) => host);

/** A TCP listener on every address (loopback v4 and v6 included) that counts the connections it accepts. */
interface Listener {
  port: number;
  connections: number;
  close(): Promise<void>;
}

async function openListener(): Promise<Listener> {
  const server: Server = createServer((socket) => {
    listener.connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "::", resolve));
  const listener: Listener = {
    port: (server.address() as AddressInfo).port,
    connections: 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  return listener;
}

/** A port nothing listens on (just closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "::", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A resolver for *.localhost, localhost and *.outbound.test that answers loopback, as systemd-resolved does. */
const loopbackResolver: Resolver = (hostname, _options, callback) => {
  const name = hostname.toLowerCase().replace(/\.$/, "");
  if (name === "localhost" || name.endsWith(".localhost") || name.endsWith(".outbound.test"))
    return callback(null, [
      { address: "127.0.0.1", family: 4 },
      { address: "::1", family: 6 },
    ]);
  callback(Object.assign(new Error(`${hostname} not found`), { code: "ENOTFOUND" }), []);
};

/** The limits a tenant's fetch gets (as postToSink and the upstream verifier build them; the timeout a liveness bound). */
const tenantLimits = (extra: Partial<FetchLimits> = {}): FetchLimits => ({
  timeoutMs: 30_000,
  maxBytes: 4096,
  addressAllowed: (address) => outboundAddressAllowed(address, PRODUCTION),
  resolve: loopbackResolver,
  ...extra,
});

/** How a guarded request failed: its text and kind (fails the test if it did not). */
async function failure(url: string, limits: FetchLimits): Promise<{ message: string; kind: string }> {
  try {
    await requestGuarded(url, { method: "POST", headers: {}, body: Buffer.from("{}") }, limits);
  } catch (err) {
    assert.ok(err instanceof ExchangeFailedError, String(err));
    return { message: err.message, kind: err.kind };
  }
  return assert.fail(`${url} was fetched`);
}

describe("the rules", () => {
  test(`${INTERNAL_HOSTS.length} internal spellings: URL's reading of each, and each refused as a sink and as an issuer`, () => {
    assert.ok(INTERNAL_HOSTS.length >= 36);
    for (const [host, hostname] of INTERNAL_HOSTS) {
      const sink = `https://${host}/hook`;
      if (hostname === null) {
        assert.throws(() => new URL(sink), TypeError, host);
        assert.equal(sinkUrlProblem(sink, PRODUCTION), "must be an absolute URL", host);
        assert.notEqual(userIssuerProblem(`https://${host}`, PRODUCTION), undefined, host);
        continue;
      }
      const url = new URL(sink);
      assert.equal(url.hostname, hostname, host);
      assert.notEqual(urlHostScope(url), "external", host);
      assert.equal(sinkUrlProblem(sink, PRODUCTION), INTERNAL, host);
      assert.equal(userIssuerProblem(url.origin, PRODUCTION), INTERNAL, host);
      assert.notEqual(userIssuerProblem(`https://${host}`, PRODUCTION), undefined, host);
      const literal = hostname.replace(/^\[(.*)\]$/, "$1");
      if (canonicalAddress(literal) !== undefined) assert.equal(outboundAddressAllowed(literal, PRODUCTION), false, host);
    }
  });

  test("public addresses and names are accepted, as sinks and as issuers", () => {
    for (const sink of PUBLIC_URLS) {
      assert.equal(urlHostScope(new URL(sink)), "external", sink);
      assert.equal(sinkUrlProblem(sink, PRODUCTION), undefined, sink);
      assert.equal(userIssuerProblem(new URL(sink).origin, PRODUCTION), undefined, sink);
    }
  });

  test("addresses in any spelling: one canonical text (URL's own), judged once; what is not an address is refused", () => {
    for (const [text, canonical, internal] of ADDRESSES) {
      assert.equal(canonicalAddress(text), canonical, text);
      assert.equal(isInternalAddress(text), internal, text);
      assert.equal(outboundAddressAllowed(text, PRODUCTION), !internal, text);
      if (canonical === undefined || text.includes("%")) continue;
      const viaUrl = new URL(`http://${canonical.includes(":") ? `[${canonical}]` : canonical}/`).hostname;
      assert.equal(viaUrl.replace(/^\[(.*)\]$/, "$1"), canonical, `${text}: URL prints it the same`);
    }
  });

  test("the canonical text is URL's own, for 4,000 generated IPv4 and IPv6 spellings", () => {
    // A fixed linear congruential sequence: the same spellings every run.
    let seed = 30;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 2000; i++) {
      // Zero runs of every length and place, so "::" lands everywhere.
      const groups = Array.from({ length: 8 }, () => (next(2) === 0 ? 0 : next(65536)));
      const text = groups.map((g) => g.toString(16).padStart(next(5), "0")).join(":");
      assert.equal(`[${canonicalAddress(text)}]`, new URL(`http://[${text}]/`).hostname, text);
    }
    for (let i = 0; i < 2000; i++) {
      const parts = Array.from({ length: 1 + next(4) }, () => {
        const n = next(300);
        return [String(n), `0x${n.toString(16)}`, `0${n.toString(8)}`][next(3)]!;
      });
      const text = parts.join(".");
      let viaUrl: string | undefined;
      try {
        viaUrl = new URL(`http://${text}/`).hostname;
      } catch {
        viaUrl = undefined;
      }
      assert.equal(canonicalAddress(text), viaUrl, text);
    }
  });

  test("the loopback setting allows loopback (127/8, ::1, IPv4-mapped 127/8, localhost names) and nothing else inside", () => {
    for (const a of ["127.0.0.1", "127.1", "::1", "::ffff:7f00:1", "::ffff:127.0.0.2"]) {
      assert.equal(isLoopbackAddress(a), true, a);
      assert.equal(outboundAddressAllowed(a, LOOPBACK_ALLOWED), true, a);
    }
    for (const a of ["0.0.0.0", "::", "::7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::", "10.0.0.1", "::ffff:a9fe:a9fe", "fe80::1"]) {
      assert.equal(isLoopbackAddress(a), false, a);
      assert.equal(outboundAddressAllowed(a, LOOPBACK_ALLOWED), false, a);
    }
    for (const ok of ["http://127.1:9000/a", "http://[::ffff:7f00:1]:9000/a", "http://localhost.:9000/a", "https://api.localhost/a"])
      assert.equal(sinkUrlProblem(ok, LOOPBACK_ALLOWED), undefined, ok);
    for (const bad of ["https://0.0.0.0/a", "https://[::7f00:1]/a", "https://[64:ff9b::7f00:1]/a", "https://10.0.0.1/a"])
      assert.equal(sinkUrlProblem(bad, LOOPBACK_ALLOWED), INTERNAL, bad);
  });
});

describe("before any byte: the guarded request", () => {
  let open: Listener;
  let closed: number;
  before(async () => {
    open = await openListener();
    closed = await closedPort();
  });
  after(() => open.close());

  test("every internal spelling, open port or closed: the same policy refusal, and the open port sees no connection", async () => {
    for (const host of urlHosts()) {
      for (const scheme of ["https", "http"]) {
        const atOpen = await failure(`${scheme}://${host}:${open.port}/hook`, tenantLimits());
        const atClosed = await failure(`${scheme}://${host}:${closed}/hook`, tenantLimits());
        assert.deepEqual(atOpen, { message: "address not allowed", kind: "policy" }, host);
        assert.deepEqual(atClosed, atOpen, host);
      }
    }
    assert.equal(open.connections, 0);
  });

  test("a delivery's log entry is the same for an open and a closed internal port, for every spelling", async () => {
    for (const [host] of INTERNAL_HOSTS) {
      const post = async (port: number) => {
        const { outcome, status, error } = await postToSink(
          `https://${host}:${port}/hook`,
          { headers: {}, body: "{}" },
          { policy: PRODUCTION, timeoutMs: 30_000 },
        );
        return { outcome, status, error };
      };
      const atOpen = await post(open.port);
      assert.equal(atOpen.outcome, "failed", host);
      assert.match(atOpen.error, /^sink URL refused: /, host);
      assert.deepEqual(await post(closed), atOpen, host);
    }
    assert.equal(open.connections, 0);
  });

  test("a name that resolves inside is refused in the lookup, before connecting: every address it names is checked", async () => {
    const answers: LookupAddress[][] = [
      [{ address: "127.0.0.1", family: 4 }],
      [{ address: "::1", family: 6 }],
      [{ address: "::ffff:7f00:1", family: 6 }],
      [{ address: "::ffff:127.0.0.1", family: 6 }],
      [{ address: "0.0.0.0", family: 4 }],
      [{ address: "fe80::1%lo", family: 6 }],
      [
        { address: "10.0.0.1", family: 4 },
        { address: "127.0.0.1", family: 4 },
      ],
    ];
    for (const answer of answers) {
      const asked: string[] = [];
      const resolve: Resolver = (hostname, _options, callback) => {
        asked.push(hostname);
        callback(null, answer);
      };
      for (const port of [open.port, closed]) {
        const got = await failure(`https://sink.outbound.test:${port}/hook`, tenantLimits({ resolve }));
        assert.deepEqual(got, { message: "address not allowed", kind: "policy" }, JSON.stringify(answer));
      }
      assert.deepEqual(asked, ["sink.outbound.test", "sink.outbound.test"]);
    }
    // The system resolver's localhost, too.
    const system = await failure(`http://localhost:${open.port}/hook`, tenantLimits({ resolve: undefined }));
    assert.deepEqual(system, { message: "address not allowed", kind: "policy" });
    assert.equal(open.connections, 0);
  });

  test("the resolver's answer is where the socket goes: an allowed one is connected to", async () => {
    const server = createHttpServer((_req, res) => res.writeHead(204).end());
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as AddressInfo).port;
      const limits = tenantLimits({ addressAllowed: (a) => outboundAddressAllowed(a, LOOPBACK_ALLOWED) });
      const res = await requestGuarded(`http://sink.outbound.test:${port}/hook`, { method: "GET", headers: {} }, limits);
      assert.equal(res.status, 204);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("defence in depth: an address a check let through still gets the one refusal, whether the port is open or closed", async () => {
    // Allows only the first question (the literal, before connecting): as if that check had missed a spelling.
    const missedOnce = (): FetchLimits => {
      let asked = 0;
      return tenantLimits({ addressAllowed: () => asked++ === 0 });
    };
    const atOpen = await failure(`http://127.0.0.1:${open.port}/hook`, missedOnce());
    const atClosed = await failure(`http://127.0.0.1:${closed}/hook`, missedOnce());
    assert.deepEqual(atOpen, { message: "address not allowed", kind: "policy" });
    assert.deepEqual(atClosed, atOpen);
  });
});

describe("through the API (production policy)", () => {
  const BASE = "http://api.test";
  let srv: TestServer;
  let issuer: OidcIssuer;
  let open: Listener;
  let closed: number;
  let org: string;
  let viewer: string;
  const systemLookup = dns.lookup;

  before(async () => {
    // The server resolves *.outbound.test to loopback, as a tenant's DNS could point any name inside.
    const lookup = (hostname: string, options: dns.LookupAllOptions, callback: Parameters<Resolver>[2]) => {
      if (!hostname.endsWith(".outbound.test")) return systemLookup(hostname, options, callback);
      loopbackResolver(hostname, options, callback);
    };
    Object.assign(dns, { lookup });
    syncBuiltinESMExports();
    [issuer, open, closed] = await Promise.all([OidcIssuer.start("outbound"), openListener(), closedPort()]);
    srv = await startTestServer({ env: { PLATFORM_BASE_URL: BASE, PLATFORM_ALLOW_LOOPBACK_ISSUERS: "false" } });
    org = (await createGroup(srv.url, null, "outbound org")).uid;
    viewer = (await ok(rest(srv.url, "GET", "/iam/v2beta1/roles?name=viewer"))).roles[0].uid;
  });
  after(async () => {
    Object.assign(dns, { lookup: systemLookup });
    syncBuiltinESMExports();
    await srv.close();
    await Promise.all([issuer.close(), open.close()]);
  });

  const refusedField = (res: RestResult, field: string, what: string) => {
    const violations = fieldViolations(assertRestError(res, 400, 3, "INVALID_ARGUMENT"));
    assert.deepEqual(
      violations.map((v) => v.field),
      [field],
      what,
    );
    return violations[0]!.description;
  };

  test(`a subscription's sink: every internal spelling is INVALID_ARGUMENT naming sink; a public one is created`, async () => {
    for (const [host, hostname] of INTERNAL_HOSTS) {
      const res = await rest(srv.url, "POST", `/events/v1/subscriptions/${org}`, { sink: `https://${host}:${open.port}/hook` });
      const description = refusedField(res, "sink", host);
      assert.equal(description, hostname === null ? "must be an absolute URL" : INTERNAL, host);
    }
    await ok(rest(srv.url, "POST", `/events/v1/subscriptions/${org}`, { sink: "https://hooks.example.com/x" }));
    assert.equal(open.connections, 0);
  });

  test("identities and identity providers: every internal spelling of an issuer is INVALID_ARGUMENT naming it", async () => {
    /** The descriptions of the identity's and the provider's refusal of iss (both must name the issuer field). */
    const refuse = async (iss: string) => {
      const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, {
        name: "internal",
        claimMatch: { issuer: iss, subject: "x" },
      });
      const provider = await rest(srv.url, "POST", `/iam/v2beta1/identityProviders/${org}`, {
        name: "internal",
        defaultRole: viewer,
        oidc: { issuer: iss, clientId: "c", clientSecret: "s" },
      });
      return [refusedField(identity, "claim_match.issuer", iss), refusedField(provider, "oidc.issuer", iss)];
    };
    for (const [host, hostname] of INTERNAL_HOSTS) {
      // As spelled (refused as not canonical when URL rewrites it), and as URL writes it (refused for its address).
      await refuse(`https://${host}`);
      if (hostname !== null) assert.deepEqual(await refuse(new URL(`https://${host}`).origin), [INTERNAL, INTERNAL], host);
    }
    const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, {
      name: "public",
      claimMatch: { issuer: "https://login.example.com", subject: "x" },
    });
    assert.equal(identity.status, 200, JSON.stringify(identity.body));
  });

  /** The answer to an exchange of a token from iss, with the port and the identity spelled PORT and IDENTITY (where two differ). */
  const exchange = async (identity: string, iss: string, port: number) => {
    const res = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity=${identity}`, undefined, {
      authorization: `Bearer ${issuer.idToken({ iss, sub: "x", aud: BASE })}`,
    });
    return { status: res.status, body: JSON.stringify(res.body).replaceAll(identity, "IDENTITY").replaceAll(String(port), "PORT") };
  };

  test("/sts/exchange naming an internal issuer address: the same 403 for an open and a closed port, and no connection", async () => {
    const pattern = await ok(
      rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, { name: "any issuer", claimMatch: { issuerPattern: ".*", subject: "x" } }),
    );
    for (const host of urlHosts()) {
      const origin = (port: number) => new URL(`https://${host}:${port}`).origin;
      const atOpen = await exchange(pattern.uid, origin(open.port), open.port);
      assert.equal(atOpen.status, 403, `${host}: ${atOpen.body}`);
      assert.deepEqual(await exchange(pattern.uid, origin(closed), closed), atOpen, host);
    }
    assert.equal(open.connections, 0);
  });

  test("/sts/exchange with identities whose issuer name resolves inside: the same 403 for an open and a closed port", async () => {
    const answers = [];
    for (const port of [open.port, closed]) {
      const iss = `https://issuer.outbound.test:${port}`;
      const identity = await ok(
        rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, { name: `by name ${port}`, claimMatch: { issuer: iss, subject: "x" } }),
      );
      answers.push(await exchange(identity.uid, iss, port));
    }
    assert.equal(answers[0]!.status, 403, answers[0]!.body);
    assert.deepEqual(answers[1], answers[0]);
    assert.equal(open.connections, 0);
  });

  test("deliveries to a sink whose name resolves inside: RedeliverEvent and ListDeliveries read the same open or closed", async () => {
    const group = (await createGroup(srv.url, org, "deliveries")).uid;
    const subscriptions = [];
    for (const port of [open.port, closed]) {
      const created = await ok(
        rest(srv.url, "POST", `/events/v1/subscriptions/${group}`, { sink: `https://sink.outbound.test:${port}/hook` }),
      );
      subscriptions.push(created.uid as string);
    }
    const child = (await createGroup(srv.url, group, "an event")).uid;
    const events = (await ok(rest(srv.url, "GET", `/events/v1/events?uidp.descendants_of=${group}`))).events as {
      id: string;
      subject: string;
    }[];
    const event = events.find((e) => e.subject === child)!;
    const attempts = [];
    for (const uid of subscriptions) {
      const { outcome, status, error } = await ok(
        rest(srv.url, "POST", `/events/v1/subscriptions/${uid}:redeliver`, { eventId: event.id }),
      );
      attempts.push({ outcome, status, error });
    }
    assert.deepEqual(attempts[0], { outcome: "FAILED", status: 0, error: "sink address refused: address not allowed" });
    assert.deepEqual(attempts[1], attempts[0]);
    for (const uid of subscriptions) {
      const log = (await ok(rest(srv.url, "GET", `/events/v1/subscriptions/${uid}/deliveries`))).deliveries as { error: string }[];
      assert.ok(log.length >= 1);
      for (const entry of log) assert.equal(entry.error, "sink address refused: address not allowed");
    }
    assert.equal(open.connections, 0);
  });
});
