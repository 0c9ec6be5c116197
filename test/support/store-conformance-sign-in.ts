import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import { ResourceExhaustedError } from "../../src/domain/errors.js";
import { USED_REFRESH_TOKENS_KEPT, type RefreshTokenRecord, type SignInFlowRecord } from "../../src/store/sign-in-store.js";
import type { Store } from "../../src/store/store.js";
import { assertAlreadyExists, assertNotFound } from "./store-conformance-iam.js";
import { identity } from "./store-fixtures.js";

const T0 = 1_700_000_000_000;
const MINUTES_10 = 600_000;
const PERSON = "e".repeat(40);
const OTHER = "f".repeat(40);

/** A pending authorize flow from 192.0.2.1, created at T0, expiring 10 minutes later. */
function flow(id: string, over: Partial<SignInFlowRecord> = {}): SignInFlowRecord {
  return {
    id,
    kind: "authorize",
    clientId: "platform-cli",
    redirectUri: "http://127.0.0.1:4711/callback",
    clientState: `state-${id}`,
    codeChallenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    deviceCodeHash: "",
    userCodeHash: "",
    pollInterval: 5,
    lastPollTime: 0,
    scope: { idp: "", org: "", provider: "" },
    clientAddress: "192.0.2.1",
    upstreamProvider: "",
    upstreamStateHash: "",
    upstreamNonce: "",
    upstreamVerifier: "",
    browserBindingHash: "",
    status: "pending",
    identityUid: "",
    codeHash: "",
    createTime: T0,
    expireTime: T0 + MINUTES_10,
    ...over,
  };
}

/** The first token of a family of PERSON begun at T0. */
function token(hash: string, over: Partial<RefreshTokenRecord> = {}): RefreshTokenRecord {
  return {
    hash,
    familyId: `family-${hash}`,
    identityUid: PERSON,
    clientId: "platform-cli",
    keyId: "key-1",
    familyStartTime: T0,
    issueTime: T0,
    usedTime: 0,
    ...over,
  };
}

/** A successor of old issued at `at`. */
const successor = (hash: string, at: number) => (old: RefreshTokenRecord) => ({ ...old, hash, issueTime: at, usedTime: 0 });
const never = () => false;

/** Conformance of the sign-in flows and refresh tokens parts. */
export function signInConformance(getStore: () => Store): void {
  describe("sign-in flows", () => flowContracts(getStore));
  describe("refresh tokens", () => refreshContracts(getStore));
}

function flowContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(() => {
    store = getStore();
  });

  test("get returns exactly what create stored until it expires, then null; each hash finds its flow", async () => {
    const device = flow("flow-device", {
      kind: "device",
      clientId: "platform-cli",
      redirectUri: "",
      clientState: "",
      codeChallenge: "",
      deviceCodeHash: "dev-hash",
      userCodeHash: "user-hash",
      lastPollTime: T0 + 5,
      scope: { idp: "idp-uid", org: "acme", provider: "dex" },
      clientAddress: "2001:db8:1:2::",
      upstreamProvider: "op:dex",
      upstreamStateHash: "up-hash",
      upstreamNonce: "nonce",
      upstreamVerifier: "verifier",
      browserBindingHash: "cookie-hash",
    });
    await store.signInFlows.create(device, 10, T0);
    assert.deepEqual(await store.signInFlows.get(device.id, T0), device);
    assert.deepEqual(await store.signInFlows.get(device.id, device.expireTime - 1), device);
    assert.equal(await store.signInFlows.get(device.id, device.expireTime), null, "expired at its expireTime");
    assert.equal(await store.signInFlows.get("absent", T0), null);
    assert.deepEqual(await store.signInFlows.byDeviceCode("dev-hash", T0), device);
    assert.deepEqual(await store.signInFlows.byUserCode("user-hash", T0), device);
    assert.deepEqual(await store.signInFlows.byUpstreamState("up-hash", T0), device);
    assert.equal(await store.signInFlows.byUserCode("user-hash", device.expireTime), null);
    assert.equal(await store.signInFlows.byUserCode("dev-hash", T0), null, "a hash finds a flow only in its own column");
    assert.equal(await store.signInFlows.byCode("", T0), null, "an empty hash finds nothing");
    assert.equal(await store.signInFlows.byDeviceCode("", T0), null);
  });

  test("create refuses an address holding maxPerAddress unexpired flows, and stores nothing", async () => {
    for (const id of ["f1", "f2", "f3"]) await store.signInFlows.create(flow(id), 3, T0);
    await assert.rejects(async () => store.signInFlows.create(flow("f4"), 3, T0), ResourceExhaustedError);
    assert.equal(await store.signInFlows.get("f4", T0), null);
    await store.signInFlows.create(flow("other", { clientAddress: "192.0.2.2" }), 3, T0);
    // Once the address's flows expire they no longer count.
    const later = T0 + MINUTES_10;
    await store.signInFlows.create(flow("f5", { createTime: later, expireTime: later + MINUTES_10 }), 3, later);
    assert.equal((await store.signInFlows.get("f5", later))?.id, "f5");
  });

  test("create refuses a taken id or hash of an unexpired flow, and takes one an expired flow held", async () => {
    await store.signInFlows.create(flow("a", { userCodeHash: "code-1" }), 10, T0);
    await assertAlreadyExists(async () => store.signInFlows.create(flow("a"), 10, T0), "sign-in flow", "");
    await assertAlreadyExists(async () => store.signInFlows.create(flow("b", { userCodeHash: "code-1" }), 10, T0), "sign-in flow", "");
    assert.equal(await store.signInFlows.get("b", T0), null);
    const later = T0 + MINUTES_10;
    const again = flow("c", { userCodeHash: "code-1", createTime: later, expireTime: later + MINUTES_10 });
    await store.signInFlows.create(again, 10, later);
    assert.deepEqual(await store.signInFlows.byUserCode("code-1", later), again);
    await store.signInFlows.create(flow("a", { createTime: later, expireTime: later + 1 }), 10, later);
    assert.equal((await store.signInFlows.get("a", later))?.expireTime, later + 1);
  });

  test("advance applies its changes only from the stored status; of concurrent advances exactly one wins", async () => {
    const f = flow("flow-1");
    await store.signInFlows.create(f, 10, T0);
    assert.equal(await store.signInFlows.advance(f.id, "signed-in", { status: "consumed" }), false);
    assert.deepEqual(await store.signInFlows.get(f.id, T0), f, "a failed compare changes nothing");
    const signedIn = {
      status: "signed-in",
      identityUid: PERSON,
      codeHash: "our-code",
      scope: { idp: "i", org: "o", provider: "p" },
    } as const;
    assert.equal(await store.signInFlows.advance(f.id, "pending", signedIn), true);
    assert.deepEqual(await store.signInFlows.get(f.id, T0), { ...f, ...signedIn });
    assert.deepEqual(await store.signInFlows.byCode("our-code", T0), { ...f, ...signedIn });
    const wins = await Promise.all(Array.from({ length: 8 }, () => store.signInFlows.advance(f.id, "signed-in", { status: "consumed" })));
    assert.equal(wins.filter(Boolean).length, 1);
    assert.equal((await store.signInFlows.byCode("our-code", T0))?.status, "consumed", "byCode answers whatever the status");
    assert.equal(await store.signInFlows.advance("absent", "pending", { status: "denied" }), false);
    assert.equal(await store.signInFlows.advance(f.id, "consumed", {}), true, "no changes: only the compare");
  });

  test("advance refuses a hash another flow holds", async () => {
    await store.signInFlows.create(flow("x", { upstreamStateHash: "s1" }), 10, T0);
    await store.signInFlows.create(flow("y"), 10, T0);
    await assertAlreadyExists(async () => store.signInFlows.advance("y", "pending", { upstreamStateHash: "s1" }), "sign-in flow", "");
    assert.equal((await store.signInFlows.get("y", T0))?.upstreamStateHash, "");
    assert.equal(
      await store.signInFlows.advance("x", "pending", { upstreamStateHash: "s1", upstreamNonce: "n" }),
      true,
      "its own hash again",
    );
  });

  test("deleteExpired deletes at most limit expired flows and no live one", async () => {
    for (let i = 0; i < 5; i++) await store.signInFlows.create(flow(`old-${i}`, { expireTime: T0 + i }), 100, T0);
    await store.signInFlows.create(flow("live"), 100, T0);
    assert.equal(await store.signInFlows.deleteExpired(T0 + 10, 3), 3);
    assert.equal(await store.signInFlows.deleteExpired(T0 + 10, 3), 2);
    assert.equal(await store.signInFlows.deleteExpired(T0 + 10, 3), 0);
    assert.equal((await store.signInFlows.get("live", T0 + 10))?.id, "live");
  });
}

function refreshContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(async () => {
    store = getStore();
    await store.identities.create(identity(PERSON, null, "person"));
    await store.identities.create(identity(OTHER, null, "other"));
  });

  test("start stores the family's first token; get returns it, null when absent", async () => {
    const t = token("h1");
    await store.refreshTokens.start(t, 50);
    assert.deepEqual(await store.refreshTokens.get("h1"), t);
    assert.equal(await store.refreshTokens.get("absent"), null);
    await assertAlreadyExists(async () => store.refreshTokens.start(token("h1", { familyId: "x" }), 50), "refresh token", "");
    await assertNotFound(
      async () => store.refreshTokens.start(token("h2", { identityUid: "0".repeat(40) }), 50),
      "identity",
      "0".repeat(40),
    );
    assert.equal(await store.refreshTokens.get("h2"), null);
  });

  test("start keeps at most maxFamilies families of an identity, dropping the least recently used", async () => {
    for (let i = 0; i < 3; i++) await store.refreshTokens.start(token(`h${i}`, { familyStartTime: T0 + i, issueTime: T0 + i }), 3);
    await store.refreshTokens.start(token("o1", { identityUid: OTHER }), 3);
    await store.refreshTokens.rotate("h1", successor("h1-next", T0 + 10), never);
    await store.refreshTokens.rotate("h0", successor("h0-next", T0 + 11), never);
    await store.refreshTokens.start(token("h3", { familyStartTime: T0 + 20, issueTime: T0 + 20 }), 3);
    assert.equal(await store.refreshTokens.get("h2"), null, "the family unused longest goes");
    for (const h of ["h0", "h0-next", "h1", "h1-next", "h3", "o1"]) assert.equal((await store.refreshTokens.get(h))?.hash, h);
    await store.refreshTokens.start(token("h4", { familyStartTime: T0 + 21, issueTime: T0 + 21 }), 3);
    assert.equal(await store.refreshTokens.get("h1"), null, "with every token of it");
    assert.equal(await store.refreshTokens.get("h1-next"), null);
    assert.equal((await store.refreshTokens.get("o1"))?.hash, "o1", "another identity's families do not count");
  });

  test("rotate marks the token used and stores its successor; the successor rotates in turn", async () => {
    const first = token("r1");
    await store.refreshTokens.start(first, 50);
    const result = await store.refreshTokens.rotate("r1", successor("r2", T0 + 100), never);
    const next = { ...first, hash: "r2", issueTime: T0 + 100 };
    assert.deepEqual(result, { kind: "rotated", previous: { ...first, usedTime: T0 + 100 }, next });
    assert.deepEqual(await store.refreshTokens.get("r1"), { ...first, usedTime: T0 + 100 });
    assert.deepEqual(await store.refreshTokens.get("r2"), next);
    assert.equal((await store.refreshTokens.rotate("r2", successor("r3", T0 + 200), never)).kind, "rotated");
    assert.deepEqual(await store.refreshTokens.rotate("absent", successor("x", T0), never), { kind: "invalid" });
  });

  test("rotate of a used token deletes its whole family, the newest token included", async () => {
    await store.refreshTokens.start(token("r1"), 50);
    await store.refreshTokens.start(token("other-family"), 50);
    await store.refreshTokens.rotate("r1", successor("r2", T0 + 1), never);
    await store.refreshTokens.rotate("r2", successor("r3", T0 + 2), never);
    assert.deepEqual(await store.refreshTokens.rotate("r1", successor("r4", T0 + 3), never), { kind: "reused", familyId: "family-r1" });
    for (const h of ["r1", "r2", "r3", "r4"]) assert.equal(await store.refreshTokens.get(h), null, h);
    assert.deepEqual(await store.refreshTokens.rotate("r3", successor("r5", T0 + 4), never), { kind: "invalid" });
    assert.equal((await store.refreshTokens.get("other-family"))?.usedTime, 0, "another family is untouched");
  });

  test("rotate of an expired token is invalid and changes nothing; reuse is found before expiry", async () => {
    await store.refreshTokens.start(token("r1"), 50);
    assert.deepEqual(await store.refreshTokens.rotate("r1", successor("r2", T0 + 1), () => true), { kind: "invalid" });
    assert.deepEqual(await store.refreshTokens.get("r1"), token("r1"));
    assert.equal(await store.refreshTokens.get("r2"), null);
    await store.refreshTokens.rotate("r1", successor("r2", T0 + 1), never);
    assert.equal((await store.refreshTokens.rotate("r1", successor("r3", T0 + 2), () => true)).kind, "reused");
    assert.equal(await store.refreshTokens.get("r2"), null);
  });

  test("of concurrent rotations of one token one rotates, a later one finds it reused, and the family is gone", async () => {
    await store.refreshTokens.start(token("r1"), 50);
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => store.refreshTokens.rotate("r1", successor(`next-${i}`, T0 + 1 + i), never)),
    );
    const kinds = results.map((r) => r.kind);
    assert.equal(kinds.filter((k) => k === "rotated").length, 1);
    assert.ok(kinds.includes("reused"), "a later one finds the token used");
    // Once the family is deleted, those still later find nothing.
    assert.equal(kinds.filter((k) => k === "rotated" || k === "reused" || k === "invalid").length, 6);
    assert.equal(await store.refreshTokens.get("r1"), null);
    for (let i = 0; i < 6; i++) assert.equal(await store.refreshTokens.get(`next-${i}`), null);
  });

  test("rotate keeps the family's newest USED_REFRESH_TOKENS_KEPT used tokens", async () => {
    await store.refreshTokens.start(token("t0"), 50);
    const n = USED_REFRESH_TOKENS_KEPT + 4;
    for (let i = 0; i < n; i++) await store.refreshTokens.rotate(`t${i}`, successor(`t${i + 1}`, T0 + i + 1), never);
    const kept: string[] = [];
    for (let i = 0; i <= n; i++) if (await store.refreshTokens.get(`t${i}`)) kept.push(`t${i}`);
    assert.deepEqual(
      kept,
      Array.from({ length: USED_REFRESH_TOKENS_KEPT + 1 }, (_, i) => `t${n - USED_REFRESH_TOKENS_KEPT + i}`),
    );
    assert.equal((await store.refreshTokens.rotate(`t${n - 1}`, successor("late", T0 + 999), never)).kind, "reused");
  });

  test("revokeFamily, revokeKey and revokeIdentity delete exactly their tokens; deleting the identity deletes its tokens", async () => {
    await store.refreshTokens.start(token("a1", { keyId: "key-1" }), 50);
    await store.refreshTokens.rotate("a1", successor("a2", T0 + 1), never);
    await store.refreshTokens.start(token("b1", { keyId: "key-2" }), 50);
    await store.refreshTokens.start(token("c1", { keyId: "key-2", identityUid: OTHER }), 50);
    await store.refreshTokens.start(token("d1", { keyId: "key-3" }), 50);
    assert.equal(await store.refreshTokens.revokeFamily("family-a1"), 2);
    assert.equal(await store.refreshTokens.revokeFamily("family-a1"), 0);
    assert.equal(await store.refreshTokens.revokeKey("key-2"), 2);
    assert.equal(await store.refreshTokens.get("b1"), null);
    assert.equal(await store.refreshTokens.get("c1"), null);
    assert.equal((await store.refreshTokens.get("d1"))?.hash, "d1");
    await store.refreshTokens.start(token("e1", { identityUid: OTHER }), 50);
    assert.equal(await store.refreshTokens.revokeIdentity(PERSON), 1);
    assert.equal(await store.refreshTokens.get("d1"), null);
    assert.equal((await store.refreshTokens.get("e1"))?.hash, "e1");
    await store.identities.delete(OTHER);
    assert.equal(await store.refreshTokens.get("e1"), null, "gone with its identity");
  });

  test("deleteExpired deletes at most limit tokens past the idle or the absolute lifetime", async () => {
    await store.refreshTokens.start(token("idle", { issueTime: T0 + 10, familyStartTime: T0 + 10 }), 50);
    await store.refreshTokens.start(token("old", { issueTime: T0 + 500, familyStartTime: T0 + 20 }), 50);
    await store.refreshTokens.start(token("live", { issueTime: T0 + 500, familyStartTime: T0 + 500 }), 50);
    assert.equal(await store.refreshTokens.deleteExpired(T0 + 100, T0 + 100, 1), 1);
    assert.equal(await store.refreshTokens.deleteExpired(T0 + 100, T0 + 100, 5), 1);
    assert.equal(await store.refreshTokens.deleteExpired(T0 + 100, T0 + 100, 5), 0);
    assert.equal(await store.refreshTokens.get("idle"), null);
    assert.equal(await store.refreshTokens.get("old"), null);
    assert.equal((await store.refreshTokens.get("live"))?.hash, "live");
  });

  test("a rotation inside a transaction rolls back with it", async () => {
    await store.refreshTokens.start(token("r1"), 50);
    await assert.rejects(
      store.transaction(async (tx) => {
        assert.equal((await tx.refreshTokens.rotate("r1", successor("r2", T0 + 1), never)).kind, "rotated");
        throw new Error("abort");
      }),
      /abort/,
    );
    assert.deepEqual(await store.refreshTokens.get("r1"), token("r1"));
    assert.equal(await store.refreshTokens.get("r2"), null);
  });
}
