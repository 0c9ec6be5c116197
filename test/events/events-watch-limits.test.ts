/**
 * Issue 30, item 3: WatchEvents streams bounded per tenant and tied to their
 * token. Identities are free, so 8 watches per identity bounded no tenant: one
 * organization's identities took every watch of the process. Now the
 * identities of one organization share PLATFORM_EVENT_WATCHES_PER_ORG. And a
 * watch outlived what opened it: after `rotate-key --retire` the stolen token
 * got 401 on every new call while its open watch streamed on for up to an
 * hour; exp was never checked again; a deleted identity's watch went on for
 * 30 s. Now a stream ends with UNAUTHENTICATED at its token's exp, when its
 * key is retired (by another process: the poll re-reads the key ring) or its
 * identity is deleted, and with OK when the caller may see less. Every
 * protocol WatchEvents is served on; run on SQLite and PostgreSQL.
 */
import assert from "node:assert/strict";
import { createPrivateKey } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { SignJWT, type JWK } from "jose";
import { eventType, type FeedPosition } from "../../src/domain/events.js";
import { WATCH_LIMIT } from "../../src/services/events/watch.js";
import { assertRestError, within } from "../support/assertions.js";
import { decode } from "../support/forge.js";
import { platformCli } from "../support/platform-cli.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { mintAdminToken, rest, setDefaultToken, startTestServer, type TestServer } from "../support/server.js";
import { openWatch, WATCH_PROTOCOLS, type StreamEnd, type Watch, type WatchProtocol } from "../support/watch-clients.js";

const createOrg = async (srv: TestServer, name: string) => (await ok(rest(srv.url, "POST", "/iam/v2beta1/groups", { name }))).uid as string;

/** A watch is served once its first message has arrived (the watches here start at the feed's start: an event). */
const served = (w: Watch, what: string) => within(30_000, w.received, what);

/** From the feed's start: the events of the watched groups' creation are the first messages, whatever the version. */
const FROM_START = { startTimeMs: 0 };

/** How a watch ends (it is refused, or it is expected to end on its own), with the events it had not handed out. */
async function ending(w: Watch, what: string): Promise<StreamEnd & { events: number }> {
  const { rest: events, end } = await within(30_000, w.end(), what);
  return { ...end, events: events.length };
}

/** Refused with WATCH_LIMIT at scope, before the stream started (REST: a 429, not a last line). */
function assertWatchLimit(protocol: WatchProtocol, end: StreamEnd & { events: number }, scope: string, limit: number): void {
  assert.deepEqual([end.code, end.reason, end.events], [8, WATCH_LIMIT, 0], JSON.stringify(end));
  assert.deepEqual([end.metadata?.scope, end.metadata?.limit], [scope, String(limit)]);
  if (protocol.startsWith("rest")) assert.deepEqual([end.httpStatus, end.errorLine], [429, false]);
}

describe("WatchEvents is bounded per organization, per identity and per process", () => {
  let srv: TestServer;
  let viewer: string;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_EVENT_WATCHES_PER_IDENTITY: "2", PLATFORM_EVENT_WATCHES_PER_ORG: "3" } });
    viewer = await builtinRole(srv, "viewer");
  });
  after(() => srv.close());

  for (const protocol of WATCH_PROTOCOLS) {
    test(`${protocol}: the 4th watch of an organization's identities is refused (scope organization); another organization's is served`, async () => {
      const orgA = await createOrg(srv, `${protocol} tenant`);
      const [a1, a2, a3] = await Promise.all(["watcher a1", "watcher a2", "watcher a3"].map((n) => createCaller(srv, orgA, n, viewer)));
      const orgB = await createOrg(srv, `${protocol} neighbour`);
      const b1 = await createCaller(srv, orgB, "watcher b1", viewer);
      const open = [a1!, a1!, a2!].map((c) => openWatch(protocol, srv.url, c.token, FROM_START));
      for (const w of open) await served(w, "a watch of the organization");
      // a3 has none open, but its organization has 3.
      assertWatchLimit(protocol, await ending(openWatch(protocol, srv.url, a3!.token, FROM_START), "a3's refusal"), "organization", 3);
      // a1 has its own 2: the narrowest bound is the one named.
      assertWatchLimit(protocol, await ending(openWatch(protocol, srv.url, a1!.token, FROM_START), "a1's refusal"), "identity", 2);
      const neighbour = openWatch(protocol, srv.url, b1.token, FROM_START);
      await served(neighbour, "the other organization's watch");
      // The administrator belongs to no organization.
      const admin = openWatch(protocol, srv.url, srv.adminToken, FROM_START);
      await served(admin, "the administrator's watch");
      for (const w of [...open, neighbour, admin]) w.cancel();
    });
  }
});

