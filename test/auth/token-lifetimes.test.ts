/**
 * Issue 21, item 7: keys retire and tokens have a maximum lifetime. Whoever
 * held a signing key (the oldest, rotated out long ago) could mint an
 * administrator token valid for ten years, and every key ever stored kept
 * verifying. Now a token claiming more than one hour (exp − iat) is refused
 * whatever signed it; a rotated-out key verifies until 1 h 1 min after its
 * successor was made and refuses tokens issued after it stopped signing;
 * `platform-api retire-key` (or `rotate-key --retire`) retires a key at
 * once, on every server process of the database, from its next request.
 */
import assert from "node:assert/strict";
import { createPrivateKey, type KeyObject } from "node:crypto";
import { after, before, describe, test } from "node:test";
import type { ServiceError } from "@grpc/grpc-js";
import { SignJWT, type JWK } from "jose";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { assertRestError } from "../support/assertions.js";
import { decode } from "../support/forge.js";
import { grpcClient } from "../support/grpc.js";
import { platformCli } from "../support/platform-cli.js";
import { rest, startTestServer, type TestServer, type TestStorage } from "../support/server.js";

const HOUR = 3600;
const YEAR = 365 * 24 * HOUR;

/** A stored signing key's private half (read while it still has one), as the holder of a leaked key has it. */
async function privateKeyOf(storage: TestStorage, kid: string): Promise<KeyObject> {
  const store = await storage.openStore();
  try {
    const record = (await store.keys.signingKeys()).find((k) => k.kid === kid)!;
    return createPrivateKey({ key: JSON.parse(record.privateJwk) as JWK & { kty: string }, format: "jwk" });
  } finally {
    await store.close();
  }
}

/** The stored keys, oldest first. */
async function storedKeys(storage: TestStorage) {
  const store = await storage.openStore();
  try {
    return await store.keys.signingKeys();
  } finally {
    await store.close();
  }
}

/** An administrator token correct in every respect (iss, aud, typ, sub, signature) but the times given (seconds). */
function adminToken(srv: TestServer, kid: string, key: KeyObject, iat: number, exp: number): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt" })
    .setIssuer(srv.server.tokens.issuer)
    .setAudience(srv.server.tokens.audience)
    .setSubject(srv.server.adminSubject)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(key);
}

