import assert from "node:assert/strict";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { ServiceError } from "@grpc/grpc-js";
import fc from "fast-check";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { assertRestError } from "../support/assertions.js";
import { decode, mutate, readServerKey, type Mutation, type ServerKey } from "../support/forge.js";
import { grpcClient, grpcStatus, type GrpcTestClient } from "../support/grpc.js";
import { generateIssuerKey, OidcIssuer, signJwt, type IssuerKey } from "../support/oidc-issuer.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

/** Identifiers only: requests go to srv.url, these are the iss/aud values in tokens. */
const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const SUBJECT = "repo:org/app:ref:refs/heads/main";
/** The order n of P-256: r = s = n is the other "psychic signature" (CVE-2022-21449). */
const P256_ORDER = Buffer.from("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551", "hex");

/** Issuer A: trusted (PLATFORM_USER_ISSUERS and claim matches). B: never trusted. R: rotation. */
let A: OidcIssuer;
let B: OidcIssuer;
let R: OidcIssuer;
/** A P-521 key published in A's JWKS: ES512 is outside the upstream allow-list. */
let es512: IssuerKey;
let srv: TestServer;
let org: { uid: string };
let deployer: Identity;
let grpcNoAuth: GrpcTestClient;
/** Server clock skew (ms), moved only by the static-keys expiry test. */
let skew = 0;

interface Identity {
  uid: string;
  name: string;
  lastSeenTime: string;
  createTime: string;
}

const now = () => Math.floor(Date.now() / 1000);

/** Prints one figure line for the issue's closing note. */
function report(line: string): void {
  // eslint-disable-next-line no-console
  console.log(line);
}

before(async () => {
  [A, B, R] = await Promise.all([OidcIssuer.start("a"), OidcIssuer.start("b"), OidcIssuer.start("r")]);
  es512 = await generateIssuerKey("ES512", "a-es512");
  A.publish([A.rsa, A.ec, es512]);
  srv = await startTestServer({
    env: { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PLATFORM_USER_ISSUERS: A.url },
    now: () => Date.now() + skew,
  });
  org = await createGroup(srv.url, null, "sts org");
  deployer = await createIdentity(org.uid, { name: "deployer", claimMatch: { issuer: A.url, subject: SUBJECT } });
  grpcNoAuth = grpcClient(GroupsService, srv.port, { token: "" });
});

after(async () => {
  grpcNoAuth.close();
  await srv.close();
  await Promise.all([A.close(), B.close(), R.close()]);
});

