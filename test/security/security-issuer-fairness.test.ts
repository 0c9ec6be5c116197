/**
 * Issue 21, item 5: one tenant cannot starve everyone's token exchange. An
 * org owner decides which issuers the server fetches (an identity's
 * issuerPattern); pointing it at a host that never answers must cost only
 * that tenant's share of fetch capacity: other tenants' exchanges, issuers
 * that answered before and the operator's sign-in issuers keep working, the
 * hostile exchanges answer UNAVAILABLE (the server could not check), and a
 * failed issuer is not fetched again for the negative-cache period.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { UpstreamVerifier } from "../../src/auth/upstream.js";
import { UnauthenticatedError, UnavailableError } from "../../src/domain/errors.js";
import { assertRestError } from "../support/assertions.js";
import { OidcIssuer, type SignOptions } from "../support/oidc-issuer.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const BASE = "http://api.test";

/** An HTTP server on loopback that reads requests and never answers; counts connections and requests by path. */
class SilentIssuer {
  readonly url: string;
  open = 0;
  maxOpen = 0;
  connections = 0;
  private readonly paths = new Map<string, number>();

  private constructor(private readonly server: Server) {
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    server.on("connection", (socket) => {
      this.connections++;
      this.maxOpen = Math.max(this.maxOpen, ++this.open);
      socket.on("close", () => this.open--);
    });
  }

