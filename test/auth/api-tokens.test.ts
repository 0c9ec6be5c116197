import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { ServiceError } from "@grpc/grpc-js";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { assertRestError } from "../support/assertions.js";
import { runChild } from "../support/child-process.js";
import { decode } from "../support/forge.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { platformCli } from "../support/platform-cli.js";
import { freePort } from "../support/serve-process.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const BUF = fileURLToPath(new URL("../../node_modules/.bin/buf", import.meta.url));
const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

let srv: TestServer;
let idp: OidcIssuer;
/** The server's configured URLs: here the real loopback address, so its jwks_uri can be fetched. */
let BASE: string;
let AUTH: string;

before(async () => {
  idp = await OidcIssuer.start("people");
  const port = await freePort();
  BASE = AUTH = `http://127.0.0.1:${port}`;
  srv = await startTestServer({
    env: { PORT: String(port), PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PLATFORM_USER_ISSUERS: idp.url },
  });
  assert.equal(srv.url, BASE);
});

after(async () => {
  await srv.close();
  await idp.close();
});

/** Runs `platform-api <args>` with the server's storage and environment. */
const cli = (...args: string[]) => platformCli(srv, args, { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PORT: String(srv.port) });

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** GET /iam/v2beta1/groups with token: the status a user sees. */
async function listGroupsStatus(token: string): Promise<number> {
  return (await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, bearer(token))).status;
}

describe("our tokens can be verified by another service", () => {
  test("discovery names issuer = auth URL and a jwks_uri whose keys verify an administrator token with jose", async () => {
    const res = await rest(srv.url, "GET", "/.well-known/openid-configuration", undefined, { authorization: "" });
    assert.equal(res.status, 200);
    assert.equal(res.body.issuer, AUTH);
    assert.equal(res.body.jwks_uri, `${AUTH}/.well-known/jwks.json`);
    assert.equal(res.body.token_endpoint, `${AUTH}/sts/exchange`);

    const jwks = await rest(srv.url, "GET", "/.well-known/jwks.json", undefined, { authorization: "" });
    assert.equal(jwks.status, 200);
    assert.ok(jwks.body.keys.length >= 1);
    for (const key of jwks.body.keys) {
      assert.deepEqual({ kty: key.kty, crv: key.crv, alg: key.alg, use: key.use }, { kty: "EC", crv: "P-256", alg: "ES256", use: "sig" });
      assert.equal(typeof key.kid, "string");
      for (const secret of ["d", "p", "q", "dp", "dq", "qi", "k"]) assert.equal(key[secret], undefined, `public keys only (${secret})`);
    }

    const { payload, protectedHeader } = await jwtVerify(srv.adminToken, createRemoteJWKSet(new URL(res.body.jwks_uri)), {
      issuer: res.body.issuer,
      audience: BASE,
      algorithms: res.body.id_token_signing_alg_values_supported,
      typ: "at+jwt",
      requiredClaims: ["exp", "iat", "sub"],
    });
    assert.equal(payload.sub, srv.server.adminSubject);
    assert.ok(jwks.body.keys.some((k: { kid: string }) => k.kid === protectedHeader.kid));
  });

  test("claims: iss = auth URL, aud = base URL, sub = identity uid, exp = iat + 3600; header typ at+jwt, alg ES256", async () => {
    const { header, claims } = decode(srv.adminToken);
    assert.equal(header.typ, "at+jwt");
    assert.equal(header.alg, "ES256");
    assert.equal(typeof header.kid, "string");
    assert.equal(claims.iss, AUTH);
    assert.equal(claims.aud, BASE);
    assert.equal(claims.sub, srv.server.adminSubject);
    assert.match(claims.sub!, /^[0-9a-f]{40}$/);
    assert.equal(typeof claims.iat, "number");
    assert.equal(claims.exp, claims.iat! + 3600);
    assert.ok(Math.abs(claims.iat! - Date.now() / 1000) < 300, "iat is about now");
    assert.equal(typeof claims.jti, "string");
  });

  test("a token from /sts/exchange has the same shape and verifies against the same JWKS", async () => {
    const sub = "person-1";
    const res = await rest(
      srv.url,
      "GET",
      `/sts/exchange?aud=${encodeURIComponent(BASE)}`,
      undefined,
      bearer(idp.idToken({ sub, aud: AUTH })),
    );
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const { payload, protectedHeader } = await jwtVerify(res.body.token, createRemoteJWKSet(new URL(`${AUTH}/.well-known/jwks.json`)), {
      issuer: AUTH,
      audience: BASE,
      algorithms: ["ES256"],
      typ: "at+jwt",
    });
    assert.equal(protectedHeader.typ, "at+jwt");
    assert.equal(payload.exp, payload.iat! + 3600);
    const lookup = await rest(
      srv.url,
      "GET",
      `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(idp.url)}&subject=${sub}`,
    );
    assert.equal(payload.sub, lookup.body.uid);
  });
});