async function createIdentity(parent: string, body: object): Promise<Identity> {
  let res = await rest(srv.url, "POST", `/iam/v2beta1/identities/${parent}`, body);
  // The identities service may still be landing; wait for its route.
  for (let i = 0; i < 30 && res.status === 404 && res.body?.details?.[0]?.reason === "ROUTE_NOT_FOUND"; i++) {
    await new Promise((r) => setTimeout(r, 10_000));
    res = await rest(srv.url, "POST", `/iam/v2beta1/identities/${parent}`, body);
  }
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

async function getIdentity(uid: string): Promise<Identity> {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/identities/${uid}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

async function bindRole(identityUid: string, groupUid: string, roleName: string): Promise<void> {
  const roles = await rest(srv.url, "GET", `/iam/v2beta1/roles?name=${encodeURIComponent(roleName)}`);
  const role = roles.body.roles.find((r: { name: string }) => r.name === roleName);
  assert.ok(role, `built-in role ${roleName}`);
  const res = await rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${groupUid}`, { identityUid, roleUid: role.uid });
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

type Params = Record<string, string | string[] | undefined>;

/**
 * Calls the exchange: GET with query parameters, or POST with a form body.
 * token undefined sends no Authorization header.
 */
async function exchange(token: string | undefined, params: Params, method: "GET" | "POST" = "GET"): Promise<RestResult> {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) for (const x of [v].flat()) qs.append(k, x);
  const authorization = token === undefined ? "" : `Bearer ${token}`;
  if (method === "GET") {
    const q = qs.toString();
    return rest(srv.url, "GET", `/sts/exchange${q ? `?${q}` : ""}`, undefined, { authorization });
  }
  return rest(srv.url, "POST", "/sts/exchange", qs.toString(), { authorization, "content-type": "application/x-www-form-urlencoded" });
}

/** An exchange that must succeed: returns the API token, checked against its expiry. */
async function exchangeOk(token: string, params: Params, method: "GET" | "POST" = "GET"): Promise<string> {
  const res = await exchange(token, params, method);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(typeof res.body.token, "string");
  const { header, claims } = decode(res.body.token);
  assert.equal(header.typ, "at+jwt");
  assert.equal(claims.iss, AUTH);
  assert.equal(claims.aud, BASE);
  assert.equal(claims.exp, claims.iat! + 3600);
  assert.equal(Date.parse(res.body.expiry), claims.exp! * 1000, "expiry is the token's exp");
  return res.body.token;
}

/** An exchange that must issue nothing: a 4xx error body and no token. */
function assertNoToken(res: RestResult, what: string): void {
  assert.ok(res.status >= 400 && res.status < 500, `${what}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body?.token, undefined, `${what}: no token`);
  // 431: Node refuses headers over its limit before the API sees them.
  if (res.status !== 431) assert.equal(typeof res.body?.code, "number", `${what}: error body`);
}

/** An ID token from A for the deployer identity, with overrides. */
const deployerToken = (claims: Record<string, unknown> = {}) => A.idToken({ sub: SUBJECT, aud: AUTH, ...claims });

describe("exchange of a matching claim-match token", () => {
  test("GET with query parameters and POST with a form body both return {token, expiry}; the identity's lastSeenTime moves", async () => {
    const before = await getIdentity(deployer.uid);
    assert.equal(before.lastSeenTime, before.createTime);
    await new Promise((r) => setTimeout(r, 5));
    const viaGet = await exchangeOk(deployerToken(), { aud: BASE, identity: deployer.uid });
    assert.equal(decode(viaGet).claims.sub, deployer.uid);
    const seen = await getIdentity(deployer.uid);
    assert.ok(Date.parse(seen.lastSeenTime) > Date.parse(before.lastSeenTime), `${seen.lastSeenTime} after ${before.lastSeenTime}`);
    assert.equal(seen.createTime, before.createTime);

    const viaPost = await exchangeOk(deployerToken(), { aud: BASE, identity: deployer.uid }, "POST");
    assert.equal(decode(viaPost).claims.sub, deployer.uid);
  });

  test("the issued token is a bearer token for the identity's role bindings, over REST and gRPC, and nothing more", async () => {
    const team = await createGroup(srv.url, org.uid, "deploy team");
    const sibling = await createGroup(srv.url, null, "elsewhere");
    const ci = await createIdentity(org.uid, { name: "ci viewer", claimMatch: { issuer: A.url, subject: "repo:org/viewer:ref" } });
    await bindRole(ci.uid, team.uid, "viewer");
    const token = await exchangeOk(A.idToken({ sub: "repo:org/viewer:ref", aud: AUTH }), { aud: BASE, identity: ci.uid });

    const got = await rest(srv.url, "GET", `/iam/v2beta1/groups/${team.uid}`, undefined, { authorization: `Bearer ${token}` });
    assert.equal(got.status, 200, JSON.stringify(got.body));
    assert.equal(got.body.name, "deploy team");
    const client = grpcClient(GroupsService, srv.port, { token });
    try {
      assert.equal((await client.call("getGroup", { uid: team.uid })).name, "deploy team");
    } finally {
      client.close();
    }
    const denied = await rest(srv.url, "GET", `/iam/v2beta1/groups/${sibling.uid}`, undefined, { authorization: `Bearer ${token}` });
    assertRestError(denied, 403, 7, "PERMISSION_DENIED");
    const write = await rest(
      srv.url,
      "POST",
      `/iam/v2beta1/groups/${team.uid}`,
      { name: "not allowed" },
      { authorization: `Bearer ${token}` },
    );
    assertRestError(write, 403, 7, "PERMISSION_DENIED");
  });

  test("a JSON body is not read (no body mapping): 400 INVALID_ARGUMENT and no token", async () => {
    const res = await rest(
      srv.url,
      "POST",
      "/sts/exchange",
      { aud: [BASE], identity: deployer.uid },
      { authorization: `Bearer ${deployerToken()}` },
    );
    assertRestError(res, 400, 3, "INVALID_ARGUMENT");
    assert.equal(res.body.token, undefined);
  });
});

describe("request validation", () => {
  test("missing aud → 400 'Audience must be specified' (GET and POST)", async () => {
    for (const method of ["GET", "POST"] as const) {
      const res = await exchange(deployerToken(), { identity: deployer.uid }, method);
      const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
      assert.match(err.message, /Audience must be specified/);
      assert.equal(res.body.token, undefined);
    }
  });

  test("an aud other than the API base URL → 400, also when one of several", async () => {
    for (const aud of [AUTH, "http://api.test/", "https://api.test", "http://API.test", [BASE, "https://other.example"]]) {
      const res = await exchange(deployerToken(), { aud, identity: deployer.uid });
      assertRestError(res, 400, 3, "INVALID_ARGUMENT");
      assert.equal(res.body.token, undefined, JSON.stringify(aud));
    }
  });

  test("no bearer token → 401 UNAUTHENTICATED; a non-Bearer scheme likewise", async () => {
    for (const authorization of ["", `Basic ${Buffer.from("a:b").toString("base64")}`, "Bearer", `Token ${deployerToken()}`]) {
      const res = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity=${deployer.uid}`, undefined, {
        authorization,
      });
      assertRestError(res, 401, 16, "UNAUTHENTICATED");
      assert.equal(res.body.token, undefined);
    }
  });
});

describe("which identity a token may assume", () => {
  let other: Identity;
  before(async () => {
    other = await createIdentity(org.uid, { name: "other app", claimMatch: { issuer: A.url, subject: "repo:org/other:ref" } });
  });

  test("a token matching identity A used to request identity B → PERMISSION_DENIED and no token", async () => {
    const res = await exchange(deployerToken(), { aud: BASE, identity: other.uid });
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    assert.equal(res.body.token, undefined);
  });

  test("an unknown identity uid and a mismatched token get identical answers", async () => {
    const missing = `${org.uid}/${"0123456789abcdef"}`;
    const unknown = await exchange(deployerToken(), { aud: BASE, identity: missing });
    const mismatched = await exchange(deployerToken(), { aud: BASE, identity: other.uid });
    const normalize = (r: RestResult, uid: string) => ({
      status: r.status,
      body: JSON.parse(JSON.stringify(r.body).replaceAll(uid, "<uid>")),
    });
    assert.deepEqual(normalize(unknown, missing), normalize(mismatched, other.uid));
    assertRestError(unknown, 403, 7, "PERMISSION_DENIED");
  });

  test("a token that cannot be verified gets the same answer for an existing and an unknown identity (no uid probing)", async () => {
    const missing = `${org.uid}/${"fedcba9876543210"}`;
    const normalize = (r: RestResult, uid: string) => ({
      status: r.status,
      body: JSON.parse(JSON.stringify(r.body).replaceAll(uid, "<uid>")),
    });
    for (const [what, token] of [
      ["a token of an issuer the identity does not trust", B.idToken({ sub: SUBJECT, aud: AUTH })],
      ["a token with a forged signature", deployerToken({}).replace(/\.[^.]+$/, ".AAAA")],
      ["an expired token", deployerToken({ iat: now() - 7200, exp: now() - 3600 })],
    ] as const) {
      const existing = await exchange(token, { aud: BASE, identity: deployer.uid });
      const unknown = await exchange(token, { aud: BASE, identity: missing });
      assert.deepEqual(normalize(existing, deployer.uid), normalize(unknown, missing), what);
      assertNoToken(existing, what);
    }
  });

  test("subjectPattern is anchored: 'repo:org/app:.*' matches repo:org/app:ref only", async () => {
    const id = await createIdentity(org.uid, { name: "pattern app", claimMatch: { issuer: A.url, subjectPattern: "repo:org/app:.*" } });
    await exchangeOk(A.idToken({ sub: "repo:org/app:ref", aud: AUTH }), { aud: BASE, identity: id.uid });
    for (const sub of ["repo:org/app-evil:x", "xrepo:org/app:x", "repo:org/app", "repo:org/app:ref\nx", "repo:org/apP:ref"]) {
      const res = await exchange(A.idToken({ sub, aud: AUTH }), { aud: BASE, identity: id.uid });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(res.body.token, undefined, sub);
    }
  });

  test("issuerPattern is anchored too", async () => {
    const escaped = A.url.replace(/[.]/g, "\\.");
    const id = await createIdentity(org.uid, { name: "issuer pattern", claimMatch: { issuerPattern: `${escaped}`, subject: SUBJECT } });
    await exchangeOk(deployerToken(), { aud: BASE, identity: id.uid });
    // B's URL is the same but for the port: a prefix match would let "…:1234" trust "…:12345".
    const prefix = await createIdentity(org.uid, {
      name: "issuer prefix",
      claimMatch: { issuerPattern: escaped.slice(0, -1), subject: SUBJECT },
    });
    const res = await exchange(deployerToken(), { aud: BASE, identity: prefix.uid });
    assertNoToken(res, "issuer pattern matching only a prefix of iss");
  });

  test("an audience other than claimMatch.audience is refused; without one, aud must hold the auth URL", async () => {
    const id = await createIdentity(org.uid, { name: "aud app", claimMatch: { issuer: A.url, subject: SUBJECT, audience: "sts.example" } });
    await exchangeOk(deployerToken({ aud: "sts.example" }), { aud: BASE, identity: id.uid });
    await exchangeOk(deployerToken({ aud: ["x", "sts.example"] }), { aud: BASE, identity: id.uid });
    for (const aud of ["other.example", AUTH, BASE, "sts.example/", ["x", "y"]]) {
      const res = await exchange(deployerToken({ aud }), { aud: BASE, identity: id.uid });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(res.body.token, undefined, JSON.stringify(aud));
    }
    for (const aud of ["sts.example", BASE, `${AUTH}/`]) {
      const res = await exchange(deployerToken({ aud }), { aud: BASE, identity: deployer.uid });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
    }
    await exchangeOk(deployerToken({ aud: ["sts.example", AUTH] }), { aud: BASE, identity: deployer.uid });
  });

  test("claims (exact) and claimPatterns (anchored regex) are enforced", async () => {
    const id = await createIdentity(org.uid, {
      name: "claims app",
      claimMatch: { issuer: A.url, subject: SUBJECT, claims: { ref: "refs/heads/main" }, claimPatterns: { workflow: "deploy-.*" } },
    });
    await exchangeOk(deployerToken({ ref: "refs/heads/main", workflow: "deploy-prod" }), { aud: BASE, identity: id.uid });
    for (const [what, claims] of [
      ["other ref", { ref: "refs/heads/dev", workflow: "deploy-prod" }],
      ["ref missing", { workflow: "deploy-prod" }],
      ["ref with suffix", { ref: "refs/heads/main2", workflow: "deploy-prod" }],
      ["ref as an array", { ref: ["refs/heads/main"], workflow: "deploy-prod" }],
      ["workflow not matching", { ref: "refs/heads/main", workflow: "build" }],
      ["workflow matching only a suffix", { ref: "refs/heads/main", workflow: "xdeploy-prod" }],
      ["workflow missing", { ref: "refs/heads/main" }],
    ] as const) {
      const res = await exchange(deployerToken(claims), { aud: BASE, identity: id.uid });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(res.body.token, undefined, what);
    }
  });

  test("an identity deleted just before is refused (no stale cache)", async () => {
    const id = await createIdentity(org.uid, { name: "short lived", claimMatch: { issuer: A.url, subject: SUBJECT } });
    await exchangeOk(deployerToken(), { aud: BASE, identity: id.uid });
    const del = await rest(srv.url, "DELETE", `/iam/v2beta1/identities/${id.uid}`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    const res = await exchange(deployerToken(), { aud: BASE, identity: id.uid });
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    assert.equal(res.body.token, undefined);
  });

  test("a ReDoS-shaped subjectPattern '(a+)+$' answers a 30-char 'aaaa…!' subject promptly", async () => {
    const id = await createIdentity(org.uid, { name: "redos", claimMatch: { issuer: A.url, subjectPattern: "(a+)+$" } });
    const started = Date.now();
    const res = await exchange(A.idToken({ sub: `${"a".repeat(29)}!`, aud: AUTH }), { aud: BASE, identity: id.uid });
    assert.ok(Date.now() - started < 5000, "answered within the 5 s liveness bound");
    assertRestError(res, 403, 7, "PERMISSION_DENIED");
    await exchangeOk(A.idToken({ sub: "a".repeat(30), aud: AUTH }), { aud: BASE, identity: id.uid });
  });
});

describe("static-keys identities", () => {
  const ISS = "https://offline.example";
  let registered: IssuerKey;
  let unregistered: IssuerKey;
  before(async () => {
    registered = await generateIssuerKey("ES256", "static-1");
    unregistered = await generateIssuerKey("ES256", "static-2");
  });
  const staticToken = (key: IssuerKey, claims: Record<string, unknown> = {}, kid = key.kid) => {
    const t = Math.floor((Date.now() + skew) / 1000);
    return signJwt(
      { alg: "ES256", kid, typ: "JWT" },
      { iss: ISS, sub: "robot", aud: AUTH, iat: t, exp: t + 300, ...claims },
      key.privateKey,
    );
  };

  test("a token signed by a registered key is accepted; another key (even with the registered kid) is refused", async () => {
    const id = await createIdentity(org.uid, {
      name: "robot",
      staticKeys: { issuer: ISS, subject: "robot", issuerKeys: OidcIssuer.jwksText([registered]) },
    });
    const token = await exchangeOk(staticToken(registered), { aud: BASE, identity: id.uid });
    assert.equal(decode(token).claims.sub, id.uid);
    for (const [what, t] of [
      ["another key, its own kid", staticToken(unregistered)],
      ["another key, the registered kid", staticToken(unregistered, {}, registered.kid)],
      ["another subject", staticToken(registered, { sub: "robot2" })],
      ["another issuer", staticToken(registered, { iss: "https://offline.example/" })],
      ["another audience", staticToken(registered, { aud: BASE })],
      ["expired", staticToken(registered, { iat: now() - 7200, exp: now() - 3600 })],
    ] as const) {
      assertNoToken(await exchange(t, { aud: BASE, identity: id.uid }), what);
    }
  });

  test("audiences, when set, replace the default audience", async () => {
    const id = await createIdentity(org.uid, {
      name: "robot aud",
      staticKeys: { issuer: ISS, subject: "robot", issuerKeys: OidcIssuer.jwksText([registered]), audiences: ["custom-aud"] },
    });
    await exchangeOk(staticToken(registered, { aud: "custom-aud" }), { aud: BASE, identity: id.uid });
    assertNoToken(await exchange(staticToken(registered), { aud: BASE, identity: id.uid }), "the default audience");
  });

  test("after expirationTime the identity is refused", async () => {
    const expires = new Date(Date.now() + 3600_000).toISOString();
    const id = await createIdentity(org.uid, {
      name: "robot expiring",
      staticKeys: { issuer: ISS, subject: "robot", issuerKeys: OidcIssuer.jwksText([registered]), expirationTime: expires },
    });
    assert.equal(((await getIdentity(id.uid)) as unknown as { staticKeys: { expirationTime: string } }).staticKeys.expirationTime, expires);
    await exchangeOk(staticToken(registered), { aud: BASE, identity: id.uid });
    skew = 3600_000 + 60_000;
    try {
      const res = await exchange(staticToken(registered), { aud: BASE, identity: id.uid });
      assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(res.body.token, undefined);
    } finally {
      skew = 0;
    }
  });
});

describe("sign-in (PLATFORM_USER_ISSUERS)", () => {
  test("an exchange without identity registers the person once, under the deterministic uid LookupIdentity gives", async () => {
    const sub = `alice-${randomBytes(4).toString("hex")}`;
    const lookup = await rest(srv.url, "GET", `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(A.url)}&subject=${sub}`);
    assert.equal(lookup.status, 200, JSON.stringify(lookup.body));
    const uid: string = lookup.body.uid;
    assert.match(uid, /^[0-9a-f]{40}$/);
    assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/identities/${uid}`)).status, 404, "not registered before sign-in");

    const idToken = () => A.idToken({ sub, aud: AUTH, email: "alice@example.com", email_verified: true });
    const first = await exchangeOk(idToken(), { aud: BASE });
    assert.equal(decode(first).claims.sub, uid);
    const person = await rest(srv.url, "GET", `/iam/v2beta1/identities/${uid}`);
    assert.equal(person.status, 200, JSON.stringify(person.body));
    assert.equal(person.body.email, "alice@example.com");
    assert.deepEqual({ issuer: person.body.claimMatch.issuer, subject: person.body.claimMatch.subject }, { issuer: A.url, subject: sub });
    const again = await rest(srv.url, "GET", `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(A.url)}&subject=${sub}`);
    assert.equal(again.body.uid, uid);

    const second = await exchangeOk(idToken(), { aud: BASE }, "POST");
    assert.equal(decode(second).claims.sub, uid);
    const list = await rest(srv.url, "GET", `/iam/v2beta1/identities?pageSize=1000`);
    assert.equal(list.status, 200, JSON.stringify(list.body));
    const mine = list.body.identities.filter((i: { claimMatch?: { subject?: string } }) => i.claimMatch?.subject === sub);
    assert.deepEqual(
      mine.map((i: { uid: string }) => i.uid),
      [uid],
      "exactly one identity for the person",
    );

    // The person's token works as an API bearer token (AuthService-free check: a lookup any caller may make).
    const asPerson = await rest(
      srv.url,
      "GET",
      `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(A.url)}&subject=${sub}`,
      undefined,
      {
        authorization: `Bearer ${second}`,
      },
    );
    assert.equal(asPerson.status, 200, JSON.stringify(asPerson.body));
    assert.equal(asPerson.body.uid, uid);
  });

  test("an issuer not in the list, or an audience not accepted for sign-in, is refused; nothing is registered", async () => {
    const sub = `mallory-${randomBytes(4).toString("hex")}`;
    assertNoToken(await exchange(B.idToken({ sub, aud: AUTH }), { aud: BASE }), "issuer B");
    assertNoToken(await exchange(A.idToken({ sub, aud: "https://other.example" }), { aud: BASE }), "aud of another service");
    assertNoToken(await exchange(A.idToken({ sub, aud: BASE }), { aud: BASE }), "aud = the API base URL");
    for (const iss of [B.url, A.url]) {
      const uid = (await rest(srv.url, "GET", `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(iss)}&subject=${sub}`))
        .body.uid;
      assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/identities/${uid}`)).status, 404);
    }
    assert.equal(B.discoveryFetches + B.jwksFetches, 0, "the untrusted issuer is never contacted");
  });
});

describe("upstream token lifetime bounds (a leaked long-lived token is worthless)", () => {
  const HOUR = 3600;
  const DAY = 24 * HOUR;
  const DECADE = 3650 * DAY;
  const STATIC_ISS = "https://offline-bounds.example";
  let key: IssuerKey;
  let robot: Identity;
  let idp: { uid: string };
  const CLIENT_ID = "bounds-client";
  before(async () => {
    key = await generateIssuerKey("ES256", "bounds-1");
    robot = await createIdentity(org.uid, {
      name: "bounded robot",
      staticKeys: { issuer: STATIC_ISS, subject: "robot", issuerKeys: OidcIssuer.jwksText([key]) },
    });
    const roles = await rest(srv.url, "GET", `/iam/v2beta1/roles?name=viewer`);
    const viewer = roles.body.roles.find((r: { name: string }) => r.name === "viewer").uid;
    const created = await rest(srv.url, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
      name: "bounds sso",
      defaultRole: viewer,
      oidc: { issuer: A.url, clientId: CLIENT_ID, clientSecret: "bounds-secret" },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    idp = created.body;
  });

  /** A static-keys token for robot; claims set to undefined are left out. */
  const staticToken = (claims: Record<string, unknown>) => {
    const payload: Record<string, unknown> = { iss: STATIC_ISS, sub: "robot", aud: AUTH, iat: now(), exp: now() + 300, ...claims };
    for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];
    return signJwt({ alg: "ES256", kid: key.kid, typ: "JWT" }, payload, key.privateKey);
  };
  /** An exchange that must be refused exactly as an expired token of the same kind is. */
  async function assertRefusedLikeExpired(token: string, expired: string, params: Params, what: string): Promise<void> {
    const refused = await exchange(token, params);
    const control = await exchange(expired, params);
    assertNoToken(refused, what);
    assert.deepEqual({ status: refused.status, body: refused.body }, { status: control.status, body: control.body }, what);
    report(`upstream lifetime bound: ${what} → HTTP ${refused.status} ${refused.body.details?.[0]?.reason ?? ""}`);
  }
  const past = { iat: now() - 2 * HOUR, exp: now() - HOUR };

  test("static keys: exp − iat of 10 years, 24 h + 1 s, or 10 years with no iat → refused as an expired token is; 23 h and 24 h → accepted", async () => {
    const params = { aud: BASE, identity: robot.uid };
    const expired = staticToken(past);
    await exchangeOk(staticToken({ exp: now() + 23 * HOUR }), params);
    await exchangeOk(staticToken({ exp: now() + DAY }), params);
    // iat and exp from one reading of the clock: a second ticking between them would make 24 h + 1 s a plain 24 h.
    const t = now();
    for (const [what, claims] of [
      ["static-keys token, exp 10 years out", { iat: t, exp: t + DECADE }],
      ["static-keys token, exp − iat = 24 h + 1 s", { iat: t, exp: t + DAY + 1 }],
      ["static-keys token, no iat, exp 10 years out", { iat: undefined, exp: now() + DECADE }],
      ["static-keys token, iat 10 years ago, exp 1 h out", { iat: now() - DECADE, exp: now() + HOUR }],
    ] as const) {
      await assertRefusedLikeExpired(staticToken(claims), expired, params, what);
    }
  });

  test("online issuer (claimMatch): exp 30 days out → refused as an expired token is; 1 h and 7 days → accepted", async () => {
    const params = { aud: BASE, identity: deployer.uid };
    await exchangeOk(deployerToken({ exp: now() + HOUR }), params);
    await exchangeOk(deployerToken({ exp: now() + 7 * DAY }), params);
    const expired = deployerToken(past);
    await assertRefusedLikeExpired(deployerToken({ exp: now() + 30 * DAY }), expired, params, "online issuer token, exp 30 days out");
    await assertRefusedLikeExpired(deployerToken({ exp: now() + DECADE }), expired, params, "online issuer token, exp 10 years out");
    await assertRefusedLikeExpired(deployerToken({ iat: undefined, exp: now() + DECADE }), expired, params, "online, no iat, 10 years");
  });

  test("sign-in (PLATFORM_USER_ISSUERS and an organization's identity provider): exp 30 days out → refused; 1 h → accepted", async () => {
    const sub = `bounded-${randomBytes(4).toString("hex")}`;
    const userToken = (claims: Record<string, unknown>) => A.idToken({ sub, aud: AUTH, ...claims });
    await assertRefusedLikeExpired(userToken({ exp: now() + 30 * DAY }), userToken(past), { aud: BASE }, "sign-in token, exp 30 days out");
    const lookup = await rest(srv.url, "GET", `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(A.url)}&subject=${sub}`);
    assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/identities/${lookup.body.uid}`)).status, 404, "nobody registered");
    await exchangeOk(userToken({ exp: now() + HOUR }), { aud: BASE });

    const ssoToken = (claims: Record<string, unknown>) => A.idToken({ sub, aud: CLIENT_ID, ...claims });
    const viaIdp = { aud: BASE, identity_provider: idp.uid };
    await assertRefusedLikeExpired(ssoToken({ exp: now() + 30 * DAY }), ssoToken(past), viaIdp, "provider sign-in token, exp 30 days out");
    await exchangeOk(ssoToken({ exp: now() + HOUR }), viaIdp);
  });
});

