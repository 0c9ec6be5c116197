/**
 * Issue 32, item 3: refresh tokens. A person's sign-in issues one; the contract's ExchangeRefreshToken
 * (`POST /sts/exchange_refresh_token`, bearer = the refresh token → TokenPair) rotates it on every use, over every
 * protocol; a used token presented again revokes its whole family; idle and absolute lifetimes end it (the
 * server's clock is injected: no waiting); deleting the person and retiring the signing key (the real
 * `retire-key` / `rotate-key --retire`) revoke it. A workload assuming an identity gets none. A bad refresh token
 * is UNAUTHENTICATED with one ErrorInfo, never echoed in an answer or a log line.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { after, afterEach, before, describe, test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import type { ServiceError } from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { SecurityTokenService } from "../../gen/platformapi/oidc/v1/sts_pb.js";
import { MAX_FAMILIES_PER_IDENTITY } from "../../src/auth/refresh-tokens.js";
import { startSignInSweep } from "../../src/auth/sign-in-sweep.js";
import { userIdentityUid } from "../../src/domain/user-identity.js";
import { assertRestError } from "../support/assertions.js";
import { testTransport, type TransportKind } from "../support/connect.js";
import { decode } from "../support/forge.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { platformCli } from "../support/platform-cli.js";
import {
  createGroup,
  mintAdminToken,
  rest,
  setDefaultToken,
  startTestServer,
  type RestResult,
  type TestServer,
} from "../support/server.js";

/** Identifiers only: requests go to srv.url; these are the iss/aud values in tokens. */
const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const DAY = 86_400_000;
const REFRESH_SHAPE = /^prt_[A-Za-z0-9_-]{43}$/;

let A: OidcIssuer;
let srv: TestServer;
/** How far the server's clock is ahead of the real one (ms); tests that move it put it back. */
let offset = 0;
const logs: string[] = [];
/** Every refresh token the server answered with: none may ever appear in a log line. */
const issued = new Set<string>();

before(async () => {
  A = await OidcIssuer.start("a");
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => logs.push(chunk.toString("utf8")));
  srv = await startTestServer({
    env: { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PLATFORM_USER_ISSUERS: A.url, LOG_LEVEL: "debug" },
    now: () => Date.now() + offset,
    logStream,
  });
});

after(async () => {
  await srv.close();
  await A.close();
});

afterEach(() => {
  offset = 0;
});

/** POST /sts/exchange with a form body, as the SDK's HTTP fallback sends it. */
function exchange(idToken: string, params: Record<string, string>): Promise<RestResult> {
  return rest(srv.url, "POST", "/sts/exchange", new URLSearchParams({ aud: BASE, ...params }).toString(), {
    authorization: `Bearer ${idToken}`,
    "content-type": "application/x-www-form-urlencoded",
  });
}

/** A person (subject sub of the trusted issuer A) signs in: their API token and first refresh token. */
async function signIn(sub: string): Promise<{ uid: string; token: string; refreshToken: string }> {
  const res = await exchange(A.idToken({ sub, aud: AUTH, email: `${sub}@example.com`, email_verified: true }), {});
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.match(res.body.refreshToken, REFRESH_SHAPE);
  issued.add(res.body.refreshToken);
  return { uid: userIdentityUid(A.url, sub), token: res.body.token, refreshToken: res.body.refreshToken };
}

/** POST /sts/exchange_refresh_token with the refresh token as bearer and no body, as the SDK sends it. */
function refreshRest(refreshToken: string, body?: string): Promise<RestResult> {
  const headers: Record<string, string> = { authorization: `Bearer ${refreshToken}` };
  if (body !== undefined) headers["content-type"] = "application/x-www-form-urlencoded";
  return rest(srv.url, "POST", "/sts/exchange_refresh_token", body, headers);
}