describe("the command line", () => {
  test("`platform-api admin-token` prints exactly one line: a token the running server accepts", async () => {
    const res = await cli("admin-token");
    assert.equal(res.code, 0, res.stderr);
    const lines = res.stdout.split("\n");
    assert.equal(lines.length, 2, `one line: ${JSON.stringify(res.stdout)}`);
    assert.equal(lines[1], "");
    const token = lines[0]!;
    assert.match(token, JWT);
    const { header, claims } = decode(token);
    assert.equal(header.typ, "at+jwt");
    assert.equal(claims.sub, srv.server.adminSubject);
    assert.equal(claims.iss, AUTH);
    assert.equal(claims.aud, BASE);

    assert.equal(await listGroupsStatus(token), 200);
    const client = grpcClient(GroupsService, srv.port, { token });
    try {
      const listed = await client.call("listGroups", {});
      assert.ok(Array.isArray(listed.groups));
    } finally {
      client.close();
    }
  });

  test("`platform-api rotate-key` adds a key: earlier tokens keep working, a later admin-token is signed with the new kid and accepted", async () => {
    const oldKid = decode(srv.adminToken).header.kid;
    const rotated = await cli("rotate-key");
    assert.equal(rotated.code, 0, rotated.stderr);
    const m = /^added signing key (\S+)\n$/.exec(rotated.stdout);
    assert.ok(m, rotated.stdout);
    const newKid = m[1]!;
    assert.notEqual(newKid, oldKid);

    const jwks = await rest(srv.url, "GET", "/.well-known/jwks.json", undefined, { authorization: "" });
    const kids = jwks.body.keys.map((k: { kid: string }) => k.kid);
    assert.ok(kids.includes(oldKid) && kids.includes(newKid), JSON.stringify(kids));

    assert.equal(await listGroupsStatus(srv.adminToken), 200, "a token signed before the rotation keeps working");

    const minted = await cli("admin-token");
    assert.equal(minted.code, 0, minted.stderr);
    const token = minted.stdout.trim();
    assert.equal(decode(token).header.kid, newKid, "signed with the new key");
    // The server re-reads its key table at most every 5 s when it meets an unknown kid;
    // until then the new token is refused (401, never 5xx). Liveness bound: 15 s.
    const deadline = Date.now() + 15_000;
    let status = await listGroupsStatus(token);
    while (status === 401 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      status = await listGroupsStatus(token);
    }
    assert.equal(status, 200, "the running server accepts a token signed with the new key");
    const client = grpcClient(GroupsService, srv.port, { token });
    try {
      assert.ok(Array.isArray((await client.call("listGroups", {})).groups));
    } finally {
      client.close();
    }
    // Another service verifying through the JWKS accepts it too.
    const { payload } = await jwtVerify(token, createRemoteJWKSet(new URL(`${AUTH}/.well-known/jwks.json`)), {
      issuer: AUTH,
      audience: BASE,
      typ: "at+jwt",
    });
    assert.equal(payload.sub, srv.server.adminSubject);
    assert.equal(await listGroupsStatus(srv.adminToken), 200, "the old key still verifies");
  });
});

