/**
 * HTTP conventions clients take for granted (issue 13, §4 and §5): unknown
 * body fields are refused, HEAD answers like GET, a 401 carries an RFC 6750
 * challenge and says what kind of token problem it is, responses are
 * compressed when the client accepts it, and compressed request bodies are
 * read within the body limit.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import http from "node:http";
import { PassThrough } from "node:stream";
import { after, before, describe, test } from "node:test";
import zlib from "node:zlib";
import { SignJWT } from "jose";
import type { RunningServer } from "../../src/app/start.js";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { readServerKey } from "../support/forge.js";
import { assertViolations } from "../support/rest-errors.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

/** A raw HTTP/1.1 exchange: the bytes as they came, no decoding of Content-Encoding (fetch would undo it). */
function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: Buffer } = {}) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? "GET", headers: opts.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

describe("unknown fields in a request body", () => {
  let srv: TestServer;
  let org: { uid: string };
  before(async () => {
    srv = await startTestServer();
    org = await createGroup(srv.url, null, "unknown-fields org");
  });
  after(() => srv.close());

  test("POST {nmae} is INVALID_ARGUMENT naming nmae, and creates nothing", async () => {
    const err = assertViolations(await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { nmae: "acme" }), ["nmae"]);
    assert.match(fieldViolations(err)[0]!.description, /is not a field of platformapi\.iam\.v2beta1\.Group/);
    const children = await rest(srv.url, "GET", `/iam/v2beta1/groups?uidp.children_of=${org.uid}`);
    assert.equal(children.status, 200);
    assert.deepEqual(children.body.groups, []);
  });

  test("PATCH {descripton} without a mask is refused and changes nothing, updateTime included", async () => {
    const group = await createGroup(srv.url, org.uid, "patched", "before");
    assertViolations(await rest(srv.url, "PATCH", `/iam/v2beta1/groups/${group.uid}`, { descripton: "typo" }), ["descripton"]);
    const after = await rest(srv.url, "GET", `/iam/v2beta1/groups/${group.uid}`);
    assert.equal(after.body.description, "before");
    assert.equal(after.body.updateTime, group.updateTime);
    // A known key next to an unknown one is refused just the same: nothing is half-applied.
    const mixed = await rest(srv.url, "PATCH", `/iam/v2beta1/groups/${group.uid}`, { description: "after", colour: "red" });
    assertViolations(mixed, ["colour"]);
    assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/groups/${group.uid}`)).body.description, "before");
  });

  test("every unknown key is named, with its full path when nested", async () => {
    const body = {
      parent: org.uid,
      requests: [{ parent: org.uid, roleBinding: { identityUid: "ab", roleUid: "cd", nmae: 1 } }],
      extra: true,
    };
    const err = assertRestError(await rest(srv.url, "POST", "/iam/v2beta1/roleBindings:batchCreate", body), 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(
      fieldViolations(err)
        .map((v) => v.field)
        .sort(),
      ["extra", "requests[0].role_binding.nmae"],
    );
  });

  test("proto field names are as good as JSON names, and a well-formed body still works", async () => {
    const ok = await rest(srv.url, "POST", `/registry/v2beta1/repos/${org.uid}`, { name: "nginx", catalog_tier: "CATALOG_TIER_BASE" });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.catalogTier, "CATALOG_TIER_BASE");
    const group = await createGroup(srv.url, org.uid, "fine");
    const patched = await rest(srv.url, "PATCH", `/iam/v2beta1/groups/${group.uid}`, { description: "changed" });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.description, "changed");
  });
});

describe("HEAD on GET routes", () => {
  let srv: TestServer;
  let group: { uid: string };
  before(async () => {
    srv = await startTestServer();
    group = await createGroup(srv.url, null, "head org");
  });
  after(() => srv.close());

  for (const path of [
    "/iam/v2beta1/groups/{uid}",
    "/iam/v2beta1/groups?uidp.descendants_of={uid}",
    "/healthz",
    "/openapi.json",
    "/.well-known/jwks.json",
  ]) {
    test(`HEAD ${path} answers like GET, without the body`, async () => {
      const url = srv.url + path.replace("{uid}", group.uid);
      const headers = { authorization: `Bearer ${srv.adminToken}` };
      const get = await rawRequest(url, { headers });
      const head = await rawRequest(url, { method: "HEAD", headers });
      assert.equal(get.status, 200);
      assert.equal(head.status, 200);
      assert.equal(head.body.length, 0);
      assert.equal(head.headers["content-type"], get.headers["content-type"]);
      assert.equal(head.headers["content-length"], String(get.body.length));
    });
  }

  test("HEAD without a token is the same 401 as GET, with no body", async () => {
    const head = await rawRequest(`${srv.url}/iam/v2beta1/groups/${group.uid}`, { method: "HEAD" });
    assert.equal(head.status, 401);
    assert.equal(head.headers["www-authenticate"], "Bearer");
    assert.equal(head.body.length, 0);
  });

  test("a route without GET still answers 405, and GET routes list HEAD in Allow", async () => {
    const res = await rest(srv.url, "HEAD", "/iam/v2beta1/roleBindings:batchCreate");
    assert.equal(res.status, 405);
    assert.equal(res.headers.get("allow"), "POST");
    const put = await rest(srv.url, "PUT", `/iam/v2beta1/groups/${group.uid}`, {});
    assert.equal(put.status, 405);
    assert.deepEqual(put.headers.get("allow")?.split(", ").sort(), ["DELETE", "GET", "HEAD", "PATCH", "POST"]);
  });
});

describe("401: WWW-Authenticate and a message that says what is wrong", () => {
  let storage: TestServer;
  let server: RunningServer;
  let clock = Date.now();
  const logs: string[] = [];
  before(async () => {
    const logStream = new PassThrough();
    logStream.on("data", (chunk: Buffer) => logs.push(chunk.toString("utf8")));
    storage = await startTestServer({
      env: { LOG_LEVEL: "debug", PLATFORM_METRICS_TOKEN: "m".repeat(32) },
      logStream,
      now: () => clock,
    });
    server = storage.server;
  });
  after(() => storage.close());

  async function authOk(token: string | undefined) {
    return rest(server.url, "GET", "/auth/v1/ok", undefined, { authorization: token === undefined ? "" : `Bearer ${token}` });
  }

  async function signed(
    key: Parameters<SignJWT["sign"]>[0],
    kid: string,
    audience: string,
    issuer = server.tokens.issuer,
  ): Promise<string> {
    return new SignJWT({})
      .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt" })
      .setIssuer(issuer)
      .setAudience(audience)
      .setSubject(server.adminSubject)
      .setIssuedAt(Math.floor(clock / 1000))
      .setExpirationTime(Math.floor(clock / 1000) + 600)
      .sign(key);
  }

  test("no token: 401, WWW-Authenticate: Bearer without an error code, the spec's body", async () => {
    const res = await authOk(undefined);
    const body = assertRestError(res, 401, 16, "UNAUTHENTICATED");
    assert.equal(res.headers.get("www-authenticate"), "Bearer");
    assert.match(body.message, /no bearer token/);
  });

  test("each refused token gets error=invalid_token, a message naming the kind of problem, and a debug log of the reason", async () => {
    const ours = await readServerKey(storage);
    const stranger = generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey;
    const valid = (await server.tokens.mint(server.adminSubject)).token;
    assert.equal((await authOk(valid)).status, 200);
    const cases: { name: string; token: () => Promise<string>; message: RegExp; logged: RegExp }[] = [
      {
        name: "garbage",
        token: async () => "not-a-jwt",
        message: /not a valid API token of this server/,
        logged: /not a canonical compact JWS/,
      },
      {
        name: "another audience",
        token: () => signed(ours.privateKey, ours.kid, "https://elsewhere.example"),
        message: /another audience/,
        logged: /JWTClaimValidationFailed.*aud/,
      },
      {
        // What `admin-token` run with another PORT mints: our key, another address.
        name: "another issuer",
        token: () => signed(ours.privateKey, ours.kid, server.tokens.audience, "http://localhost:8080"),
        message: /issued by another address.*PLATFORM_AUTH_URL/,
        logged: /JWTClaimValidationFailed.*iss/,
      },
      {
        name: "an unknown key",
        token: () => signed(stranger, "no-such-kid", server.tokens.audience),
        message: /key this server does not know/,
        logged: /no-such-kid/,
      },
      {
        name: "expired",
        token: async () => {
          const token = (await server.tokens.mint(server.adminSubject)).token;
          clock += 2 * 3600_000;
          return token;
        },
        message: /has expired/,
        logged: /JWTExpired/,
      },
    ];
    for (const c of cases) {
      const res = await authOk(await c.token());
      const body = assertRestError(res, 401, 16, "UNAUTHENTICATED");
      assert.equal(res.headers.get("www-authenticate"), 'Bearer error="invalid_token"', c.name);
      assert.match(body.message, c.message, c.name);
      assert.ok(
        logs.some((line) => line.includes('"level":20') && line.includes("bearer token refused") && c.logged.test(line)),
        `${c.name}: the reason is logged`,
      );
    }
    // The log names the reason, never the token.
    assert.ok(!logs.join("").includes(valid.split(".")[2]!));
  });

  test("a Connect unary 401 carries the same challenge", async () => {
    const call = (authorization?: string) =>
      fetch(`${server.url}/platformapi.auth.v1.AuthService/Validate`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", ...(authorization ? { authorization } : {}) },
        body: "{}",
      });
    const anonymous = await call();
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.headers.get("www-authenticate"), "Bearer");
    assert.equal(((await anonymous.json()) as { code: string }).code, "unauthenticated");
    const refused = await call("Bearer not-a-jwt");
    assert.equal(refused.headers.get("www-authenticate"), 'Bearer error="invalid_token"');
  });

  test("/metrics keeps its realm and adds invalid_token when a wrong token was sent", async () => {
    const anonymous = await fetch(`${server.url}/metrics`);
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.headers.get("www-authenticate"), 'Bearer realm="metrics"');
    const wrong = await fetch(`${server.url}/metrics`, { headers: { authorization: "Bearer nope" } });
    assert.equal(wrong.headers.get("www-authenticate"), 'Bearer realm="metrics", error="invalid_token"');
  });
});

describe("compression", () => {
  const LIMIT = 64 * 1024;
  let srv: TestServer;
  let org: { uid: string };
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_MAX_MESSAGE_BYTES: String(LIMIT) } });
    org = await createGroup(srv.url, null, "compression org");
  });
  after(() => srv.close());

  test("/openapi.json is sent gzip or br as the client prefers, and decodes to the same document", async () => {
    const plain = await rawRequest(`${srv.url}/openapi.json`);
    assert.equal(plain.headers["content-encoding"], undefined);
    assert.match(String(plain.headers.vary), /Accept-Encoding/i);
    const gz = await rawRequest(`${srv.url}/openapi.json`, { headers: { "accept-encoding": "gzip" } });
    assert.equal(gz.headers["content-encoding"], "gzip");
    assert.ok(gz.body.length < plain.body.length / 4, `${gz.body.length} of ${plain.body.length} bytes`);
    assert.deepEqual(zlib.gunzipSync(gz.body), plain.body);
    const br = await rawRequest(`${srv.url}/openapi.json`, { headers: { "accept-encoding": "gzip, deflate, br" } });
    assert.equal(br.headers["content-encoding"], "br");
    assert.deepEqual(zlib.brotliDecompressSync(br.body), plain.body);
    const preferGzip = await rawRequest(`${srv.url}/openapi.json`, { headers: { "accept-encoding": "br;q=0.5, gzip" } });
    assert.equal(preferGzip.headers["content-encoding"], "gzip");
    const none = await rawRequest(`${srv.url}/openapi.json`, { headers: { "accept-encoding": "identity, gzip;q=0" } });
    assert.equal(none.headers["content-encoding"], undefined);
    // fetch, as a browser would, undoes the coding itself.
    const viaFetch = await fetch(`${srv.url}/openapi.json`);
    assert.match(String(viaFetch.headers.get("content-encoding")), /^(gzip|br)$/);
    assert.equal(((await viaFetch.json()) as { openapi: string }).openapi.slice(0, 2), "3.");
  });

  test("REST responses: a large list is compressed, a small body is not", async () => {
    for (let i = 0; i < 12; i++) await createGroup(srv.url, org.uid, `child ${i}`, "x".repeat(60));
    const headers = { authorization: `Bearer ${srv.adminToken}`, "accept-encoding": "gzip" };
    const list = await rawRequest(`${srv.url}/iam/v2beta1/groups?uidp.children_of=${org.uid}`, { headers });
    assert.equal(list.status, 200);
    assert.equal(list.headers["content-encoding"], "gzip");
    assert.equal((JSON.parse(zlib.gunzipSync(list.body).toString()) as { groups: unknown[] }).groups.length, 12);
    const brList = await rawRequest(`${srv.url}/iam/v2beta1/groups?uidp.children_of=${org.uid}`, {
      headers: { ...headers, "accept-encoding": "br" },
    });
    assert.equal(brList.headers["content-encoding"], "br");
    assert.deepEqual(zlib.brotliDecompressSync(brList.body), zlib.gunzipSync(list.body), "the same body in either coding");
    const one = await rawRequest(`${srv.url}/iam/v2beta1/groups/${org.uid}`, { headers });
    assert.equal(one.status, 200);
    assert.equal(one.headers["content-encoding"], undefined);
    assert.equal((JSON.parse(one.body.toString()) as { uid: string }).uid, org.uid);
  });

  test("Connect responses are left to Connect's own negotiation", async () => {
    const res = await rawRequest(`${srv.url}/platformapi.iam.v2beta1.GroupsService/ListGroups`, {
      method: "POST",
      headers: { authorization: `Bearer ${srv.adminToken}`, "content-type": "application/json", "accept-encoding": "identity" },
      body: Buffer.from(JSON.stringify({ uidp: { childrenOf: org.uid } })),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers["content-encoding"], undefined);
    assert.equal((JSON.parse(res.body.toString()) as { groups: unknown[] }).groups.length, 12);
  });

  async function post(body: Buffer, coding: string): Promise<Awaited<ReturnType<typeof rest>>> {
    const res = await fetch(`${srv.url}/iam/v2beta1/groups/${org.uid}`, {
      method: "POST",
      headers: { authorization: `Bearer ${srv.adminToken}`, "content-type": "application/json", "content-encoding": coding },
      body: new Uint8Array(body),
    });
    const text = await res.text();
    return { status: res.status, body: text === "" ? undefined : JSON.parse(text), headers: res.headers };
  }

  test("a gzip or br request body is read", async () => {
    const json = Buffer.from(JSON.stringify({ name: "zipped", description: "y".repeat(500) }));
    const gz = await post(zlib.gzipSync(json), "gzip");
    assert.equal(gz.status, 200, JSON.stringify(gz.body));
    assert.equal(gz.body.name, "zipped");
    const br = await post(zlib.brotliCompressSync(Buffer.from(JSON.stringify({ name: "brotli" }))), "br");
    assert.equal(br.status, 200, JSON.stringify(br.body));
    assert.equal(br.body.name, "brotli");
  });

  test("a body inflating past the limit is the same 413 as a plain body over it; corrupt data is a 400", async () => {
    const over = Buffer.from(JSON.stringify({ name: "big", description: " ".repeat(LIMIT) }));
    const plain = assertRestError(await post(over, "identity"), 413, 8, "BODY_TOO_LARGE");
    for (const [coding, bomb] of [
      ["gzip", zlib.gzipSync(Buffer.alloc(64 * LIMIT, 0x20))],
      ["br", zlib.brotliCompressSync(Buffer.alloc(64 * LIMIT, 0x20))],
    ] as const) {
      const refused = assertRestError(await post(bomb, coding), 413, 8, "BODY_TOO_LARGE");
      assert.equal(refused.message, plain.message, coding);
    }
    const corrupt = assertRestError(await post(Buffer.from("this is not gzip"), "gzip"), 400, 3, "INVALID_ARGUMENT");
    assert.equal(fieldViolations(corrupt)[0]!.field, "body");
    // Nothing was created by any of them.
    const names = (await rest(srv.url, "GET", `/iam/v2beta1/groups?uidp.children_of=${org.uid}&page_size=100`)).body.groups.map(
      (g: { name: string }) => g.name,
    );
    assert.ok(!names.includes("big"));
  });

  test("an unsupported coding is 415 with Accept-Encoding listing what is accepted", async () => {
    const res = await post(Buffer.from("{}"), "zstd");
    const body = assertRestError(res, 415, 3, "UNSUPPORTED_CONTENT_ENCODING");
    assert.equal(res.headers.get("accept-encoding"), "gzip, br");
    assert.match(body.message, /zstd/);
  });
});
