/**
 * Issue 23 §2, the hard part: on PostgreSQL, concurrent transactions commit
 * out of sequence order, so a feed read as "after the highest position seen"
 * would skip an event that commits late with a smaller sequence. Here many
 * writers create groups through two server processes at once while a reader
 * pages ListEvents (alternating between the processes) with the cursor it
 * was given; every created group's event must arrive exactly once, and in
 * no other order than the feed's (a cursor never goes back). The same on
 * SQLite with two worker processes sharing the file. A subscription of the
 * organization is delivered meanwhile by both processes' own deliverers:
 * each event reaches its sink exactly once, verified.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { startEventReceiver, type EventReceiver, type ReceivedDelivery } from "../support/event-receiver.js";
import { freshPgDatabase, pgAvailable } from "../support/pg-cluster.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";
import { rest } from "../support/server.js";

const WRITERS = 16;
const CREATES_PER_WRITER = 25;
/** A liveness bound, not a timing: the reader gives up only if events stop arriving altogether. */
const STALL_MS = 60_000;

interface Setup {
  servers: ServeProcess[];
  token: string;
  cleanup: () => Promise<void>;
}

/**
 * Both processes deliver subscriptions, to the loopback receiver, looking for due ones every 100 ms; one base
 * URL, so that a token of one is good on the other.
 */
const DELIVERING = {
  PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true",
  PLATFORM_DELIVERY_POLL_MS: "100",
  PLATFORM_BASE_URL: "http://platform-api.feed.invalid",
  LOG_LEVEL: "info",
};