/** A refresh that must succeed over REST: the contract's TokenPair; returns the new refresh token. */
async function refreshOk(refreshToken: string, subject: string): Promise<string> {
  const res = await refreshRest(refreshToken);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  // The contract's shape, {"token":{"token":…},"refreshToken":{"token":…}}; proto3 JSON adds the empty defaults.
  assert.deepEqual(Object.keys(res.body).sort(), ["refreshToken", "token"]);
  assert.equal(res.body.token.refreshToken, "", "the API token's RawToken carries no second copy");
  assert.equal(res.body.refreshToken.refreshToken, "");
  await assertApiToken(res.body.token.token, subject);
  assert.equal(Date.parse(res.body.token.expiry), decode(res.body.token.token).claims.exp! * 1000);
  const next = res.body.refreshToken.token as string;
  assert.match(next, REFRESH_SHAPE);
  assert.notEqual(next, refreshToken);
  issued.add(next);
  return next;
}

/** The API token works and is subject's. */
async function assertApiToken(token: string, subject: string): Promise<void> {
  const whoami = await rest(srv.url, "GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${token}` });
  assert.equal(whoami.status, 200, JSON.stringify(whoami.body));
  assert.equal(whoami.body.subject, subject);
  const { claims } = decode(token);
  assert.equal(claims.aud, BASE);
  assert.equal(claims.iss, AUTH);
}

/** Refused over REST: 401 UNAUTHENTICATED with one ErrorInfo, and the token nowhere in the answer. */
function assertRefusedRest(res: RestResult, token: string): void {
  assertRestError(res, 401, 16, "UNAUTHENTICATED");
  if (token.length >= 8) assert.ok(!JSON.stringify(res.body).includes(token), "the token is not echoed");
}

describe("issued at a person's sign-in, not to a workload", () => {
  test("a person's /sts/exchange answers a refresh token; exchanging an assumed identity answers none", async () => {
    const person = await signIn("issued-person");
    await assertApiToken(person.token, person.uid);

    const org = await createGroup(srv.url, null, "workload org");
    const created = await rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
      name: "deployer",
      claimMatch: { issuer: A.url, subject: "repo:org/app" },
    });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const res = await exchange(A.idToken({ sub: "repo:org/app", aud: AUTH }), { identity: created.body.uid });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.refreshToken, "", "no refresh token");
    await assertApiToken(res.body.token, created.body.uid);
  });

  test("a person signing in through an organization's identity provider gets one", async () => {
    const org = await createGroup(srv.url, null, "idp org");
    const roles = await rest(srv.url, "GET", "/iam/v2beta1/roles?name=viewer");
    const viewer = roles.body.roles.find((r: { name: string }) => r.name === "viewer").uid;
    const idp = await rest(srv.url, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
      name: "acme sso",
      defaultRole: viewer,
      oidc: { issuer: A.url, clientId: "org-client", pkceEnabled: true },
    });
    assert.equal(idp.status, 200, JSON.stringify(idp.body));
    const res = await exchange(A.idToken({ sub: "through-idp", aud: "org-client" }), { identity_provider: idp.body.uid });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.match(res.body.refreshToken, REFRESH_SHAPE);
    issued.add(res.body.refreshToken);
    const subject = decode(res.body.token).claims.sub!;
    assert.ok(subject.startsWith(`${org.uid}/`), "registered in the provider's organization");
    await refreshOk(res.body.refreshToken, subject);
  });
});

describe("ExchangeRefreshToken rotates on every protocol", () => {
  test("REST, gRPC, Connect and gRPC-Web each answer a TokenPair; each token works once", async () => {
    const person = await signIn("every-protocol");
    const rotated = await refreshOk(person.refreshToken, person.uid);
    assertRefusedRest(await refreshRest(person.refreshToken), person.refreshToken);
    // The reuse above revoked the family: start again.
    assertRefusedRest(await refreshRest(rotated), rotated);
    let current = (await signIn("every-protocol")).refreshToken;

    const grpc = grpcClient(SecurityTokenService, srv.port, { token: current });
    try {
      const pair = await grpc.call("exchangeRefreshToken", { aud: [BASE] });
      await assertApiToken(pair.token.token, person.uid);
      assert.match(pair.refreshToken.token, REFRESH_SHAPE);
      issued.add(pair.refreshToken.token);
      current = pair.refreshToken.token;
    } finally {
      grpc.close();
    }

    for (const kind of ["connect-h1", "grpc-web-h1", "connect-h2c", "grpc-web-h2c"] satisfies TransportKind[]) {
      const t = testTransport(kind, srv.url, current);
      try {
        const pair = await createClient(SecurityTokenService, t.transport).exchangeRefreshToken({});
        await assertApiToken(pair.token!.token, person.uid);
        assert.match(pair.refreshToken!.token, REFRESH_SHAPE, kind);
        issued.add(pair.refreshToken!.token);
        current = pair.refreshToken!.token;
      } finally {
        t.close();
      }
    }
    // The last token of the chain still works, over REST with a form body naming the audience.
    const res = await refreshRest(current, new URLSearchParams({ aud: BASE }).toString());
    assert.equal(res.status, 200, JSON.stringify(res.body));
    issued.add(res.body.refreshToken.token);
  });

  test("another audience is INVALID_ARGUMENT and leaves the token usable", async () => {
    const person = await signIn("audience");
    const res = await refreshRest(person.refreshToken, new URLSearchParams({ aud: "https://elsewhere.example" }).toString());
    assertRestError(res, 400, 3, "INVALID_ARGUMENT");
    await refreshOk(person.refreshToken, person.uid);
  });
});