describe("WatchEvents is bounded per process", () => {
  let srv: TestServer;
  let caller: Caller;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_EVENT_WATCHES: "2" } });
    caller = await createCaller(srv, await createOrg(srv, "process bound"), "late", await builtinRole(srv, "viewer"));
  });
  after(() => srv.close());

  for (const protocol of ["grpc-js", "connect-h1", "rest-h1"] as const) {
    test(`${protocol}: the 3rd watch of the process is refused (scope process)`, async () => {
      const open = await servedTogether(protocol, srv, 2);
      assertWatchLimit(protocol, await ending(openWatch(protocol, srv.url, caller.token, FROM_START), "the refusal"), "process", 2);
      for (const w of open) w.cancel();
    });
  }
});

/**
 * n administrator watches served at once: the slots of watches just hung up
 * come back when the server sees the hang-ups, so until then some are refused
 * (WATCH_LIMIT) and all are tried again.
 */
async function servedTogether(protocol: WatchProtocol, srv: TestServer, n: number): Promise<Watch[]> {
  for (;;) {
    const watches = Array.from({ length: n }, () => openWatch(protocol, srv.url, srv.adminToken, FROM_START));
    const outcomes = await Promise.all(
      watches.map((w) =>
        within(30_000, Promise.race([w.received.then(() => true), w.end().then(() => false)]), "a watch served or refused"),
      ),
    );
    if (outcomes.every(Boolean)) return watches;
    for (const w of watches) w.cancel();
    await Promise.all(watches.map((w) => w.end()));
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A token for subject signed with the server's newest key, as the server mints them but expiring in seconds. */
async function shortLivedToken(srv: TestServer, subject: string, seconds: number): Promise<{ token: string; expiresAt: number }> {
  const store = await srv.openStore();
  try {
    const newest = (await store.keys.signingKeys()).at(-1)!;
    const key = createPrivateKey({ key: JSON.parse(newest.privateJwk) as JWK & { kty: string }, format: "jwk" });
    const iat = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: "ES256", kid: newest.kid, typ: "at+jwt" })
      .setIssuer(srv.server.tokens.issuer)
      .setAudience(srv.server.tokens.audience)
      .setSubject(subject)
      .setIssuedAt(iat)
      .setExpirationTime(iat + seconds)
      .sign(key);
    return { token, expiresAt: (iat + seconds) * 1000 };
  } finally {
    await store.close();
  }
}

/** One watch per protocol of the org's events as token, each served (its first message arrived). */
async function watchesOnEveryProtocol(srv: TestServer, token: string, org: string): Promise<[WatchProtocol, Watch][]> {
  const watches = WATCH_PROTOCOLS.map(
    (p) => [p, openWatch(p, srv.url, token, { descendantsOf: org, ...FROM_START })] as [WatchProtocol, Watch],
  );
  for (const [p, w] of watches) await served(w, `the ${p} watch`);
  return watches;
}

/** Ended with UNAUTHENTICATED after it started (REST: 200, then a last error line). */
function assertUnauthenticated(protocol: WatchProtocol, end: StreamEnd): void {
  assert.deepEqual([end.code, end.reason], [16, "UNAUTHENTICATED"], `${protocol}: ${JSON.stringify(end)}`);
  if (protocol.startsWith("rest")) assert.deepEqual([end.httpStatus, end.errorLine], [200, true], protocol);
}

