import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { decodeJwt, decodeProtectedHeader, jwtVerify } from "jose";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { platformCli } from "../support/platform-cli.js";
import { builtinRole, createCaller, customRole, ok, type Caller } from "../support/principals.js";
import {
  deleteImage,
  manifestDigest,
  pullImage,
  pushImage,
  REGISTRY_ISSUER,
  REGISTRY_SERVER_ENV,
  REGISTRY_SERVICE,
  startRegistryWorld,
  type Credentials,
  type RegistryWorld,
} from "../support/registry.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const AUTH = "http://auth.test";
const WORKLOAD_SUBJECT = "repo:acme/app:ref:refs/heads/main";

let world: RegistryWorld;
let srv: TestServer;
let issuer: OidcIssuer;
let org: string;
let other: string;
let pusher: Caller;
let viewer: Caller;
let viewerBinding: string;
let owner: Caller;
let outsider: Caller;
let workload: string;

const basic = (c: Credentials) => `Basic ${Buffer.from(`${c.user}:${c.password}`).toString("base64")}`;
const apiCreds = (caller: Caller): Credentials => ({ user: "_token", password: caller.token });
/** The PEM certificates of a bundle. */
const certificates = (bundle: string) => bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n/g) ?? [];

/** GET /registry/token with these scopes, as a client sends it. */
function tokenRequest(scopes: string[], authorization: string | undefined, service = REGISTRY_SERVICE) {
  const query = new URLSearchParams({ service });
  for (const s of scopes) query.append("scope", s);
  return rest(srv.url, "GET", `/registry/token?${query}`, undefined, { authorization: authorization ?? "" });
}

/** POST /registry/token: Distribution's OAuth2 form (grant_type password, this service, unless fields say otherwise). */
function oauthRequest(fields: Record<string, string>) {
  const form = new URLSearchParams({ grant_type: "password", service: REGISTRY_SERVICE, ...fields });
  return rest(srv.url, "POST", "/registry/token", form.toString(), {
    authorization: "",
    "content-type": "application/x-www-form-urlencoded",
  });
}

/** The access claim of the token the endpoint gives caller for scopes. */
async function accessOf(c: Credentials, scopes: string[]): Promise<{ type: string; name: string; actions: string[] }[]> {
  const body = await ok(tokenRequest(scopes, basic(c)));
  return decodeJwt(body.token).access as { type: string; name: string; actions: string[] }[];
}

before(async () => {
  issuer = await OidcIssuer.start("wl");
  world = await startRegistryWorld({ PLATFORM_AUTH_URL: AUTH });
  srv = world.srv;
  org = (await createGroup(srv.url, null, "registry org")).uid;
  other = (await createGroup(srv.url, null, "other org")).uid;
  pusher = await createCaller(srv, org, "pusher", await builtinRole(srv, "registry.push"));
  viewer = await createCaller(srv, org, "viewer", null);
  viewerBinding = (
    await ok(
      rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${org}`, { identityUid: viewer.uid, roleUid: await builtinRole(srv, "viewer") }),
    )
  ).uid;
  owner = await createCaller(srv, org, "owner", await builtinRole(srv, "owner"));
  outsider = await createCaller(srv, other, "outsider", await builtinRole(srv, "owner"));
  const identity = await ok(
    rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, {
      name: "ci workload",
      claimMatch: { issuer: issuer.url, subject: WORKLOAD_SUBJECT },
    }),
  );
  workload = identity.uid;
  await ok(
    rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${org}`, { identityUid: workload, roleUid: await builtinRole(srv, "registry.push") }),
  );
});

after(async () => {
  await world?.close();
  await issuer?.close();
});

