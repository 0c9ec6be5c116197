/**
 * Issue 11, item 3: issuer URLs are matched and fetched as one canonical
 * string; issuers users supply are https on public addresses only (loopback
 * only with PLATFORM_ALLOW_LOOPBACK_ISSUERS); operator issuers are trusted as
 * given; fetches are bounded (time, size, no redirects, same origin) and the
 * per-issuer cache is bounded too.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { UpstreamVerifier } from "../../src/auth/upstream.js";
import { UnauthenticatedError, UnavailableError } from "../../src/domain/errors.js";
import { canonicalIssuer, userIssuerProblem } from "../../src/domain/issuer.js";
import { isInternalAddress } from "../../src/domain/outbound-address.js";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const BASE = "http://api.test";

/** Issuers that are not canonical, each with what makes it so. */
const NON_CANONICAL: [string, (port: number) => string][] = [
  ["a backslash", (p) => `http://127.0.0.1:${p}\\x.trusted.example`],
  ["userinfo", (p) => `http://user@127.0.0.1:${p}`],
  ["a default port spelled out", () => "https://login.example:443"],
  ["an uppercase host", () => "https://LOGIN.example"],
  ["a fragment", (p) => `http://127.0.0.1:${p}#x`],
  ["a query", (p) => `http://127.0.0.1:${p}?x=1`],
  ["a decimal IPv4 host", (p) => `http://2130706433:${p}`],
  ["a tab", (p) => `http://127.0.0.1:${p}\t`],
  ["a dot segment", () => "https://login.example/a/../b"],
];

/** The uid of srv's built-in viewer role (an identity provider's default role). */
const viewerRole = async (srv: TestServer) => (await rest(srv.url, "GET", "/iam/v2beta1/roles?name=viewer")).body.roles[0].uid as string;

/**
 * Asserts that srv refuses iss where a user names it: in an identity of org (claim_match.issuer) and in an
 * identity provider of org (oidc.issuer), each INVALID_ARGUMENT naming that field.
 */
async function assertIssuerRefused(srv: TestServer, org: string, viewer: string, iss: string, what: string): Promise<void> {
  const refusals = [
    ["claim_match.issuer", `/iam/v2beta1/identities/${org}`, { name: "bad issuer", claimMatch: { issuer: iss, subject: "x" } }],
    [
      "oidc.issuer",
      `/iam/v2beta1/identityProviders/${org}`,
      { name: "bad issuer", defaultRole: viewer, oidc: { issuer: iss, clientId: "c", clientSecret: "s" } },
    ],
  ] as const;
  for (const [field, path, body] of refusals) {
    const res = await rest(srv.url, "POST", path, body);
    assert.deepEqual(
      fieldViolations(assertRestError(res, 400, 3, "INVALID_ARGUMENT")).map((v) => v.field),
      [field],
      what,
    );
  }
}

describe("canonical issuers", () => {
  test("an issuer is canonical when new URL() gives it back unchanged (an origin may leave out its slash)", () => {
    for (const ok of ["https://login.example", "https://login.example/", "https://login.example/tenant/v2.0", "http://127.0.0.1:8080"]) {
      assert.equal(canonicalIssuer(ok), ok, ok);
    }
    for (const [what, make] of NON_CANONICAL) assert.equal(canonicalIssuer(make(1234)), undefined, what);
  });

  test("internal addresses: loopback, private, link-local, shared, unspecified, multicast, mapped", () => {
    for (const a of [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "::1",
      "::",
      "fe80::1",
      "fd00::1",
      "::ffff:127.0.0.1",
      "::ffff:10.0.0.1",
    ]) {
      assert.equal(isInternalAddress(a), true, a);
    }
    for (const a of ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "172.32.0.1", "100.128.0.1"])
      assert.equal(isInternalAddress(a), false, a);
  });

  test("user-supplied issuers: https on a public host; loopback (http or https) only when allowed", () => {
    const strict = { allowLoopback: false };
    const dev = { allowLoopback: true };
    assert.equal(userIssuerProblem("https://login.example", strict), undefined);
    for (const bad of [
      "http://login.example",
      "https://127.0.0.1:8443",
      "https://10.0.0.1",
      "https://[::1]:8443",
      "https://localhost:8443",
      "http://127.0.0.1:8080",
    ]) {
      assert.notEqual(userIssuerProblem(bad, strict), undefined, bad);
    }
    for (const ok of ["http://127.0.0.1:8080", "https://127.0.0.1:8443", "http://localhost:8080"])
      assert.equal(userIssuerProblem(ok, dev), undefined, ok);
    assert.notEqual(userIssuerProblem("http://10.0.0.1", dev), undefined, "loopback only, not every internal address");
  });
});