describe("a WatchEvents stream lasts no longer than its token, identity and grants", () => {
  let srv: TestServer;
  let viewer: string;
  let org: string;
  before(async () => {
    // Heartbeats often, for the resumed watch below to show how far it has read.
    srv = await startTestServer({ env: { PLATFORM_EVENT_WATCH_HEARTBEAT_MS: "300" } });
    viewer = await builtinRole(srv, "viewer");
    org = await createOrg(srv, "watched");
  });
  after(() => srv.close());

  test("at its token's exp the stream ends with UNAUTHENTICATED (the authenticator's expiry refusal)", async () => {
    const caller = await createCaller(srv, org, "short-lived", viewer);
    const { token, expiresAt } = await shortLivedToken(srv, caller.uid, 8);
    const watches = await watchesOnEveryProtocol(srv, token, org);
    for (const [protocol, w] of watches) {
      assertUnauthenticated(protocol, await ending(w, `${protocol}: the end at exp`));
      assert.ok(Date.now() >= expiresAt, `${protocol} ended before its token expired`);
    }
  });

  test("when its identity is deleted, its streams end with UNAUTHENTICATED", async () => {
    const caller = await createCaller(srv, org, "deleted", viewer);
    const watches = await watchesOnEveryProtocol(srv, caller.token, org);
    await ok(rest(srv.url, "DELETE", `/iam/v2beta1/identities/${caller.uid}`));
    for (const [protocol, w] of watches) assertUnauthenticated(protocol, await ending(w, `${protocol}: the end`));
  });

  test("when the caller's role binding is deleted by another process, its streams end with OK; resumed, they show none of the org's events", async () => {
    const identity = await ok(
      rest(srv.url, "POST", `/iam/v2beta1/identities/${org}`, {
        name: "demoted",
        claimMatch: { issuer: "https://ci.example", subject: "d" },
      }),
    );
    const binding = await ok(rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${org}`, { identityUid: identity.uid, roleUid: viewer }));
    const caller: Caller = { uid: identity.uid, token: (await srv.server.tokens.mint(identity.uid)).token };
    const watches = await watchesOnEveryProtocol(srv, caller.token, org);
    const seen = (await ok(rest(srv.url, "POST", `/iam/v2beta1/groups/${org}`, { name: "seen" }))).uid;
    const cursors: string[] = [];
    for (const [protocol, w] of watches) {
      // The org's earlier events first (the watches start at the feed's start), then this one.
      for (;;) {
        const [event] = await within(30_000, w.take(1), `${protocol}: the new event`);
        if (event!.subject !== seen) continue;
        cursors.push(event!.cursor);
        break;
      }
    }
    const other = await startTestServer({ dataDir: srv.dataDir, databaseUrl: srv.databaseUrl || undefined });
    try {
      await ok(
        rest(other.url, "DELETE", `/iam/v2beta1/roleBindings/${binding.uid}`, undefined, { authorization: `Bearer ${other.adminToken}` }),
      );
    } finally {
      await other.close();
    }
    // Not even the binding's own deleted event: the stream ends before it reads on.
    for (const [protocol, w] of watches) {
      const end = await ending(w, `${protocol}: the end`);
      assert.deepEqual([end.code, end.events], [0, 0], `${protocol}: ${JSON.stringify(end)}`);
    }
    // Resumed from the last cursor: the new stream applies the caller's grants now, which show nothing of the org.
    const resumed = openWatch("rest-h1", srv.url, caller.token, { cursor: cursors.at(-1)!, descendantsOf: org });
    const hidden = (await ok(rest(srv.url, "POST", `/iam/v2beta1/groups/${org}`, { name: "hidden" }))).uid;
    const listed = await ok(rest(srv.url, "GET", `/events/v1/events?uidp.ids=${hidden}&type_prefix=${eventType("group", "created")}`));
    const hiddenAt = srv.server.eventCursors.decode("cursor", listed.events[0].cursor);
    // A heartbeat at or past the hidden event's place: the stream has read past it without sending it.
    for (let at: FeedPosition | null = null; at === null || earlier(at, hiddenAt); ) {
      const [beat] = await within(30_000, resumed.heartbeats(1), "a heartbeat past the hidden event");
      at = srv.server.eventCursors.decode("cursor", beat!.cursor);
    }
    resumed.cancel();
    assert.deepEqual((await resumed.end()).rest, []);
  });

  // Last: the retired key signed the administrator's token too.
  test("`rotate-key --retire` (another process) ends the streams of the retired key's tokens with UNAUTHENTICATED", async () => {
    const caller = await createCaller(srv, org, "stolen", viewer);
    const watches = await watchesOnEveryProtocol(srv, caller.token, org);
    const kid = decode(caller.token).header.kid!;
    const run = await platformCli(srv, ["rotate-key", "--retire", kid]);
    assert.equal(run.code, 0, run.stderr);
    for (const [protocol, w] of watches) assertUnauthenticated(protocol, await ending(w, `${protocol}: the end`));
    assertRestError(await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, as(caller)), 401, 16, "UNAUTHENTICATED");
    setDefaultToken(srv.port, await mintAdminToken(srv.server));
  });
});

/** Whether a comes before b in the feed. */
function earlier(a: FeedPosition, b: FeedPosition): boolean {
  return a.txid < b.txid || (a.txid === b.txid && a.seq < b.seq);
}