  static async start(): Promise<SilentIssuer> {
    const ref: { silent?: SilentIssuer } = {};
    const server = createServer((req) => ref.silent!.hit(req.url ?? "/"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    ref.silent = new SilentIssuer(server);
    return ref.silent;
  }

  private hit(path: string): void {
    this.paths.set(path, (this.paths.get(path) ?? 0) + 1);
  }

  /** Requests received for path. */
  requests(path: string): number {
    return this.paths.get(path) ?? 0;
  }

  /** Drops every connection held: the fetches waiting on them fail at once. */
  dropAll(): void {
    this.server.closeAllConnections();
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** Serves a discovery document at `${issuer.url}/<name>` so each name is a distinct, working issuer. */
function extraIssuer(issuer: OidcIssuer, name: string): string {
  const iss = `${issuer.url}/${name}`;
  issuer.route(`/${name}/.well-known/openid-configuration`, JSON.stringify({ issuer: iss, jwks_uri: issuer.jwksUri }));
  return iss;
}

async function waitFor(what: string, done: () => boolean): Promise<void> {
  for (let i = 0; i < 6_000 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(done(), `timed out waiting for ${what}`);
}

/**
 * A hostile tenant's exchanges, `workers` at a time, each naming a fresh
 * issuer on the silent host, until stopped; stopping drops the silent host's
 * connections so that fetches held open end without waiting for a timeout.
 */
function flood(silent: SilentIssuer, exchange: (n: number) => Promise<RestResult>, workers: number) {
  let stopped = false;
  let next = 0;
  let answered = 0;
  const answers = new Map<string, number>();
  const run = async () => {
    while (!stopped) {
      const res = await exchange(next++);
      const key = `${res.status} ${res.body?.code} ${res.body?.details?.[0]?.reason}`;
      answers.set(key, (answers.get(key) ?? 0) + 1);
      answered++;
    }
  };
  const running = Promise.all(Array.from({ length: workers }, run));
  return {
    answers,
    /** Hostile exchanges answered so far: the first ones answered are those refused a fetch. */
    get answered() {
      return answered;
    },
    async stop() {
      stopped = true;
      let done = false;
      void running.then(() => (done = true));
      while (!done) {
        silent.dropAll();
        await new Promise((r) => setTimeout(r, 50));
      }
      await running;
    },
  };
}

/** A claim-match identity named "deployer" in org; returns its uid. */
async function identityIn(srv: TestServer, org: string, claimMatch: object): Promise<string> {
  const res = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, { name: "deployer", claimMatch });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.uid;
}

/**
 * The good tenant's two "deployer" identities in org: one matching any
 * `${good.url}/g<n>` issuer (a fetch per never-seen name), one good's own issuer.
 */
async function goodTenant(
  srv: TestServer,
  good: OidcIssuer,
  org: string,
): Promise<{ goodPatternIdentity: string; goodExactIdentity: string }> {
  return {
    goodPatternIdentity: await identityIn(srv, org, {
      issuerPattern: `${good.url.replace(/\./g, "\\.")}/g\\d+`,
      subject: "deployer",
    }),
    goodExactIdentity: await identityIn(srv, org, { issuer: good.url, subject: "deployer" }),
  };
}

/** An exchange of token at srv for an API token of identity (or a sign-in, without one). */
function exchangeAt(srv: TestServer, token: string, identity?: string): Promise<RestResult> {
  const query = `aud=${encodeURIComponent(BASE)}${identity ? `&identity=${identity}` : ""}`;
  return rest(srv.url, "GET", `/sts/exchange?${query}`, undefined, { authorization: `Bearer ${token}` });
}

describe("fetch capacity is fair between tenants (default settings)", () => {
  let srv: TestServer;
  let good: OidcIssuer;
  let operator: OidcIssuer;
  let silent: SilentIssuer;
  let hostileIdentity: string;
  let goodPatternIdentity: string;
  let goodExactIdentity: string;
  before(async () => {
    [good, operator, silent] = await Promise.all([OidcIssuer.start("good"), OidcIssuer.start("operator"), SilentIssuer.start()]);
    srv = await startTestServer({
      env: { PLATFORM_BASE_URL: BASE, PLATFORM_USER_ISSUERS: operator.url, PLATFORM_USER_AUDIENCES: "console" },
    });
    const hostileOrg = await createGroup(srv.url, null, "hostile org");
    const goodOrg = await createGroup(srv.url, null, "good org");
    const port = new URL(silent.url).port;
    hostileIdentity = await identityIn(srv, hostileOrg.uid, { issuerPattern: `http://127\\.0\\.0\\.1:${port}/t\\d+`, subject: "x" });
    ({ goodPatternIdentity, goodExactIdentity } = await goodTenant(srv, good, goodOrg.uid));
  });
  after(async () => {
    await srv.close();
    await Promise.all([good.close(), operator.close(), silent.close()]);
  });

  const exchange = (token: string, identity?: string) => exchangeAt(srv, token, identity);
  // Signed with the EC key: cheap to make, and never checked (nothing verifies a token whose issuer cannot be fetched).
  const hostileExchange = (n: number) =>
    exchange(good.idToken({ iss: `${silent.url}/t${n}`, sub: "x", aud: BASE }, { key: good.ec }), hostileIdentity);

  test("while one tenant floods a never-answering issuer, other tenants' exchanges and operator sign-ins succeed", async (t) => {
    const attack = flood(silent, hostileExchange, 24);
    // The attack is under way once the silent host holds the fetches it could get.
    await waitFor("the hostile fetches", () => silent.open >= 2 && attack.answered > 0);
    const GOOD = 10;
    const refused: string[] = [];
    const took: number[] = [];
    for (let i = 0; i < GOOD; i++) {
      const start = performance.now();
      // Each names an issuer never fetched before: the worst case, a fetch for every exchange.
      const res = await exchange(good.idToken({ iss: extraIssuer(good, `g${i}`), sub: "deployer", aud: BASE }), goodPatternIdentity);
      took.push(Math.round(performance.now() - start));
      if (res.status !== 200) refused.push(`${res.status} ${res.body?.details?.[0]?.reason}`);
    }
    t.diagnostic(`good exchange ms: ${took.join(" ")}`);
    const exact = await exchange(good.idToken({ sub: "deployer", aud: BASE }), goodExactIdentity);
    const signIn = await exchange(operator.idToken({ sub: "person", aud: "console" }));
    const openDuringAttack = silent.maxOpen;
    await attack.stop();
    t.diagnostic(`other tenant's exact-issuer exchange: ${exact.status}; operator sign-in: ${signIn.status}`);
    const answers = Object.fromEntries(attack.answers);
    t.diagnostic(
      `good tenant: ${refused.length} of ${GOOD} exchanges with never-seen issuers refused during the attack ${JSON.stringify(refused.slice(0, 3))}`,
    );
    t.diagnostic(
      `hostile answers: ${JSON.stringify(answers)}; silent host: ${silent.connections} connections, at most ${silent.maxOpen} open`,
    );
    assert.deepEqual(refused, [], "no good exchange refused");
    assert.equal(exact.status, 200, JSON.stringify(exact.body));
    assert.equal(signIn.status, 200, JSON.stringify(signIn.body));
    assert.deepEqual(Object.keys(answers), ["503 14 UNAVAILABLE"], "every hostile exchange answers UNAVAILABLE");
    assert.ok(openDuringAttack <= 2, `the hostile tenant held ${openDuringAttack} fetches at once (cap 2)`);
  });

  test("a failed issuer is not fetched again for the negative-cache period; concurrent exchanges share one fetch", async () => {
    const iss = `${silent.url}/t999999`;
    const token = good.idToken({ iss, sub: "x", aud: BASE });
    const first = await Promise.all(Array.from({ length: 5 }, () => exchange(token, hostileIdentity)));
    for (const res of first) assertRestError(res, 503, 14, "UNAVAILABLE");
    const again = await Promise.all(Array.from({ length: 20 }, () => exchange(token, hostileIdentity)));
    for (const res of again) assertRestError(res, 503, 14, "UNAVAILABLE");
    assert.equal(silent.requests("/t999999/.well-known/openid-configuration"), 1, "one fetch for 25 exchanges");
  });
});

describe("reserved capacity: issuers that answered before and operator issuers (small settings)", () => {
  let srv: TestServer;
  let good: OidcIssuer;
  let operator: OidcIssuer;
  let silent: SilentIssuer;
  let skew = 0;
  let hostile: string[];
  let goodPatternIdentity: string;
  let goodExactIdentity: string;
  before(async () => {
    [good, operator, silent] = await Promise.all([OidcIssuer.start("good2"), OidcIssuer.start("operator2"), SilentIssuer.start()]);
    srv = await startTestServer({
      env: {
        PLATFORM_BASE_URL: BASE,
        PLATFORM_USER_ISSUERS: operator.url,
        PLATFORM_USER_AUDIENCES: "console",
        PLATFORM_ISSUER_FETCHES: "4",
        PLATFORM_ISSUER_FETCHES_RESERVED: "2",
        PLATFORM_ISSUER_FETCHES_PER_TENANT: "1",
        // Held fetches stay held for the whole test: the slots are known to be full, whatever the machine's load.
        PLATFORM_ISSUER_TIMEOUT_MS: "120000",
        PLATFORM_ISSUER_NEW_TIMEOUT_MS: "120000",
      },
      now: () => Date.now() + skew,
    });
    const port = new URL(silent.url).port;
    // Two hostile tenants, one fetch each: together they hold every slot not reserved.
    hostile = [];
    for (const name of ["hostile a", "hostile b"]) {
      const org = await createGroup(srv.url, null, name);
      hostile.push(await identityIn(srv, org.uid, { issuerPattern: `http://127\\.0\\.0\\.1:${port}/${name.at(-1)}\\d+`, subject: "x" }));
    }
    const goodOrg = await createGroup(srv.url, null, "good org");
    ({ goodPatternIdentity, goodExactIdentity } = await goodTenant(srv, good, goodOrg.uid));
  });
  after(async () => {
    await srv.close();
    await Promise.all([good.close(), operator.close(), silent.close()]);
  });

  /** Tokens dated by the server's (skewed) clock. */
  const token = (issuer: OidcIssuer, claims: Record<string, unknown>, opts?: SignOptions) => {
    const now = Math.floor((Date.now() + skew) / 1000);
    return issuer.idToken({ iat: now, exp: now + 300, ...claims }, opts);
  };
  const exchange = (bearer: string, identity?: string) => exchangeAt(srv, bearer, identity);

  test("with every unreserved slot held, a known issuer's refresh and an operator sign-in still succeed; a new issuer gets UNAVAILABLE", async (t) => {
    assert.equal((await exchange(token(good, { sub: "deployer", aud: BASE }), goodExactIdentity)).status, 200, "the issuer answers once");
    const attacks = hostile.map((uid, i) =>
      flood(silent, (n) => exchange(token(good, { iss: `${silent.url}/${"ab"[i]}${n}`, sub: "x", aud: BASE }, { key: good.ec }), uid), 8),
    );
    await waitFor("both hostile tenants' fetches", () => silent.open >= 2 && attacks.every((a) => a.answered > 0));
    const newIssuer = await exchange(token(good, { iss: extraIssuer(good, "g1"), sub: "deployer", aud: BASE }), goodPatternIdentity);
    // Past the discovery cache's lifetime, the known issuer must be fetched again.
    skew += 11 * 60_000;
    const fetchesBefore = good.discoveryFetches;
    const known = await exchange(token(good, { sub: "deployer", aud: BASE }), goodExactIdentity);
    const refetched = good.discoveryFetches - fetchesBefore;
    const signIn = await exchange(token(operator, { sub: "person", aud: "console" }));
    const maxOpen = silent.maxOpen;
    await Promise.all(attacks.map((a) => a.stop()));
    t.diagnostic(`new issuer: ${newIssuer.status}; known issuer after expiry: ${known.status}; operator sign-in: ${signIn.status}`);
    assertRestError(newIssuer, 503, 14, "UNAVAILABLE");
    assert.equal(known.status, 200, JSON.stringify(known.body));
    assert.equal(refetched, 1, "the known issuer was fetched again, in a reserved slot");
    assert.equal(signIn.status, 200, JSON.stringify(signIn.body));
    assert.ok(maxOpen <= 2, `hostile tenants held ${maxOpen} fetches at once (1 each)`);
    for (const a of attacks) assert.deepEqual(Object.keys(Object.fromEntries(a.answers)), ["503 14 UNAVAILABLE"]);
  });
});

describe("which failures answer UNAVAILABLE (the verifier alone)", () => {
  let issuer: OidcIssuer;
  let silent: SilentIssuer;
  let flaky: Server;
  let flakyUrl: string;
  before(async () => {
    [issuer, silent] = await Promise.all([OidcIssuer.start("classes"), SilentIssuer.start()]);
    flaky = createServer((_req, res) => res.writeHead(503).end());
    await new Promise<void>((resolve) => flaky.listen(0, "127.0.0.1", resolve));
    flakyUrl = `http://127.0.0.1:${(flaky.address() as AddressInfo).port}`;
  });
  after(async () => {
    flaky.closeAllConnections();
    await new Promise((resolve) => flaky.close(resolve));
    await Promise.all([issuer.close(), silent.close()]);
  });

  const verifier = () => new UpstreamVerifier(Date.now, { allowLoopback: true, newIssuerTimeoutMs: 300 });
  const verify = (v: UpstreamVerifier, iss: string, tenant?: string) => v.verify(issuer.idToken({ iss, sub: "s" }), () => true, tenant);

  test("no answer, a refused connection and a 5xx are UNAVAILABLE; a 404 is a refusal", async () => {
    const v = verifier();
    await assert.rejects(verify(v, `${silent.url}/held`), UnavailableError);
    await assert.rejects(verify(v, flakyUrl), UnavailableError);
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const port = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(port));
      });
    });
    await assert.rejects(verify(v, `http://127.0.0.1:${closedPort}`), UnavailableError);
    await assert.rejects(verify(v, `${issuer.url}/no-such-tenant`), UnauthenticatedError);
  });

  test("a tenant past its share is refused at once with UNAVAILABLE; another tenant still fetches", async () => {
    const v = verifier();
    const held = [verify(v, `${silent.url}/a1`, "tenant-a"), verify(v, `${silent.url}/a2`, "tenant-a")];
    await assert.rejects(verify(v, `${silent.url}/a3`, "tenant-a"), UnavailableError);
    assert.equal(v.fetchesInFlight, 2, "the third never started a fetch");
    assert.equal((await verify(v, issuer.url, "tenant-b")).sub, "s");
    for (const p of held) await assert.rejects(p, UnavailableError);
    assert.equal(v.fetchesInFlight, 0, "every slot is given back");
  });
});