async function twoPostgresProcesses(): Promise<Setup> {
  const env = { PLATFORM_DATABASE_URL: await freshPgDatabase(), ...DELIVERING };
  const dirs = [mkdtempSync(join(tmpdir(), "platform-feed-a-")), mkdtempSync(join(tmpdir(), "platform-feed-b-"))];
  const servers = [
    await startServeProcess({ PLATFORM_DATA_DIR: dirs[0]!, ...env }),
    await startServeProcess({ PLATFORM_DATA_DIR: dirs[1]!, ...env }),
  ];
  const token = await servers[0]!.adminToken();
  return {
    servers,
    token,
    cleanup: async () => {
      for (const s of servers) assert.equal((await s.stop()).code, 0, s.output());
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

async function twoSqliteWorkers(): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), "platform-feed-sqlite-"));
  // Two worker processes behind one port, sharing the database file.
  const server = await startServeProcess({ PLATFORM_DATA_DIR: dir, PLATFORM_WORKERS: "2", ...DELIVERING });
  const token = await server.adminToken();
  return {
    servers: [server],
    token,
    cleanup: async () => {
      // The primary (the child spawned): a worker stopped alone is restarted.
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs the writers and the reader; the reader's count of each created group's event. */
async function writeAndFollow(
  setup: Setup,
): Promise<{ created: string[]; seen: Map<string, number>; positions: string[]; delivered: ReceivedDelivery[] }> {
  const { servers, token } = setup;
  const auth = { authorization: `Bearer ${token}` };
  const org = (await rest(servers[0]!.url, "POST", "/iam/v2beta1/groups", { name: "feed org" }, auth)).body as { uid: string };
  const { issuer } = (await rest(servers[0]!.url, "GET", "/.well-known/openid-configuration")).body as { issuer: string };
  const receiver: EventReceiver = await startEventReceiver({
    jwksUrl: `${servers[1 % servers.length]!.url}/.well-known/jwks.json`,
    issuer,
  });
  const sink = receiver.sink("feed");
  const subscription = await rest(
    servers[1 % servers.length]!.url,
    "POST",
    `/events/v1/subscriptions/${org.uid}`,
    { sink: sink.url, types: ["api.platform.iam.group.created"] },
    auth,
  );
  assert.equal(subscription.status, 200, JSON.stringify(subscription.body));
  sink.secret = subscription.body.secret as string;
  // Start from the feed's position now: the org's own event and earlier ones are behind it.
  let cursor = (
    await rest(servers[0]!.url, "GET", `/events/v1/events?start_time=${new Date(Date.now() + 3_600_000).toISOString()}`, undefined, auth)
  ).body.nextPageToken as string;
  const created: string[] = [];
  const seen = new Map<string, number>();
  const positions: string[] = [];
  let writing = true;
  const writers = Array.from({ length: WRITERS }, async (_, w) => {
    for (let i = 0; i < CREATES_PER_WRITER; i++) {
      const server = servers[(w + i) % servers.length]!;
      const res = await rest(server.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: `w${w} n${i}` }, auth);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      created.push(res.body.uid as string);
    }
  });
  const reader = (async () => {
    let read = 0;
    let lastProgress = Date.now();
    for (let round = 0; ; round++) {
      const server = servers[round % servers.length]!;
      const page = await rest(
        server.url,
        "GET",
        `/events/v1/events?page_size=50&type_prefix=api.platform.iam.group.created&uidp.children_of=${org.uid}&page_token=${cursor}`,
        undefined,
        auth,
      );
      assert.equal(page.status, 200, JSON.stringify(page.body));
      for (const e of page.body.events as { subject: string; cursor: string }[]) {
        seen.set(e.subject, (seen.get(e.subject) ?? 0) + 1);
        positions.push(e.cursor);
        read++;
        lastProgress = Date.now();
      }
      cursor = page.body.nextPageToken as string;
      if (!writing && read >= created.length && (page.body.events as unknown[]).length === 0) return;
      assert.ok(Date.now() - lastProgress < STALL_MS, `no event for ${STALL_MS} ms: ${read} of ${created.length} read`);
      if ((page.body.events as unknown[]).length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  await Promise.all(writers);
  writing = false;
  await reader;
  try {
    // A liveness bound: the deliverers find the subscription within a poll and post one event after another.
    let delivered = await sink.waitForDeliveries(created.length, STALL_MS * 2);
    // The organization's own event too, when it fell in the subscription's first millisecond: one more to wait for.
    if (delivered.some((d) => d.headers["ce-subject"] === org.uid))
      delivered = await sink.waitForDeliveries(created.length + 1, STALL_MS * 2);
    return { created, seen, positions, delivered: delivered.filter((d) => d.headers["ce-subject"] !== org.uid) };
  } finally {
    await receiver.close();
  }
}

function assertExactlyOnce(result: {
  created: string[];
  seen: Map<string, number>;
  positions: string[];
  delivered: ReceivedDelivery[];
}): void {
  const missing = result.created.filter((uid) => !result.seen.has(uid));
  const repeated = [...result.seen].filter(([, n]) => n > 1).map(([uid]) => uid);
  const unexpected = [...result.seen.keys()].filter((uid) => !result.created.includes(uid));
  assert.equal(result.created.length, WRITERS * CREATES_PER_WRITER);
  assert.deepEqual({ missing, repeated, unexpected }, { missing: [], repeated: [], unexpected: [] });
  assert.equal(new Set(result.positions).size, result.positions.length, "every event has its own position");
  // Delivered: every created group's event once, verified (bearer token against the JWKS, webhook signature).
  const bySubject = new Map<string, number>();
  for (const d of result.delivered) {
    assert.deepEqual([d.tokenError, d.signatureError], ["", ""], "delivery verified");
    const subject = String(d.headers["ce-subject"]);
    bySubject.set(subject, (bySubject.get(subject) ?? 0) + 1);
  }
  assert.deepEqual(
    {
      undelivered: result.created.filter((uid) => !bySubject.has(uid)),
      twice: [...bySubject].filter(([, n]) => n > 1).map(([uid]) => uid),
    },
    { undelivered: [], twice: [] },
  );
  assert.equal(result.delivered.length, result.created.length);
}

describe("the change feed never skips or repeats an event under concurrent writers in two processes", () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of cleanups) await c();
  });

  test("PostgreSQL, two server processes", { skip: pgAvailable() ? false : "PostgreSQL is not installed" }, async (t) => {
    const setup = await twoPostgresProcesses();
    cleanups.push(setup.cleanup);
    const result = await writeAndFollow(setup);
    t.diagnostic(`${result.created.length} creates by ${WRITERS} writers through 2 processes; ${result.seen.size} events read once each`);
    assertExactlyOnce(result);
  });

  test("SQLite, two worker processes sharing the file", async (t) => {
    const setup = await twoSqliteWorkers();
    cleanups.push(setup.cleanup);
    const result = await writeAndFollow(setup);
    t.diagnostic(`${result.created.length} creates by ${WRITERS} writers through 2 workers; ${result.seen.size} events read once each`);
    assertExactlyOnce(result);
  });
});