describe("the attack, end to end (loopback issuers allowed, as in development)", () => {
  let srv: TestServer;
  let issuer: OidcIssuer;
  let org: { uid: string };
  let port: number;
  before(async () => {
    issuer = await OidcIssuer.start("attacker");
    port = Number(new URL(issuer.url).port);
    srv = await startTestServer({ env: { PLATFORM_BASE_URL: BASE } });
    org = await createGroup(srv.url, null, "issuer attack org");
  });
  after(async () => {
    await srv.close();
    await issuer.close();
  });

  const exchange = (token: string, identity: string): Promise<RestResult> =>
    rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity=${identity}`, undefined, {
      authorization: `Bearer ${token}`,
    });

  test("issuerPattern http://[^/]+\\.trusted\\.example does not let iss http://127.0.0.1:PORT\\x.trusted.example fetch from 127.0.0.1", async () => {
    const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "trusted deployer",
      claimMatch: { issuerPattern: "http://[^/]+\\.trusted\\.example", subject: "deployer" },
    });
    assert.equal(identity.status, 200, JSON.stringify(identity.body));
    const token = issuer.idToken({ iss: `http://127.0.0.1:${port}\\x.trusted.example`, sub: "deployer", aud: BASE });
    const before = JSON.stringify(issuer.allFetches());
    const res = await exchange(token, identity.body.uid);
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    assert.equal(res.body.token, undefined);
    assert.equal(JSON.stringify(issuer.allFetches()), before, "nothing was fetched from the attacker's host");
  });

  test("non-canonical issuers are refused when an identity or provider names them, naming the field", async () => {
    const viewer = await viewerRole(srv);
    for (const [what, make] of NON_CANONICAL) await assertIssuerRefused(srv, org.uid, viewer, make(port), what);
  });

  test("a token whose iss is not canonical is refused by a match-anything pattern, and nothing is fetched", async () => {
    const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "any issuer",
      claimMatch: { issuerPattern: ".*", subject: "any" },
    });
    assert.equal(identity.status, 200);
    const before = JSON.stringify(issuer.allFetches());
    for (const [what, make] of NON_CANONICAL) {
      const res = await exchange(issuer.idToken({ iss: make(port), sub: "any", aud: BASE }), identity.body.uid);
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(res.body.token, undefined, what);
    }
    assert.equal(JSON.stringify(issuer.allFetches()), before);
    // The canonical spelling of the same issuer works.
    assert.equal((await exchange(issuer.idToken({ sub: "any", aud: BASE }), identity.body.uid)).status, 200);
  });
});

describe("production policy (PLATFORM_ALLOW_LOOPBACK_ISSUERS unset)", () => {
  let srv: TestServer;
  let issuer: OidcIssuer;
  let people: OidcIssuer;
  let org: { uid: string };
  before(async () => {
    [issuer, people] = await Promise.all([OidcIssuer.start("internal"), OidcIssuer.start("operator")]);
    srv = await startTestServer({
      env: {
        PLATFORM_BASE_URL: BASE,
        PLATFORM_ALLOW_LOOPBACK_ISSUERS: "false",
        PLATFORM_USER_ISSUERS: people.url,
        PLATFORM_USER_AUDIENCES: "console",
      },
    });
    org = await createGroup(srv.url, null, "strict issuer org");
  });
  after(async () => {
    await srv.close();
    await Promise.all([issuer.close(), people.close()]);
  });

  test("identities and providers cannot name http, loopback or private issuers", async () => {
    const viewer = await viewerRole(srv);
    const internal = [
      issuer.url,
      "https://127.0.0.1:8443",
      "https://10.0.0.1",
      "https://169.254.169.254",
      "https://[::1]",
      "http://login.example",
    ];
    for (const iss of internal) await assertIssuerRefused(srv, org.uid, viewer, iss, iss);
  });

  test("a pattern that admits a loopback issuer gets no fetch from it: the address is checked", async () => {
    const identity = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "pattern",
      claimMatch: { issuerPattern: "http://127\\.0\\.0\\.1:\\d+", subject: "x" },
    });
    assert.equal(identity.status, 200);
    const res = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity=${identity.body.uid}`, undefined, {
      authorization: `Bearer ${issuer.idToken({ sub: "x", aud: BASE })}`,
    });
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    assert.deepEqual(issuer.allFetches(), {}, "the internal issuer was never contacted");
  });

  test("an issuer the operator lists (PLATFORM_USER_ISSUERS) is trusted as given, loopback http included", async () => {
    const res = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}`, undefined, {
      authorization: `Bearer ${people.idToken({ sub: "person", aud: "console" })}`,
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.ok(people.discoveryFetches >= 1);
  });
});