// ---------------------------------------------------------------------------
// RFC 8725 forged-token battery: hand-made attacks on our JWT verification, then fuzzed tokens
// ---------------------------------------------------------------------------

interface Forged {
  name: string;
  token: string;
  /** Set when the token is valid at the other destination (a control of the other battery): send it here only. */
  only?: "sts" | "api";
}

/** Upstream forgeries: each is a deployer ID token from A that is wrong in exactly one way. */
function upstreamForgeries(ourToken: string, ourKey: ServerKey): Forged[] {
  const t = now();
  const good = { iss: A.url, sub: SUBJECT, aud: AUTH, iat: t, exp: t + 300 };
  const rsaPem = A.rsa.publicKey.export({ type: "spki", format: "pem" });
  const rsaPkcs1 = A.rsa.publicKey.export({ type: "pkcs1", format: "pem" });
  const ecPem = A.ec.publicKey.export({ type: "spki", format: "pem" });
  const attacker = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const attackerEc = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const attackerJwk = { ...attacker.publicKey.export({ format: "jwk" }), kid: "attacker", alg: "RS256", use: "sig" };
  const jku = A.route("/attacker/jwks.json", JSON.stringify({ keys: [attackerJwk] }));
  const x5u = A.route(
    "/attacker/cert.pem",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "application/pem-certificate-chain",
  );
  const s = (claims: Record<string, unknown> | string, opts: Parameters<OidcIssuer["sign"]>[1] = {}) => A.sign(claims, opts);
  const without = (k: keyof typeof good) => Object.fromEntries(Object.entries(good).filter(([key]) => key !== k));
  const ourParts = ourToken.split(".");
  const ourClaims = decode(ourToken).claims;
  return [
    { name: "alg none, empty signature", token: s(good, { alg: "none", key: null }) },
    { name: "alg None, empty signature", token: s(good, { alg: "None", key: null }) },
    { name: "alg nOnE, empty signature", token: s(good, { alg: "nOnE", key: null }) },
    { name: "alg none, no kid", token: s(good, { alg: "none", key: null, kid: null }) },
    { name: "alg none keeping a real RS256 signature", token: `${s(good, { alg: "none", key: null })}${s(good).split(".")[2]}` },
    { name: "HS256 keyed with the RSA public key (SPKI PEM)", token: s(good, { alg: "HS256", key: Buffer.from(rsaPem), kid: A.rsa.kid }) },
    {
      name: "HS256 keyed with the RSA public key (PKCS#1 PEM)",
      token: s(good, { alg: "HS256", key: Buffer.from(rsaPkcs1), kid: A.rsa.kid }),
    },
    {
      name: "HS256 keyed with the RSA public JWK JSON",
      token: s(good, { alg: "HS256", key: JSON.stringify(A.rsa.publicJwk), kid: A.rsa.kid }),
    },
    { name: "HS256 keyed with the EC public key (SPKI PEM)", token: s(good, { alg: "HS256", key: Buffer.from(ecPem), kid: A.ec.kid }) },
    {
      name: "HS512 keyed with the issuer's JWKS text",
      token: s(good, { alg: "HS512", key: JSON.stringify({ keys: [A.rsa.publicJwk, A.ec.publicJwk] }), kid: A.rsa.kid }),
    },
    { name: "ES512 (outside the allow-list) by a key the issuer publishes", token: s(good, { key: es512 }) },
    { name: "RS384 by the RSA key whose JWK says RS256", token: s(good, { alg: "RS384", key: A.rsa.privateKey, kid: A.rsa.kid }) },
    { name: "PS256 by the RSA key whose JWK says RS256", token: s(good, { alg: "PS256", key: A.rsa.privateKey, kid: A.rsa.kid }) },
    { name: "ES384 header over the P-256 key", token: s(good, { alg: "ES384", key: A.ec.privateKey, kid: A.ec.kid }) },
    { name: "unknown crit header", token: s(good, { header: { crit: ["x-unknown"], "x-unknown": true } }) },
    { name: "crit naming b64=false", token: s(good, { header: { crit: ["b64"], b64: false } }) },
    { name: "RS256 signature truncated by one byte", token: s(good, { signature: (x) => x.subarray(0, x.length - 1) }) },
    { name: "RS256 signature truncated to half", token: s(good, { signature: (x) => x.subarray(0, x.length / 2) }) },
    { name: "RS256 signature with a byte appended", token: s(good, { signature: (x) => Buffer.concat([x, Buffer.from([0])]) }) },
    { name: "RS256 signature doubled", token: s(good, { signature: (x) => Buffer.concat([x, x]) }) },
    { name: "RS256 empty signature", token: s(good, { signature: () => Buffer.alloc(0) }) },
    { name: "ES256 signature truncated", token: s(good, { key: A.ec, signature: (x) => x.subarray(0, 63) }) },
    { name: "ES256 signature over-long", token: s(good, { key: A.ec, signature: (x) => Buffer.concat([x, Buffer.from([0])]) }) },
    { name: "ES256 DER-encoded signature", token: s(good, { key: A.ec, signature: (x) => derSignature(x) }) },
    { name: "ES256 r=s=0 (psychic signature)", token: s(good, { key: A.ec, signature: () => Buffer.alloc(64) }) },
    { name: "ES256 r=s=n (curve order)", token: s(good, { key: A.ec, signature: () => Buffer.concat([P256_ORDER, P256_ORDER]) }) },
    {
      name: "signature by another RSA key pair with the right kid",
      token: s(good, { key: attacker.privateKey, alg: "RS256", kid: A.rsa.kid }),
    },
    {
      name: "signature by another EC key pair with the right kid",
      token: s(good, { key: attackerEc.privateKey, alg: "ES256", kid: A.ec.kid }),
    },
    { name: "iss not configured", token: s({ ...good, iss: "https://evil.example" }) },
    { name: "iss with a trailing slash", token: s({ ...good, iss: `${A.url}/` }) },
    { name: "iss in upper case", token: s({ ...good, iss: A.url.toUpperCase() }) },
    { name: "iss with a path", token: s({ ...good, iss: `${A.url}/x` }) },
    { name: "iss as an array", token: s({ ...good, iss: [A.url] }) },
    { name: "iss missing", token: s(without("iss")) },
    { name: "iss of A with a kid only in B's JWKS", token: s(good, { key: B.rsa }) },
    { name: "iss of B with A's key and kid", token: s({ ...good, iss: B.url }) },
    { name: "aud missing", token: s(without("aud")) },
    { name: "aud of another service", token: s({ ...good, aud: "https://other.example" }) },
    { name: "aud as an array without ours", token: s({ ...good, aud: ["https://other.example", "x"] }) },
    { name: "aud = the API base URL", token: s({ ...good, aud: BASE }) },
    { name: "exp in the past beyond the tolerance", token: s({ ...good, iat: t - 3600, exp: t - 120 }) },
    { name: "exp missing", token: s(without("exp")) },
    { name: "exp as a string", token: s({ ...good, exp: String(t + 300) }) },
    { name: "exp as a float string with exponent", token: s({ ...good, exp: "1e20" }) },
    { name: "nbf in the future", token: s({ ...good, nbf: t + 3600 }) },
    { name: "iat in the future", token: s({ ...good, iat: t + 3600, exp: t + 7200 }) },
    { name: "iat missing", token: s(without("iat")) },
    { name: "iat as a string", token: s({ ...good, iat: String(t) }) },
    { name: "sub missing", token: s(without("sub")) },
    { name: "sub empty", token: s({ ...good, sub: "" }) },
    { name: "kid ../../etc/passwd", token: s(good, { kid: "../../etc/passwd" }) },
    { name: "kid ' OR 1=1 --", token: s(good, { kid: "' OR 1=1 --" }) },
    { name: "kid as a number", token: s(good, { header: { kid: 1 } }) },
    {
      name: "embedded jwk header (attacker key)",
      token: s(good, { key: attacker.privateKey, alg: "RS256", kid: "attacker", header: { jwk: attackerJwk } }),
    },
    {
      name: "embedded jwk header with the right kid",
      token: s(good, { key: attacker.privateKey, alg: "RS256", kid: A.rsa.kid, header: { jwk: { ...attackerJwk, kid: A.rsa.kid } } }),
    },
    {
      name: "jku pointing at an attacker JWKS on the issuer host",
      token: s(good, { key: attacker.privateKey, alg: "RS256", kid: "attacker", header: { jku } }),
    },
    {
      name: "x5u pointing at the issuer host",
      token: s(good, { key: attacker.privateKey, alg: "RS256", kid: "attacker", header: { x5u } }),
    },
    { name: "typ at+jwt on an upstream token", token: s(good, { typ: "at+jwt" }) },
    { name: "one of our API tokens sent upstream", token: ourToken, only: "sts" },
    {
      name: "our API token with typ JWT, re-signed with our key",
      token: signJwt({ alg: "ES256", kid: ourKey.kid, typ: "JWT" }, ourClaims as Record<string, unknown>, ourKey.privateKey),
    },
    { name: "our API token's header on A's claims", token: `${ourParts[0]}.${s(good).split(".").slice(1).join(".")}` },
    { name: "payload not JSON", token: s("not json") },
    { name: "payload a JSON array", token: s("[]") },
    { name: "payload a JSON string", token: s(JSON.stringify(JSON.stringify(good))) },
    { name: "header not JSON", token: `${Buffer.from("{alg").toString("base64url")}.${s(good).split(".").slice(1).join(".")}` },
    { name: "two segments", token: s(good).split(".").slice(0, 2).join(".") },
    { name: "four segments", token: `${s(good)}.AAAA` },
    { name: "JWE-shaped (five segments)", token: "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..AAAA.AAAA.AAAA" },
    { name: "garbage", token: "not-a-token" },
    { name: "100 KB token", token: s({ ...good, pad: "x".repeat(100_000) }) },
  ];
}