/** GET /iam/v2beta1/groups with token, as a user calls it. */
const listGroups = (srv: TestServer, token: string) =>
  rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${token}` });

/** The kids the server publishes. */
async function publishedKids(srv: TestServer): Promise<string[]> {
  const res = await rest(srv.url, "GET", "/.well-known/jwks.json", undefined, { authorization: "" });
  assert.equal(res.status, 200);
  return (res.body.keys as { kid: string }[]).map((k) => k.kid);
}

/** Refused with UNAUTHENTICATED, and the message says why. */
function assertRefused(res: Awaited<ReturnType<typeof listGroups>>, why: RegExp): void {
  assertRestError(res, 401, 16, "UNAUTHENTICATED");
  assert.match(res.body.message, why);
}

const TOO_LONG = /lifetime longer than the 1 hour/;
const RETIRED = /signed by a retired signing key/;

describe("a token's lifetime is bounded at verification, whatever signed it", () => {
  let srv: TestServer;
  let kid: string;
  let key: KeyObject;
  before(async () => {
    srv = await startTestServer();
    kid = decode(srv.adminToken).header.kid!;
    key = await privateKeyOf(srv, kid);
  });
  after(() => srv.close());

  test("an administrator token with exp 10 years out, signed by the current key, is refused with UNAUTHENTICATED on REST and gRPC", async () => {
    const now = Math.floor(Date.now() / 1000);
    const tenYears = await adminToken(srv, kid, key, now, now + 10 * YEAR);
    assertRefused(await listGroups(srv, tenYears), TOO_LONG);
    // Backdated so that it looks like it ends soon: the lifetime, not the time left, is bounded.
    assertRefused(await listGroups(srv, await adminToken(srv, kid, key, now - 10 * YEAR + 600, now + 600)), TOO_LONG);
    const client = grpcClient(GroupsService, srv.port, { token: tenYears });
    try {
      await assert.rejects(client.call("listGroups", {}), (err: ServiceError) => err.code === 16 && TOO_LONG.test(err.details));
    } finally {
      client.close();
    }
  });

  test("the bound is one hour exactly: exp = iat + 3600 verifies, one second more does not", async () => {
    const now = Math.floor(Date.now() / 1000);
    assert.equal((await listGroups(srv, await adminToken(srv, kid, key, now, now + HOUR))).status, 200);
    assertRefused(await listGroups(srv, await adminToken(srv, kid, key, now, now + HOUR + 1)), TOO_LONG);
  });
});

describe("a rotated-out key verifies until 1 h 1 min after its successor was made, and not after (server clock injected)", () => {
  let offset = 0;
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer({ now: () => Date.now() + offset });
  });
  after(() => srv.close());

  test("tokens of the old key: issued before the rotation verify to the horizon; issued after it, never", async () => {
    const oldKid = decode(srv.adminToken).header.kid!;
    const oldKey = await privateKeyOf(srv, oldKid);
    const rotated = await platformCli(srv, ["rotate-key"]);
    assert.equal(rotated.code, 0, rotated.stderr);
    const successor = (await storedKeys(srv)).at(-1)!;
    assert.notEqual(successor.kid, oldKid);
    const made = successor.createTime / 1000;

    // The next request sees the new key: it signs from then on.
    assert.equal((await listGroups(srv, srv.adminToken)).status, 200);
    assert.equal(decode((await srv.server.tokens.mint(srv.server.adminSubject)).token).header.kid, successor.kid);

    // Signed by the old key 59 s after its successor was made (a mint that had not seen it yet): expires at made + 3659 s.
    const late = await adminToken(srv, oldKid, oldKey, made + 59, made + 59 + HOUR);
    // Signed by the old key 2 minutes after the rotation: only someone holding the old key mints that.
    const afterRotation = await adminToken(srv, oldKid, oldKey, made + 120, made + 120 + HOUR);
    offset = (made + 600) * 1000 - Date.now();
    assert.equal((await listGroups(srv, late)).status, 200);
    assertRefused(await listGroups(srv, afterRotation), RETIRED);
    assert.ok((await publishedKids(srv)).includes(oldKid), "published while it verifies");

    offset = (made + 3655) * 1000 - Date.now();
    assert.equal((await listGroups(srv, late)).status, 200, "5 s before the horizon (and 4 s before exp)");
    // 3 s past exp, inside the 30 s clock tolerance, so only the horizon refuses it (from the verified-token cache too).
    offset = (made + 3662) * 1000 - Date.now();
    assertRefused(await listGroups(srv, late), RETIRED);
    assert.deepEqual(await publishedKids(srv), [successor.kid], "gone from the JWKS past its horizon");
    const listed = await platformCli(srv, ["list-keys"]);
    assert.equal(listed.code, 0, listed.stderr);
    assert.match(listed.stdout, new RegExp(`^${oldKid} (rotated-out|past-horizon) created .*\\n${successor.kid} signing created `));
  });
});

describe("retire-key refuses a key's tokens at once, on every process of the database", () => {
  let a: TestServer;
  let b: TestServer;
  before(async () => {
    a = await startTestServer();
    // A second server process on the same data (its own caches), as PLATFORM_WORKERS or another machine runs it.
    b = await startTestServer({ dataDir: a.dataDir, databaseUrl: a.databaseUrl });
  });
  after(async () => {
    await b.close();
    await a.close();
  });
  const cli = (...args: string[]) => platformCli(a, args);
  const statuses = async (token: string) => [(await listGroups(a, token)).status, (await listGroups(b, token)).status];

  test("retire-key <old kid>: both servers refuse its tokens at their next request; it leaves the JWKS", async () => {
    const first = a.adminToken;
    const firstKid = decode(first).header.kid!;
    // Verified, so cached, on both.
    assert.deepEqual(await statuses(first), [200, 200]);
    const rotated = await cli("rotate-key");
    assert.equal(rotated.code, 0, rotated.stderr);
    const secondKid = /^added signing key (\S+)\n$/.exec(rotated.stdout)![1]!;
    assert.deepEqual(await statuses(first), [200, 200], "a rotated-out key's tokens keep verifying");
    const second = (await b.server.tokens.mint(b.server.adminSubject)).token;
    assert.equal(decode(second).header.kid, secondKid);

    const retired = await cli("retire-key", firstKid);
    assert.equal(retired.code, 0, retired.stderr);
    assert.equal(retired.stdout, `retired signing key ${firstKid}\n`);
    // No wait, no polling: the very next request to either process refuses it (cache window: none).
    assertRefused(await listGroups(a, first), RETIRED);
    assertRefused(await listGroups(b, first), RETIRED);
    const client = grpcClient(GroupsService, b.port, { token: first });
    try {
      await assert.rejects(client.call("listGroups", {}), (err: ServiceError) => err.code === 16 && RETIRED.test(err.details));
    } finally {
      client.close();
    }
    assert.deepEqual(await statuses(second), [200, 200], "the successor's tokens are untouched");
    for (const srv of [a, b]) assert.deepEqual(await publishedKids(srv), [secondKid]);
    assert.equal((await storedKeys(a)).find((k) => k.kid === firstKid)!.privateJwk, "", "its private half is erased");

    const again = await cli("retire-key", firstKid);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, `signing key ${firstKid} was retired already\n`);
  });

  test("the signing key cannot be retired alone; rotate-key --retire replaces it in one step", async () => {
    const keys = await storedKeys(a);
    const signingKid = keys.at(-1)!.kid;
    const signed = (await a.server.tokens.mint(a.server.adminSubject)).token;
    assert.equal(decode(signed).header.kid, signingKid);

    const refused = await cli("retire-key", signingKid);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`is the newest key, the one that signs; .*rotate-key --retire ${signingKid}`));
    // Kids are base64url: one in 64 begins with "-", and it is a kid, not an option.
    for (const args of [
      ["retire-key", "no-such-kid"],
      ["retire-key", "-no-such-kid"],
      ["rotate-key", "--retire", "no-such-kid"],
      ["rotate-key", "--retire", "-no-such-kid"],
    ]) {
      const res = await cli(...args);
      assert.equal(res.code, 1, args.join(" "));
      assert.match(res.stderr, new RegExp(`no signing key has kid "${args.at(-1)}"`));
    }
    assert.deepEqual(await storedKeys(a), keys, "nothing changed: no key added, none retired");
    assert.deepEqual(await statuses(signed), [200, 200]);
    for (const args of [["retire-key"], ["retire-key", "a", "b"], ["rotate-key", "--retire"], ["rotate-key", "--bogus"]]) {
      assert.equal((await cli(...args)).code, 2, args.join(" "));
    }

    const replaced = await cli("rotate-key", "--retire", signingKid);
    assert.equal(replaced.code, 0, replaced.stderr);
    const m = /^added signing key (\S+)\nretired signing key (\S+)\n$/.exec(replaced.stdout);
    assert.ok(m, replaced.stdout);
    assert.equal(m[2], signingKid);
    assertRefused(await listGroups(a, signed), RETIRED);
    assertRefused(await listGroups(b, signed), RETIRED);
    const fresh = (await a.server.tokens.mint(a.server.adminSubject)).token;
    assert.equal(decode(fresh).header.kid, m[1]);
    assert.deepEqual(await statuses(fresh), [200, 200]);

    const listed = await cli("list-keys");
    assert.equal(listed.code, 0, listed.stderr);
    const states = listed.stdout
      .trim()
      .split("\n")
      .map((line) => line.split(" ").slice(0, 2));
    assert.deepEqual(states.slice(-2), [
      [signingKid, "retired"],
      [m[1], "signing"],
    ]);
    assert.ok(states.slice(0, -2).every(([, state]) => state === "retired"));
  });
});