describe("fetches and the cache are bounded", () => {
  let issuer: OidcIssuer;
  let raw: Server;
  let rawUrl: string;
  before(async () => {
    issuer = await OidcIssuer.start("bounded");
    // A server that redirects discovery elsewhere, and one path that never answers.
    raw = createServer((req, res) => {
      if (req.url?.startsWith("/silent")) return;
      res.writeHead(302, { location: `${issuer.url}/.well-known/openid-configuration` });
      res.end();
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
    rawUrl = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
  });
  after(async () => {
    raw.closeAllConnections();
    await new Promise((resolve) => raw.close(resolve));
    await issuer.close();
  });

  const verifier = (opts: ConstructorParameters<typeof UpstreamVerifier>[1] = {}) =>
    new UpstreamVerifier(Date.now, { allowLoopback: true, ...opts });
  const refused = (p: Promise<unknown>) => assert.rejects(p, UnauthenticatedError);

  test("a discovery document over 256 KiB is refused", async () => {
    const iss = `${issuer.url}/big`;
    issuer.route(
      "/big/.well-known/openid-configuration",
      JSON.stringify({ issuer: iss, jwks_uri: issuer.jwksUri, pad: "x".repeat(300 * 1024) }),
    );
    await refused(verifier().verify(issuer.idToken({ iss, sub: "s" }), () => true));
  });

  test("a redirect is not followed", async () => {
    await refused(verifier().verify(issuer.idToken({ iss: rawUrl, sub: "s" }), () => true));
    assert.equal(issuer.discoveryFetches, 0, "the redirect target was never fetched");
  });

  test("an issuer that never answers is given up on within the timeout, as UNAVAILABLE (the token could not be checked)", async () => {
    const start = performance.now();
    await assert.rejects(
      verifier({ fetchTimeoutMs: 300 }).verify(issuer.idToken({ iss: `${rawUrl}/silent`, sub: "s" }), () => true),
      UnavailableError,
    );
    assert.ok(performance.now() - start < 5_000);
  });

  test("a user-supplied issuer's jwks_uri must be on its own origin", async () => {
    const iss = `${issuer.url}/elsewhere`;
    issuer.route("/elsewhere/.well-known/openid-configuration", JSON.stringify({ issuer: iss, jwks_uri: `${rawUrl}/jwks` }));
    await refused(verifier().verify(issuer.idToken({ iss, sub: "s" }), () => true));
    // The same document from an issuer the operator lists is followed.
    issuer.route(
      "/elsewhere-ok/.well-known/openid-configuration",
      JSON.stringify({ issuer: `${issuer.url}/elsewhere-ok`, jwks_uri: issuer.jwksUri }),
    );
    const ok = await verifier({ operatorIssuers: [`${issuer.url}/elsewhere-ok`] }).verify(
      issuer.idToken({ iss: `${issuer.url}/elsewhere-ok`, sub: "s" }),
      () => true,
    );
    assert.equal(ok.sub, "s");
  });

  test("10,000 distinct issuers leave at most 1,000 cached, and concurrent verifies of one issuer share one fetch", async (t) => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    // 16 at once, all in unreserved slots: this test is about the cache's bound, not about fair shares.
    const v = verifier({ fetchSlots: { reserved: 0 } });
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    const N = 10_000;
    for (let i = 0; i < N; i += 16) {
      await Promise.all(
        Array.from({ length: 16 }, (_, j) =>
          refused(v.verify(issuer.idToken({ iss: `${issuer.url}/tenant-${i + j}`, sub: "s" }), () => true)),
        ),
      );
    }
    gc();
    const heapAfter = process.memoryUsage().heapUsed;
    t.diagnostic(
      `${N} distinct issuers: cache holds ${v.cacheSize}; heap ${((heapAfter - heapBefore) / 1024 / 1024).toFixed(1)} MiB larger`,
    );
    assert.ok(v.cacheSize <= 1_000, `${v.cacheSize} cached`);

    const shared = verifier();
    const before = issuer.discoveryFetches;
    const results = await Promise.all(Array.from({ length: 20 }, () => shared.verify(issuer.idToken({ sub: "s" }), () => true)));
    assert.equal(results.length, 20);
    assert.equal(issuer.discoveryFetches - before, 1, "one discovery fetch for 20 concurrent verifies");
  });
});