describe("registry token endpoint", () => {
  test("answers a token Distribution verifies: ES256, kid of a bundle key, iss, aud, five minutes, access", async () => {
    const body = await ok(tokenRequest([`repository:${org}/app:pull,push`], basic(apiCreds(pusher))));
    assert.equal(body.access_token, body.token);
    assert.equal(body.expires_in, 300);
    assert.match(body.issued_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
    const header = decodeProtectedHeader(body.token);
    assert.equal(header.alg, "ES256");
    assert.match(header.kid!, /^([A-Z2-7]{4}:){11}[A-Z2-7]{4}$/);
    const claims = decodeJwt(body.token);
    assert.equal(claims.iss, REGISTRY_ISSUER);
    assert.equal(claims.aud, REGISTRY_SERVICE);
    assert.equal(claims.sub, pusher.uid);
    assert.equal(claims.exp! - claims.iat!, 300);
    assert.deepEqual(claims.access, [{ type: "repository", name: `${org}/app`, actions: ["pull", "push"] }]);
  });

  test("docs/registry.md shows the very configuration file the registry here runs with", () => {
    const file = readFileSync(new URL("../../docs/registry/registry.yml", import.meta.url), "utf8");
    const doc = readFileSync(new URL("../../docs/registry.md", import.meta.url), "utf8");
    assert.ok(doc.includes(`\`\`\`yaml\n${file}\`\`\``), "docs/registry.md embeds docs/registry/registry.yml verbatim");
  });

  test("registry-bundle prints a certificate per live key, parseable, self-signed", async () => {
    const run = await platformCli(srv, ["registry-bundle"], REGISTRY_SERVER_ENV);
    assert.equal(run.code, 0, run.stderr);
    const pems = certificates(run.stdout);
    assert.equal(pems.length, 1);
    const cert = new X509Certificate(pems[0]!);
    assert.ok(cert.verify(cert.publicKey), "self-signed");
    assert.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, "prime256v1");
  });

  test("grants exactly what the role bindings allow at the repository's organization", async () => {
    const scope = [`repository:${org}/app:pull,push,delete`];
    assert.deepEqual(await accessOf(apiCreds(viewer), scope), [{ type: "repository", name: `${org}/app`, actions: ["pull"] }]);
    // The registry.push bundle holds manifest.delete too (the built-in role: tag and manifest create, update, delete).
    assert.deepEqual(await accessOf(apiCreds(pusher), scope), [
      { type: "repository", name: `${org}/app`, actions: ["pull", "push", "delete"] },
    ]);
    assert.deepEqual(await accessOf(apiCreds(owner), scope), [
      { type: "repository", name: `${org}/app`, actions: ["pull", "push", "delete"] },
    ]);
    assert.deepEqual(await accessOf(apiCreds(outsider), scope), []);
  });

  test("push to a repo that does not exist yet needs repo.create too", async () => {
    const writer = await createCaller(
      srv,
      org,
      "tag writer",
      await customRole(srv, org, "tag writer", ["CAP_MANIFEST_CREATE", "CAP_MANIFEST_UPDATE", "CAP_TAG_CREATE", "CAP_TAG_UPDATE"]),
    );
    assert.deepEqual(await accessOf(apiCreds(writer), [`repository:${org}/fresh:push`]), []);
    await ok(rest(srv.url, "POST", `/registry/v2beta1/repos/${org}`, { name: "fresh" }));
    assert.deepEqual(await accessOf(apiCreds(writer), [`repository:${org}/fresh:push`]), [
      { type: "repository", name: `${org}/fresh`, actions: ["push"] },
    ]);
  });

  test("path tricks, other resource types and unknown actions are granted nothing", async () => {
    const tricks = [
      `repository:${org}/../${other}/app:pull`,
      `repository:${org.toUpperCase()}/app:pull`,
      `repository:${org}/App:pull`,
      `repository:${org}/app%2fx:pull`,
      `repository:${org}//app:pull`,
      `repository:${org}/app/:pull`,
      `repository:${other}/app:pull`,
      `repository:app:pull`,
      `repository:${org}:pull`,
      `registry:catalog:*`,
    ];
    assert.deepEqual(await accessOf(apiCreds(owner), tricks.slice(0, 8)), []);
    assert.deepEqual(await accessOf(apiCreds(owner), [...tricks.slice(8), `repository:${org}/app:*,bogus`]), []);
  });

  test("no credentials: 401 with a Basic challenge", async () => {
    const res = await tokenRequest([`repository:${org}/app:pull`], undefined);
    const body = assertRestError(res, 401, 16, "UNAUTHENTICATED");
    assert.match(body.message, /HTTP Basic credentials/);
    assert.equal(res.headers.get("www-authenticate"), 'Basic realm="platform-api registry"');
  });

  test("bad credentials: 401, the same for a bad API token, a malformed header and a token that may not assume", async () => {
    for (const authorization of [
      basic({ user: "_token", password: "not-a-token" }),
      "Basic !!!",
      `Bearer ${pusher.token}`,
      basic({ user: "someone", password: "x" }),
      basic({ user: workload, password: issuer.idToken({ sub: "someone else", aud: AUTH }) }),
      basic({ user: `${org}/0123456789abcdef`, password: issuer.idToken({ sub: WORKLOAD_SUBJECT, aud: AUTH }) }),
    ]) {
      const res = await tokenRequest([`repository:${org}/app:pull`], authorization);
      assertRestError(res, 401, 16, "UNAUTHENTICATED");
      assert.equal(res.headers.get("www-authenticate"), 'Basic realm="platform-api registry"');
    }
  });

  test("bad requests: too many scopes, a malformed scope, another service", async () => {
    const auth = basic(apiCreds(owner));
    const many = Array.from({ length: 9 }, (_, i) => `repository:${org}/app${i}:pull`);
    let body = assertRestError(await tokenRequest(many, auth), 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(fieldViolations(body), [{ field: "scope", description: "at most 8 scopes per token request" }]);
    body = assertRestError(await tokenRequest([`repository:${org}/app`], auth), 400, 3, "INVALID_ARGUMENT");
    assert.equal(fieldViolations(body)[0]!.field, "scope");
    body = assertRestError(await tokenRequest([`repository:${org}/${"a".repeat(600)}:pull`], auth), 400, 3, "INVALID_ARGUMENT");
    assert.equal(fieldViolations(body)[0]!.description, "each scope is at most 512 characters");
    body = assertRestError(await tokenRequest([], auth, "other.service"), 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(fieldViolations(body), [{ field: "service", description: `must be this token service's, ${REGISTRY_SERVICE}` }]);
  });

  test("30 failed logins from an address: its next failures get 429, valid credentials still their token", async () => {
    const fresh = await startTestServer({ env: REGISTRY_SERVER_ENV });
    try {
      const caller = await createCaller(fresh, (await createGroup(fresh.url, null, "limited org")).uid, "limited", null);
      const get = (authorization: string) =>
        rest(fresh.url, "GET", `/registry/token?service=${REGISTRY_SERVICE}`, undefined, { authorization });
      const bad = basic({ user: "_token", password: "wrong" });
      for (let i = 0; i < 30; i++) assertRestError(await get(bad), 401, 16, "UNAUTHENTICATED");
      const body = assertRestError(await get(bad), 429, 8, "RESOURCE_EXHAUSTED");
      assert.match(body.message, /too many failed registry logins from this address/);
      const good = await ok(get(basic(apiCreds(caller))));
      assert.deepEqual(decodeJwt(good.token).access, []);
    } finally {
      await fresh.close();
    }
  });

  test("a login without scopes (docker login) gets a token with no access", async () => {
    assert.deepEqual(await accessOf(apiCreds(viewer), []), []);
  });

  test("POST, the OAuth2 form containerd tries first: the token GET gives, the scope granted, and the registry takes it", async () => {
    const scope = `repository:${org}/app:pull,push repository:${other}/app:pull`;
    const res = await oauthRequest({ username: "_token", password: pusher.token, scope, client_id: "containerd-client" });
    const body = await ok(Promise.resolve(res));
    assert.equal(res.headers.get("cache-control"), "no-store");
    assert.equal(body.expires_in, 300);
    assert.equal(body.refresh_token, undefined, "no refresh tokens are issued");
    const claims = decodeJwt(body.access_token);
    assert.equal(claims.sub, pusher.uid);
    assert.deepEqual(claims.access, await accessOf(apiCreds(pusher), scope.split(" ")));
    assert.equal(body.scope, `repository:${org}/app:pull,push`, "the scope granted: nothing at the other org");
    // Distribution verifies it: its API root answers the token's bearer.
    const root = await fetch(`http://${world.registry.addr}/v2/`, { headers: { authorization: `Bearer ${body.access_token}` } });
    assert.equal(root.status, 200, world.registry.logs());
    // A workload assumes its identity with its OIDC token as the password, as with Basic.
    const assumed = await ok(
      oauthRequest({
        username: workload,
        password: issuer.idToken({ sub: WORKLOAD_SUBJECT, aud: AUTH }),
        scope: `repository:${org}/app:push`,
      }),
    );
    assert.deepEqual(decodeJwt(assumed.access_token).access, [{ type: "repository", name: `${org}/app`, actions: ["push"] }]);
  });

  test("POST refusals: a refresh-token grant names grant_type, bad credentials are 401 with the challenge, another body type 415", async () => {
    let body = assertRestError(await oauthRequest({ grant_type: "refresh_token", refresh_token: "x" }), 400, 3, "INVALID_ARGUMENT");
    assert.equal(fieldViolations(body)[0]!.field, "grant_type");
    body = assertRestError(await oauthRequest({ grant_type: "" }), 400, 3, "INVALID_ARGUMENT");
    assert.equal(fieldViolations(body)[0]!.field, "grant_type");
    const refused: Record<string, string>[] = [{}, { username: "_token", password: "not-a-token" }, { username: "someone", password: "x" }];
    for (const fields of refused) {
      const res = await oauthRequest(fields);
      assertRestError(res, 401, 16, "UNAUTHENTICATED");
      assert.equal(res.headers.get("www-authenticate"), 'Basic realm="platform-api registry"');
    }
    body = assertRestError(
      await oauthRequest({ username: "_token", password: owner.token, service: "other.service" }),
      400,
      3,
      "INVALID_ARGUMENT",
    );
    assert.equal(fieldViolations(body)[0]!.field, "service");
    const json = await rest(srv.url, "POST", "/registry/token", { grant_type: "password" }, { authorization: "" });
    body = assertRestError(json, 415, 3, "INVALID_ARGUMENT");
    assert.deepEqual(fieldViolations(body), [{ field: "Content-Type", description: "must be application/x-www-form-urlencoded" }]);
    const huge = await oauthRequest({ username: "_token", password: "x".repeat(40 * 1024) });
    assertRestError(huge, 413, 8, "BODY_TOO_LARGE");
  });
});

describe("with the real registry and skopeo", () => {
  test("a pusher pushes; a viewer pulls but cannot push; another org's owner can do neither", async () => {
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/app:v1`, apiCreds(pusher));
    assert.equal(pushed.code, 0, `${pushed.stderr}\n${world.registry.logs().slice(-2000)}`);
    const digest = await manifestDigest(world.registry, `${org}/app:v1`, apiCreds(viewer));
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
    const pulled = await pullImage(world.registry, `${org}/app:v1`, apiCreds(viewer));
    assert.equal(pulled.code, 0, pulled.stderr);
    const viewerPush = await pushImage(world.registry, world.image.ref, `${org}/app:v2`, apiCreds(viewer));
    assert.notEqual(viewerPush.code, 0);
    assert.match(viewerPush.stderr, /unauthorized|denied|authentication required/i);
    const outsiderPull = await pullImage(world.registry, `${org}/app:v1`, apiCreds(outsider));
    assert.notEqual(outsiderPull.code, 0);
    assert.match(outsiderPull.stderr, /unauthorized|denied|authentication required/i);
    const outsiderPush = await pushImage(world.registry, world.image.ref, `${org}/app:v3`, apiCreds(outsider));
    assert.notEqual(outsiderPush.code, 0);
  });

  test("a workload pushes with its own OIDC token, exchanged at the token endpoint", async () => {
    const oidc = issuer.idToken({ sub: WORKLOAD_SUBJECT, aud: AUTH });
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/ci/app:main`, { user: workload, password: oidc });
    assert.equal(pushed.code, 0, pushed.stderr);
    const digest = await manifestDigest(world.registry, `${org}/ci/app:main`, apiCreds(viewer));
    assert.match(digest, /^sha256:[0-9a-f]{64}$/);
  });

  test("delete needs manifest.delete: refused to a pull-and-push role without it, done by an owner", async () => {
    const role = await customRole(srv, org, "push no delete", [
      "CAP_REPO_BLOBS_GET",
      "CAP_REPO_CREATE",
      "CAP_MANIFEST_CREATE",
      "CAP_MANIFEST_UPDATE",
      "CAP_TAG_CREATE",
      "CAP_TAG_UPDATE",
    ]);
    const writer = await createCaller(srv, org, "push no delete", role);
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/doomed:v1`, apiCreds(writer));
    assert.equal(pushed.code, 0, pushed.stderr);
    const refused = await deleteImage(world.registry, `${org}/doomed:v1`, apiCreds(writer));
    assert.notEqual(refused.code, 0);
    const deleted = await deleteImage(world.registry, `${org}/doomed:v1`, apiCreds(owner));
    assert.equal(deleted.code, 0, deleted.stderr);
    const gone = await pullImage(world.registry, `${org}/doomed:v1`, apiCreds(owner));
    assert.notEqual(gone.code, 0);
    assert.match(gone.stderr, /manifest unknown|not found/i);
  });

  test("a revoked binding stops the next token", async () => {
    const before = await pullImage(world.registry, `${org}/app:v1`, apiCreds(viewer));
    assert.equal(before.code, 0, before.stderr);
    await ok(rest(srv.url, "DELETE", `/iam/v2beta1/roleBindings/${viewerBinding}`));
    assert.deepEqual(await accessOf(apiCreds(viewer), [`repository:${org}/app:pull`]), []);
    const afterRevoke = await pullImage(world.registry, `${org}/app:v1`, apiCreds(viewer));
    assert.notEqual(afterRevoke.code, 0);
    assert.match(afterRevoke.stderr, /unauthorized|denied|authentication required/i);
  });
});

describe("key rotation", () => {
  test("a rotated key signs at once; the bundle printed after it has both keys, and a registry restarted with it takes the new tokens", async () => {
    const previous = decodeProtectedHeader((await ok(tokenRequest([], basic(apiCreds(pusher))))).token).kid;
    const rotated = await platformCli(srv, ["rotate-key"], REGISTRY_SERVER_ENV);
    assert.equal(rotated.code, 0, rotated.stderr);
    const body = await ok(tokenRequest([`repository:${org}/app:pull`], basic(apiCreds(pusher))));
    assert.notEqual(decodeProtectedHeader(body.token).kid, previous);
    const bundle = await platformCli(srv, ["registry-bundle"], REGISTRY_SERVER_ENV);
    const certs = certificates(bundle.stdout);
    assert.equal(certs.length, 2, "the rotated-out key stays while its tokens may verify");
    const { payload } = await jwtVerify(body.token, new X509Certificate(certs[1]!).publicKey, {
      issuer: REGISTRY_ISSUER,
      audience: REGISTRY_SERVICE,
    });
    assert.equal(payload.sub, pusher.uid);
    // The registry read its bundle at start: it refuses the new key's tokens until it is restarted with the new one.
    const stale = await pullImage(world.registry, `${org}/app:v1`, apiCreds(pusher));
    assert.notEqual(stale.code, 0);
    await world.restartRegistry();
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/app:v1`, apiCreds(pusher));
    assert.equal(pushed.code, 0, pushed.stderr);
    const pulled = await pullImage(world.registry, `${org}/app:v1`, apiCreds(pusher));
    assert.equal(pulled.code, 0, pulled.stderr);
  });
});