/** API-token forgeries: each is an administrator token of this server that is wrong in exactly one way. */
function apiForgeries(key: ServerKey, adminSubject: string): Forged[] {
  const t = now();
  const good = { iss: AUTH, aud: BASE, sub: adminSubject, iat: t, exp: t + 3600, jti: "forged" };
  const header = { alg: "ES256", kid: key.kid, typ: "at+jwt" };
  const s = (
    claims: Record<string, unknown> | string,
    h: Record<string, unknown> = {},
    k: Parameters<typeof signJwt>[2] = key.privateKey,
    sig?: (x: Buffer) => Buffer,
  ) => signJwt(Object.fromEntries(Object.entries({ ...header, ...h }).filter(([, v]) => v !== undefined)), claims, k, sig);
  const without = (k: keyof typeof good) => Object.fromEntries(Object.entries(good).filter(([key]) => key !== k));
  const pubPem = key.publicKey.export({ type: "spki", format: "pem" });
  const attackerEc = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const attackerP384 = generateKeyPairSync("ec", { namedCurve: "P-384" });
  const attackerRsa = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const attackerJwk = { ...attackerEc.publicKey.export({ format: "jwk" }), kid: "attacker", alg: "ES256" };
  const jku = A.route("/attacker/api-jwks.json", JSON.stringify({ keys: [attackerJwk] }));
  const x5u = A.route(
    "/attacker/api-cert.pem",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "application/pem-certificate-chain",
  );
  return [
    { name: "alg none, empty signature", token: s(good, { alg: "none" }, null) },
    { name: "alg None, empty signature", token: s(good, { alg: "None" }, null) },
    { name: "alg nOnE, empty signature", token: s(good, { alg: "nOnE" }, null) },
    { name: "HS256 keyed with our public key (SPKI PEM)", token: s(good, { alg: "HS256" }, Buffer.from(pubPem)) },
    { name: "HS256 keyed with our public JWK JSON", token: s(good, { alg: "HS256" }, JSON.stringify(key.publicJwk)) },
    { name: "HS256 keyed with our JWKS text", token: s(good, { alg: "HS256" }, JSON.stringify({ keys: [key.publicJwk] })) },
    { name: "RS256 (outside the allow-list) with our kid", token: s(good, { alg: "RS256" }, attackerRsa.privateKey) },
    { name: "ES384 (outside the allow-list) with our kid", token: s(good, { alg: "ES384" }, attackerP384.privateKey) },
    { name: "ES384 header over our own P-256 key", token: s(good, { alg: "ES384" }) },
    { name: "unknown crit header", token: s(good, { crit: ["x-unknown"], "x-unknown": true }) },
    { name: "signature truncated by one byte", token: s(good, {}, key.privateKey, (x) => x.subarray(0, 63)) },
    { name: "signature truncated to half", token: s(good, {}, key.privateKey, (x) => x.subarray(0, 32)) },
    { name: "signature with a byte appended", token: s(good, {}, key.privateKey, (x) => Buffer.concat([x, Buffer.from([0])])) },
    { name: "signature doubled", token: s(good, {}, key.privateKey, (x) => Buffer.concat([x, x])) },
    { name: "signature empty", token: s(good, {}, key.privateKey, () => Buffer.alloc(0)) },
    { name: "DER-encoded signature", token: s(good, {}, key.privateKey, (x) => derSignature(x)) },
    { name: "ES256 r=s=0 (psychic signature)", token: s(good, {}, key.privateKey, () => Buffer.alloc(64)) },
    { name: "ES256 r=s=n (curve order)", token: s(good, {}, key.privateKey, () => Buffer.concat([P256_ORDER, P256_ORDER])) },
    { name: "signature by another EC key pair with our kid", token: s(good, {}, attackerEc.privateKey) },
    { name: "iss of another issuer", token: s({ ...good, iss: "https://evil.example" }) },
    { name: "iss with a trailing slash", token: s({ ...good, iss: `${AUTH}/` }) },
    { name: "iss in upper case", token: s({ ...good, iss: AUTH.toUpperCase() }) },
    { name: "iss = the API base URL", token: s({ ...good, iss: BASE }) },
    { name: "iss = issuer A", token: s({ ...good, iss: A.url }) },
    { name: "iss missing", token: s(without("iss")) },
    { name: "our iss with a kid only in issuer A's JWKS", token: s(good, { kid: A.ec.kid }, A.ec.privateKey) },
    { name: "aud missing", token: s(without("aud")) },
    { name: "aud of another service", token: s({ ...good, aud: "https://other.example" }) },
    { name: "aud as an array without ours", token: s({ ...good, aud: ["https://other.example", AUTH] }) },
    { name: "aud = the auth URL", token: s({ ...good, aud: AUTH }) },
    { name: "exp in the past beyond the tolerance", token: s({ ...good, iat: t - 7200, exp: t - 120 }) },
    { name: "exp missing", token: s(without("exp")) },
    { name: "exp as a string", token: s({ ...good, exp: String(t + 3600) }) },
    { name: "nbf in the future", token: s({ ...good, nbf: t + 3600 }) },
    { name: "iat in the future", token: s({ ...good, iat: t + 3600, exp: t + 7200 }) },
    { name: "iat missing", token: s(without("iat")) },
    { name: "sub missing", token: s(without("sub")) },
    { name: "sub empty", token: s({ ...good, sub: "" }) },
    { name: "sub as a number", token: s({ ...good, sub: 1 }) },
    { name: "kid ../../etc/passwd", token: s(good, { kid: "../../etc/passwd" }) },
    { name: "kid ' OR 1=1 --", token: s(good, { kid: "' OR 1=1 --" }) },
    { name: "kid missing", token: s(good, { kid: undefined }) },
    { name: "kid empty", token: s(good, { kid: "" }) },
    { name: "embedded jwk header (attacker key)", token: s(good, { kid: "attacker", jwk: attackerJwk }, attackerEc.privateKey) },
    { name: "embedded jwk header with our kid", token: s(good, { jwk: { ...attackerJwk, kid: key.kid } }, attackerEc.privateKey) },
    { name: "jku pointing at the test issuer", token: s(good, { kid: "attacker", jku }, attackerEc.privateKey) },
    { name: "x5u pointing at the test issuer", token: s(good, { kid: "attacker", x5u }, attackerEc.privateKey) },
    { name: "our token with typ JWT", token: s(good, { typ: "JWT" }) },
    { name: "our token with typ missing", token: s(good, { typ: undefined }) },
    { name: "our token with typ id_token+jwt", token: s(good, { typ: "id_token+jwt" }) },
    { name: "refresh-style token (typ rt+jwt)", token: s(good, { typ: "rt+jwt" }) },
    { name: "an upstream ID token of issuer A (valid there)", token: deployerToken(), only: "api" },
    { name: "an upstream ID token of A shaped like ours (iss/aud/typ)", token: A.sign({ ...good }, { key: A.ec, typ: "at+jwt" }) },
    { name: "payload not JSON", token: s("not json") },
    { name: "header not JSON", token: `${Buffer.from("{alg").toString("base64url")}.${s(good).split(".").slice(1).join(".")}` },
    { name: "two segments", token: s(good).split(".").slice(0, 2).join(".") },
    { name: "four segments", token: `${s(good)}.AAAA` },
    { name: "garbage", token: "not-a-token" },
    { name: "100 KB token", token: s({ ...good, pad: "x".repeat(100_000) }) },
  ];
}