describe("reuse revokes the family", () => {
  test("a used token presented again is refused, and so is every token of its family, the newest included", async () => {
    const person = await signIn("reuse");
    const other = await signIn("reuse");
    const second = await refreshOk(person.refreshToken, person.uid);
    const third = await refreshOk(second, person.uid);
    assertRefusedRest(await refreshRest(person.refreshToken), person.refreshToken);
    assertRefusedRest(await refreshRest(third), third);
    assertRefusedRest(await refreshRest(second), second);
    // The same person's other sign-in is another family: untouched.
    await refreshOk(other.refreshToken, person.uid);
  });

  test(`a person keeps at most ${MAX_FAMILIES_PER_IDENTITY} sign-ins: the next ends the one unused longest`, async () => {
    // A second between sign-ins on the server's clock, so each is told apart by when it was last used.
    const first = await signIn("many-sign-ins");
    offset += 1000;
    const second = await signIn("many-sign-ins");
    for (let i = 2; i < MAX_FAMILIES_PER_IDENTITY; i++) {
      offset += 1000;
      await signIn("many-sign-ins");
    }
    offset += 1000;
    const kept = await refreshOk(first.refreshToken, first.uid);
    offset += 1000;
    await signIn("many-sign-ins");
    assertRefusedRest(await refreshRest(second.refreshToken), second.refreshToken);
    await refreshOk(kept, first.uid);
  });
});

describe("lifetimes (the server's clock moved, no waiting)", () => {
  test("a token idle for PLATFORM_REFRESH_TOKEN_IDLE (7 days) stops working; used a second before, it works", async () => {
    const person = await signIn("idle");
    offset = 7 * DAY - 1000;
    const next = await refreshOk(person.refreshToken, person.uid);
    offset += 7 * DAY;
    assertRefusedRest(await refreshRest(next), next);
  });

  test("no token of a sign-in works PLATFORM_REFRESH_TOKEN_LIFETIME (30 days) after it, however recently rotated", async () => {
    const person = await signIn("absolute");
    let current = person.refreshToken;
    for (const day of [6, 12, 18, 24]) {
      offset = day * DAY;
      current = await refreshOk(current, person.uid);
    }
    offset = 30 * DAY - 1000;
    current = await refreshOk(current, person.uid);
    offset = 30 * DAY;
    assertRefusedRest(await refreshRest(current), current);
  });

  test("the sweep deletes tokens past their lifetimes and expired sign-in flows", async () => {
    const person = await signIn("swept");
    const store = await srv.openStore();
    try {
      const sweep = startSignInSweep(store, {
        refresh: { idleMs: 7 * DAY, maxAgeMs: 30 * DAY },
        now: () => Date.now() + 8 * DAY,
        onError: () => {},
      });
      sweep.stop();
      assert.ok((await sweep.sweepNow()) >= 1);
      assertRefusedRest(await refreshRest(person.refreshToken), person.refreshToken);
    } finally {
      await store.close();
    }
  });
});