describe("requests without a token", () => {
  test("an API call with no token → 401, code 16, one ErrorInfo UNAUTHENTICATED (REST), and nothing happens", async () => {
    for (const [method, path, body] of [
      ["GET", "/iam/v2beta1/groups", undefined],
      ["POST", "/iam/v2beta1/groups", { name: "sneaky" }],
      ["GET", "/iam/v2beta1/roles", undefined],
      ["GET", "/iam/v2beta1/identities:lookupIdentity?issuer=https%3A%2F%2Fx&subject=y", undefined],
      ["GET", "/iam/v1/groups", undefined],
    ] as const) {
      const res = await rest(srv.url, method, path, body, { authorization: "" });
      assertRestError(res, 401, 16, "UNAUTHENTICATED");
    }
    const listed = await rest(srv.url, "GET", "/iam/v2beta1/groups?pageSize=1000");
    assert.ok(!listed.body.groups.some((g: { name: string }) => g.name === "sneaky"), "the unauthenticated create made nothing");
    // A bad token is answered the same way.
    assertRestError(await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, bearer("not-a-token")), 401, 16, "UNAUTHENTICATED");
  });

  test("a gRPC call with no token → code 16 with one ErrorInfo UNAUTHENTICATED", async () => {
    const client = grpcClient(GroupsService, srv.port, { token: "" });
    try {
      for (const [method, request] of [
        ["listGroups", {}],
        ["createGroup", { parent: "", group: { name: "sneaky grpc" } }],
      ] as const) {
        const err = (await client.call(method, request).then(
          () => assert.fail(`${method} succeeded without a token`),
          (e: unknown) => e,
        )) as ServiceError;
        assert.equal(err.code, 16, err.message);
        const status = grpcStatus(err);
        assert.equal(status.code, 16);
        const infos = status.details.filter((d) => d.$typeName === "google.rpc.ErrorInfo") as unknown as {
          reason: string;
          domain: string;
        }[];
        assert.equal(infos.length, 1);
        assert.equal(infos[0]!.reason, "UNAUTHENTICATED");
      }
    } finally {
      client.close();
    }
  });

  test("health, /healthz, /readyz, reflection, discovery, JWKS and /sts/exchange need no API token", async () => {
    const none = { authorization: "" };
    assert.deepEqual((await rest(srv.url, "GET", "/healthz", undefined, none)).body, { status: "ok" });
    const ready = await rest(srv.url, "GET", "/readyz", undefined, none);
    assert.equal(ready.status, 200);
    assert.equal(ready.body.status, "ready");
    assert.equal((await rest(srv.url, "GET", "/.well-known/openid-configuration", undefined, none)).status, 200);
    assert.equal((await rest(srv.url, "GET", "/.well-known/jwks.json", undefined, none)).status, 200);

    const health = grpcClient(Health, srv.port, { token: "" });
    try {
      assert.equal((await health.call("check", { service: "" })).status, 1, "SERVING");
      assert.equal((await health.call("check", { service: "platformapi.iam.v2beta1.GroupsService" })).status, 1);
    } finally {
      health.close();
    }

    const reflected = await runChild([BUF, "curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-services", srv.url], {
      env: process.env,
      timeoutMs: 60_000,
    });
    assert.equal(reflected.code, 0, reflected.stderr);
    const services = reflected.stdout.split("\n");
    for (const name of ["platformapi.iam.v2beta1.GroupsService", "platformapi.oidc.v1.SecurityTokenService", "grpc.health.v1.Health"]) {
      assert.ok(services.includes(name), `${name} in ${reflected.stdout}`);
    }

    // The exchange authenticates the upstream token itself: no API token is involved.
    const signIn = await rest(srv.url, "POST", "/sts/exchange", new URLSearchParams({ aud: BASE }).toString(), {
      authorization: `Bearer ${idp.idToken({ sub: "person-2", aud: AUTH })}`,
      "content-type": "application/x-www-form-urlencoded",
    });
    assert.equal(signIn.status, 200, JSON.stringify(signIn.body));
    assert.match(signIn.body.token, JWT);
    // Without any bearer the exchange asks for the upstream token, not for an API token.
    const bare = await rest(srv.url, "GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}`, undefined, none);
    const err = assertRestError(bare, 401, 16, "UNAUTHENTICATED");
    assert.match(err.message, /upstream OIDC token/);
  });
});