/** A raw r||s ECDSA signature as ASN.1 DER (the wrong encoding for JWS). */
function derSignature(raw: Buffer): Buffer {
  const int = (b: Buffer) => {
    let x = b;
    while (x.length > 1 && x[0] === 0 && x[1]! < 0x80) x = x.subarray(1);
    if (x[0]! >= 0x80) x = Buffer.concat([Buffer.from([0]), x]);
    return Buffer.concat([Buffer.from([0x02, x.length]), x]);
  };
  const body = Buffer.concat([int(raw.subarray(0, raw.length / 2)), int(raw.subarray(raw.length / 2))]);
  return Buffer.concat([Buffer.from([0x30, body.length]), body]);
}

/** Tallies what a battery's requests produced. */
class Tally {
  requests = 0;
  accepted: string[] = [];
  serverErrors: string[] = [];
}

/** The STS targets every upstream token is sent to: the exact identity, a pattern identity, and sign-in. */
let stsTargets: { name: string; params: Params }[];

/** Sends token to every STS target by GET and POST; counts tokens issued and 5xx. */
async function sendToSts(token: string, name: string, tally: Tally): Promise<void> {
  for (const target of stsTargets) {
    for (const method of ["GET", "POST"] as const) {
      const res = await exchange(token, target.params, method);
      tally.requests++;
      if (res.status >= 500) tally.serverErrors.push(`${name} → ${target.name} ${method}: ${res.status}`);
      if (res.status === 200 || typeof res.body?.token === "string") tally.accepted.push(`${name} → ${target.name} ${method}`);
      else assertNoToken(res, `${name} → ${target.name} ${method}`);
    }
  }
}