describe("bad refresh tokens", () => {
  const apiToken = () => srv.adminToken;
  const bad: [string, () => string | undefined][] = [
    ["no Authorization header", () => undefined],
    ["an unknown token of the right shape", () => `prt_${"A".repeat(43)}`],
    ["a malformed one", () => "prt_not-a-token"],
    ["an API token", apiToken],
    ["an upstream ID token", () => A.idToken({ sub: "someone", aud: AUTH })],
    ["8 KiB of text", () => "x".repeat(8192)],
  ];

  for (const [what, token] of bad) {
    test(`${what}: UNAUTHENTICATED with one ErrorInfo over REST, gRPC and Connect, never echoed`, async () => {
      const t = token();
      const res = await rest(srv.url, "POST", "/sts/exchange_refresh_token", undefined, {
        authorization: t === undefined ? "" : `Bearer ${t}`,
      });
      assertRefusedRest(res, t ?? "");

      const grpc = grpcClient(SecurityTokenService, srv.port, { token: t ?? "" });
      try {
        await assert.rejects(grpc.call("exchangeRefreshToken", {}), (err: ServiceError) => {
          assert.equal(err.code, 16);
          const status = grpcStatus(err);
          assert.equal(status.details.filter((d) => d.$typeName === "google.rpc.ErrorInfo").length, 1);
          if (t) assert.ok(!status.message.includes(t));
          return true;
        });
      } finally {
        grpc.close();
      }

      const c = testTransport("connect-h1", srv.url, t ?? "");
      try {
        await assert.rejects(createClient(SecurityTokenService, c.transport).exchangeRefreshToken({}), (err: unknown) => {
          assert.ok(err instanceof ConnectError);
          assert.equal(err.code, Code.Unauthenticated);
          assert.equal(err.findDetails(ErrorInfoSchema).length, 1);
          if (t) assert.ok(!err.rawMessage.includes(t));
          return true;
        });
      } finally {
        c.close();
      }
    });
  }
});

describe("revocation", () => {
  test("deleting the person revokes their refresh tokens, and signing in again does not bring them back", async () => {
    const person = await signIn("deleted-person");
    const next = await refreshOk(person.refreshToken, person.uid);
    const del = await rest(srv.url, "DELETE", `/iam/v2beta1/identities/${person.uid}`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    assertRefusedRest(await refreshRest(next), next);
    const again = await signIn("deleted-person");
    assert.equal(again.uid, person.uid, "the same predicted uid");
    assertRefusedRest(await refreshRest(next), next);
    await refreshOk(again.refreshToken, person.uid);
  });

  // Last: it retires the key the default administrator token is signed with.
  test("retire-key and rotate-key --retire revoke the sign-ins begun under the key, and only those", async () => {
    const underFirst = await signIn("key-retired");
    const firstKid = decode(underFirst.token).header.kid!;
    const rotated = await platformCli(srv, ["rotate-key"]);
    assert.equal(rotated.code, 0, rotated.stderr);
    const secondKid = /^added signing key (\S+)\n$/.exec(rotated.stdout)![1]!;
    const underSecond = await signIn("key-retired");
    assert.equal(decode(underSecond.token).header.kid, secondKid);

    const retired = await platformCli(srv, ["retire-key", firstKid]);
    assert.equal(retired.code, 0, retired.stderr);
    setDefaultToken(srv.port, await mintAdminToken(srv.server));
    assertRefusedRest(await refreshRest(underFirst.refreshToken), underFirst.refreshToken);
    const kept = await refreshOk(underSecond.refreshToken, underSecond.uid);

    const replaced = await platformCli(srv, ["rotate-key", "--retire", secondKid]);
    assert.equal(replaced.code, 0, replaced.stderr);
    setDefaultToken(srv.port, await mintAdminToken(srv.server));
    assertRefusedRest(await refreshRest(kept), kept);
    const underThird = await signIn("key-retired");
    await refreshOk(underThird.refreshToken, underThird.uid);
  });
});

test("no refresh token ever appears in a log line", () => {
  assert.ok(logs.length > 0, "the server logged (LOG_LEVEL=debug)");
  assert.ok(issued.size > 10);
  const text = logs.join("");
  for (const token of issued) assert.ok(!text.includes(token), "a refresh token was logged");
  assert.ok(!text.includes(`prt_${"A".repeat(43)}`), "a presented refresh token was logged");
  assert.ok(!/"authorization":/i.test(text), "no Authorization header is logged");
});