/** Sends token as an API bearer token over REST and (when it is valid metadata) gRPC; each must be UNAUTHENTICATED. */
async function sendToApi(token: string, name: string, tally: Tally, opts: { grpc?: boolean } = {}): Promise<void> {
  const res = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`, undefined, { authorization: `Bearer ${token}` });
  tally.requests++;
  if (res.status >= 500) tally.serverErrors.push(`${name} → REST: ${res.status}`);
  if (res.status < 400) tally.accepted.push(`${name} → REST`);
  else if (res.status === 431)
    return; // Node refuses headers over its limit before the API sees them.
  else assertRestError(res, 401, 16, "UNAUTHENTICATED");
  if (opts.grpc === false || token.length > 7000 || !/^[\x21-\x7e]*$/.test(token)) return;
  tally.requests++;
  try {
    await grpcNoAuth.call("getGroup", { uid: org.uid }, { authorization: `Bearer ${token}` });
    tally.accepted.push(`${name} → gRPC`);
  } catch (err) {
    const e = err as ServiceError;
    if (e.code === 13 || e.code === 2 || e.code === 14) tally.serverErrors.push(`${name} → gRPC: code ${e.code}`);
    assert.equal(e.code, 16, `${name} → gRPC: ${e.message}`);
    const status = grpcStatus(e);
    const infos = status.details.filter((d) => d.$typeName === "google.rpc.ErrorInfo") as unknown as { reason: string }[];
    assert.equal(infos.length, 1);
    assert.equal(infos[0]!.reason, "UNAUTHENTICATED");
  }
}

/**
 * Sends each forged token to every STS target and as an API bearer token (or to the one it is made for, by
 * its `only`); asserts that none issued a token or was accepted, and that none met a 5xx. The tallies.
 */
async function battery(forged: Forged[]): Promise<{ sts: Tally; api: Tally }> {
  const sts = new Tally();
  const api = new Tally();
  for (const f of forged) {
    if (f.only !== "api") await sendToSts(f.token, f.name, sts);
    if (f.only !== "sts") await sendToApi(f.token, f.name, api);
  }
  assert.deepEqual(sts.accepted, [], "no forged token was exchanged");
  assert.deepEqual(sts.serverErrors, []);
  assert.deepEqual(api.accepted, [], "no forged token was accepted as an API token");
  assert.deepEqual(api.serverErrors, []);
  return { sts, api };
}

describe("forged-token battery (RFC 8725)", () => {
  let ourKey: ServerKey;
  before(async () => {
    ourKey = await readServerKey(srv);
    const escaped = A.url.replace(/[.]/g, "\\.");
    // A pattern identity that trusts A's URL in any case and with trailing slashes, so the verifier (not the match) must refuse those.
    const loose = await createIdentity(org.uid, {
      name: "deployer loose",
      claimMatch: { issuerPattern: `(?i)${escaped}/*`, subject: SUBJECT },
    });
    stsTargets = [
      { name: "identity (exact issuer)", params: { aud: BASE, identity: deployer.uid } },
      { name: "identity (issuer pattern)", params: { aud: BASE, identity: loose.uid } },
      { name: "sign-in", params: { aud: BASE } },
    ];
  });

  test("upstream tokens: hand-made forgeries issue no token at /sts/exchange and are 401 / 16 as API tokens", async () => {
    const control = deployerToken();
    for (const target of stsTargets) await exchangeOk(control, target.params);
    const jwksBefore = A.jwksFetches;
    const forged = upstreamForgeries(srv.adminToken, ourKey);
    const { sts, api } = await battery(forged);
    assert.equal(A.fetches("/attacker/jwks.json"), 0, "jku is never fetched");
    assert.equal(A.fetches("/attacker/cert.pem"), 0, "x5u is never fetched");
    assert.equal(B.jwksFetches + B.discoveryFetches, 0, "an untrusted issuer is never contacted");
    // Unknown kids may re-fetch A's JWKS, but the cooldown holds it to one re-fetch.
    assert.ok(A.jwksFetches - jwksBefore <= 1, `JWKS fetches during the battery: ${A.jwksFetches - jwksBefore}`);
    for (const target of stsTargets) await exchangeOk(deployerToken(), target.params);
    report(
      `forged-token battery, upstream → /sts/exchange: ${forged.length} hand-made tokens × ${stsTargets.length} targets × GET/POST = ${sts.requests} exchanges: ` +
        `${sts.accepted.length} tokens issued, ${sts.serverErrors.length} 5xx; same tokens as API bearer (REST+gRPC, ${api.requests} calls): ` +
        `${api.accepted.length} accepted, ${api.serverErrors.length} 5xx; valid control accepted ${stsTargets.length}/${stsTargets.length}; jku/x5u fetched 0 times`,
    );
  });

  test("API tokens: hand-made forgeries are 401 / 16 over REST and gRPC and issue no token at /sts/exchange", async () => {
    const control = signJwt(
      { alg: "ES256", kid: ourKey.kid, typ: "at+jwt" },
      { iss: AUTH, aud: BASE, sub: srv.server.adminSubject, iat: now(), exp: now() + 3600 },
      ourKey.privateKey,
    );
    for (const t of [srv.adminToken, control]) {
      const ok = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`, undefined, { authorization: `Bearer ${t}` });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal((await grpcNoAuth.call("getGroup", { uid: org.uid }, { authorization: `Bearer ${t}` })).uid, org.uid);
    }
    const forged = apiForgeries(ourKey, srv.server.adminSubject);
    const { sts, api } = await battery(forged);
    assert.equal(A.fetches("/attacker/api-jwks.json"), 0, "jku is never fetched");
    assert.equal(A.fetches("/attacker/api-cert.pem"), 0, "x5u is never fetched");

    // Fuzz: mutate header, payload and signature bytes of a valid API token.
    let fuzzed = 0;
    const fuzz = new Tally();
    const mutation = fc.record({
      part: fc.integer({ min: 0, max: 2 }),
      op: fc.constantFrom<Mutation["op"]>(
        "flip",
        "flip",
        "flip",
        "insert",
        "delete",
        "truncate",
        "duplicate",
        "dropSegment",
        "addSegment",
        "swapSegments",
      ),
      pos: fc.nat({ max: 10_000 }),
      byte: fc.integer({ min: 1, max: 255 }),
    });
    await fc.assert(
      fc.asyncProperty(mutation, async (m) => {
        const token = mutate(control, m);
        if (token === control) return true;
        fuzzed++;
        await sendToApi(token, `fuzz ${JSON.stringify(m)}`, fuzz, { grpc: fuzzed % 10 === 0 });
        return true;
      }),
      { numRuns: 2000 },
    );
    assert.deepEqual(fuzz.accepted, []);
    assert.deepEqual(fuzz.serverErrors, []);
    const stillOk = await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`, undefined, { authorization: `Bearer ${control}` });
    assert.equal(stillOk.status, 200);
    report(
      `forged-token battery, API bearer (REST+gRPC): ${forged.length} hand-made + ${fuzzed} fuzzed tokens (${api.requests + fuzz.requests} calls): ` +
        `${api.accepted.length + fuzz.accepted.length} accepted, ${api.serverErrors.length + fuzz.serverErrors.length} 5xx; ` +
        `same hand-made tokens at /sts/exchange (${sts.requests} exchanges): ${sts.accepted.length} tokens issued, ${sts.serverErrors.length} 5xx; valid controls accepted 2/2`,
    );
  });

  test("upstream tokens: fuzzed mutations of a valid ID token issue no token", async () => {
    const control = deployerToken();
    await exchangeOk(control, stsTargets[0]!.params);
    let fuzzed = 0;
    const tally = new Tally();
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          part: fc.integer({ min: 0, max: 2 }),
          op: fc.constantFrom<Mutation["op"]>("flip", "flip", "insert", "delete", "truncate", "duplicate", "dropSegment", "addSegment"),
          pos: fc.nat({ max: 10_000 }),
          byte: fc.integer({ min: 1, max: 255 }),
        }),
        async (m) => {
          const token = mutate(control, m);
          if (token === control) return true;
          fuzzed++;
          const res = await exchange(token, stsTargets[fuzzed % stsTargets.length]!.params, fuzzed % 2 ? "GET" : "POST");
          tally.requests++;
          if (res.status >= 500) tally.serverErrors.push(`${JSON.stringify(m)}: ${res.status}`);
          if (res.status === 200) tally.accepted.push(JSON.stringify(m));
          return true;
        },
      ),
      { numRuns: 500 },
    );
    assert.deepEqual(tally.accepted, []);
    assert.deepEqual(tally.serverErrors, []);
    await exchangeOk(control, stsTargets[0]!.params);
    report(
      `forged-token battery, upstream fuzz → /sts/exchange: ${fuzzed} fuzzed ID tokens: ${tally.accepted.length} tokens issued, ${tally.serverErrors.length} 5xx; valid control accepted`,
    );
  });
});

// ---------------------------------------------------------------------------
// JWKS rotation: a key an upstream issuer publishes later is accepted after one re-fetch of its JWKS, and a flood
// of unknown key ids is not a flood of fetches
// ---------------------------------------------------------------------------

describe("JWKS rotation", () => {
  /** jose's re-fetch cooldown as the verifier configures it (src/auth/upstream.ts). */
  const COOLDOWN_MS = 30_000;

  test("publish {k1}: t1 accepted; publish {k1,k2}: t2 accepted after one re-fetch, t1 still; a kid flood costs ≤ 2 fetches", async () => {
    const rotator = await createIdentity(org.uid, { name: "rotator", claimMatch: { issuer: R.url, subject: "rot" } });
    const params = { aud: BASE, identity: rotator.uid };
    const k1 = R.rsa;
    const k2 = await generateIssuerKey("ES256", "r-k2");
    R.publish([k1]);
    const token = (key: IssuerKey, kid = key.kid) => R.idToken({ sub: "rot", aud: AUTH }, { key, kid });

    await exchangeOk(token(k1), params);
    assert.equal(R.discoveryFetches, 1);
    assert.equal(R.jwksFetches, 1);
    const firstFetch = Date.now();

    R.publish([k1, k2]);
    // jose refuses to re-fetch within its cooldown of the last fetch; wait it out, as an IdP's
    // newly published key is seen once the cooldown has passed.
    await new Promise((r) => setTimeout(r, Math.max(0, firstFetch + COOLDOWN_MS + 500 - Date.now())));
    await exchangeOk(token(k2), params);
    assert.equal(R.jwksFetches, 2, "t2 is accepted after exactly one JWKS re-fetch");
    await exchangeOk(token(k1), params);
    await exchangeOk(token(k2), params);
    assert.equal(R.jwksFetches, 2, "known kids are served from the cache");

    const before = R.jwksFetches;
    const flood = new Tally();
    await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        const res = await exchange(token(k2, `unknown-${randomBytes(6).toString("hex")}`), params);
        flood.requests++;
        if (res.status >= 500) flood.serverErrors.push(String(res.status));
        if (res.status === 200) flood.accepted.push(String(i));
      }),
    );
    const floodFetches = R.jwksFetches - before;
    assert.deepEqual(flood.accepted, []);
    assert.deepEqual(flood.serverErrors, []);
    assert.ok(floodFetches <= 2, `JWKS fetches under a flood of 200 unknown kids: ${floodFetches}`);
    await exchangeOk(token(k2), params);
    assert.equal(R.discoveryFetches, 1, "discovery is cached");
    report(
      `JWKS rotation: t1 (k1) accepted; t2 (k2, published later) accepted after 1 re-fetch; t1 still accepted; ` +
        `200 unknown-kid tokens: 0 accepted, 0 5xx, ${floodFetches} JWKS fetches (≤ 2); discovery fetched ${R.discoveryFetches} time`,
    );
  });
});
