import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { createRegistry } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { EventSchema, EventsService, type Event } from "../../gen/platformapi/events/v1/events_pb.js";
import { responseJson } from "../../src/codec/json.js";
import { eventType, type EventRecord, type FeedPosition } from "../../src/domain/events.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { EVENT_CURSOR_EXPIRED, eventMessage } from "../../src/services/events/events.js";
import { WATCH_LIMIT } from "../../src/services/events/watch.js";
import { CONTRACT_FILES } from "../../src/services/index.js";
import type { EventPage, EventQuery, EventScan, EventStore } from "../../src/store/event-store.js";
import type { Store } from "../../src/store/store.js";
import { within } from "../support/assertions.js";
import { builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";
import { openWatch, WATCH_PROTOCOLS, watchRequest } from "../support/watch-clients.js";

/**
 * WatchEvents end to end on every protocol the one port speaks: grpc-js,
 * connect-node's Connect, gRPC-Web and gRPC over HTTP/1.1 and h2c, and REST
 * (NDJSON) over HTTP/1.1 and h2c, through the clients of
 * test/support/watch-clients.ts (heartbeats are kept apart from events).
 */

// ---------------------------------------------------------------------------
// The streaming plumbing, over a feed held in memory (an EventStore injected
// into the real server's store), so every ending can be arranged.

/** An EventStore in memory: SQLite's ordering (txid 0, seq in commit order), with failures and pruning on demand. */
class MemoryFeed implements EventStore {
  readonly records: EventRecord[] = [];
  /** Reads served so far (how far ahead of its client a stream has read). */
  reads = 0;
  /** The next read after this many more fails (an internal error). */
  failAfterReads = Infinity;
  private pruned = 0n;

  add(groupUid: string, n = 1): EventRecord[] {
    const added: EventRecord[] = [];
    for (let i = 0; i < n; i++) {
      const seq = BigInt(this.records.length + 1);
      const record: EventRecord = {
        id: randomUUID(),
        kind: "group",
        type: eventType("group", "updated"),
        subject: groupUid,
        groupUid,
        time: Date.now(),
        data: JSON.stringify({ actor: { subject: "" }, requestId: `r${seq}`, body: { uid: groupUid, n: Number(seq) } }),
        position: { txid: 0n, seq },
      };
      this.records.push(record);
      added.push(record);
    }
    return added;
  }

  /** Forgets every event up to and including seq: cursors at or before it are expired. */
  pruneThrough(seq: bigint): void {
    this.pruned = seq;
  }

  async append(): Promise<void> {
    throw new Error("the memory feed is written by the test");
  }

  async prune(): Promise<number> {
    return 0;
  }

  async scan(after: FeedPosition | null, limit: number): Promise<EventScan> {
    const horizon = { txid: 0n, seq: BigInt(this.records.length) };
    if (after === null) return { events: [], resume: horizon };
    const events = this.records.filter((r) => r.position.seq > after.seq).slice(0, limit);
    return { events, resume: events.length === limit ? events[limit - 1]!.position : horizon };
  }

  async read(q: EventQuery): Promise<EventPage> {
    this.reads++;
    if (this.failAfterReads-- <= 0) throw new Error("the feed failed");
    const horizon = { txid: 0n, seq: BigInt(this.records.length) };
    if (q.after !== null && this.pruned > 0n && q.after.seq <= this.pruned) return { events: [], resume: horizon, expired: true };
    const visible = (r: EventRecord) => {
      const tops = q.visible[r.kind];
      return tops === null || tops.some((top) => r.groupUid === top || r.groupUid.startsWith(`${top}/`));
    };
    const events = this.records
      .filter((r) => (q.after === null ? r.time >= (q.startTime ?? 0) : r.position.seq > q.after.seq))
      .filter((r) => r.type.startsWith(q.typePrefix) && visible(r))
      .slice(0, q.limit);
    const full = events.length === q.limit;
    return { events, resume: full ? events[events.length - 1]!.position : horizon, expired: false };
  }
}

/** The store with feed as its events part, as the real store will have one. */
function withFeed(store: Store, feed: EventStore): Store {
  return new Proxy(store, { get: (target, key, receiver) => (key === "events" ? feed : Reflect.get(target, key, receiver)) });
}

describe("WatchEvents plumbing (a memory feed behind the real server)", () => {
  let srv: TestServer;
  const feed = new MemoryFeed();
  let org = "";
  let caller: Caller;

  before(async () => {
    srv = await startTestServer({
      env: { PLATFORM_EVENT_WATCH_POLL_MS: "20", PLATFORM_EVENT_WATCHES_PER_IDENTITY: "2" },
      decorateStore: (store) => withFeed(store, feed),
    });
    org = (await ok(rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "watch plumbing" }))).uid;
    caller = await createCaller(srv, org, "watcher", await builtinRole(srv, "viewer"));
    feed.add(org, 3);
  });
  after(() => srv.close());

  for (const protocol of WATCH_PROTOCOLS) {
    describe(protocol, () => {
      test("streams the events there, then those committed next, in order, each once", async () => {
        const watch = openWatch(protocol, srv.url, srv.adminToken, { startTimeMs: 0 });
        const there = [...feed.records];
        const first = await within(30_000, watch.take(there.length), "the events there");
        assert.deepEqual(
          first.map((e) => e.id),
          there.map((r) => r.id),
        );
        assert.deepEqual(
          first.map((e) => e.cursor),
          there.map((r) => srv.server.eventCursors.encode(r.position)),
        );
        const more = feed.add(org, 2);
        const next = await within(30_000, watch.take(2), "the events committed after the watch began");
        assert.deepEqual(
          next.map((e) => e.id),
          more.map((r) => r.id),
        );
        // The REST line is the Event as ListEvents renders it (the same codec).
        if (protocol.startsWith("rest"))
          assert.deepEqual(
            next[0]!.json,
            JSON.parse(
              responseJson(
                EventSchema,
                eventMessage({ source: String(next[0]!.json.source), cursors: srv.server.eventCursors }, more[0]!),
                createRegistry(...CONTRACT_FILES),
              ),
            ),
          );
        else assert.equal(next[0]!.json.subject, org);
        watch.cancel();
      });

      test("resumes right after a cursor: no gap, no duplicate", async () => {
        const from = feed.records[1]!;
        const watch = openWatch(protocol, srv.url, srv.adminToken, { cursor: srv.server.eventCursors.encode(from.position) });
        const expected = feed.records.slice(2).map((r) => r.id);
        const got = await within(30_000, watch.take(expected.length), "the events after the cursor");
        assert.deepEqual(
          got.map((e) => e.id),
          expected,
        );
        watch.cancel();
      });

      test("a cursor this server never issued is INVALID_ARGUMENT before any event", async () => {
        const { rest: events, end } = await within(
          30_000,
          openWatch(protocol, srv.url, srv.adminToken, { cursor: "bm90LWEtY3Vyc29y" }).end(),
          "the refusal",
        );
        assert.deepEqual(events, []);
        assert.equal(end.code, 3);
        assert.equal(end.reason, "INVALID_ARGUMENT");
        if (protocol.startsWith("rest")) assert.deepEqual([end.httpStatus, end.errorLine], [400, false]);
      });

      test("an expired cursor is OUT_OF_RANGE (EVENT_CURSOR_EXPIRED)", async () => {
        feed.pruneThrough(1n);
        try {
          const watch = openWatch(protocol, srv.url, srv.adminToken, { cursor: srv.server.eventCursors.encode(feed.records[0]!.position) });
          const { rest: events, end } = await within(30_000, watch.end(), "the refusal");
          assert.deepEqual(events, []);
          assert.deepEqual([end.code, end.reason], [11, EVENT_CURSOR_EXPIRED]);
          if (protocol.startsWith("rest")) assert.deepEqual([end.httpStatus, end.errorLine], [400, false]);
        } finally {
          feed.pruneThrough(0n);
        }
      });

      test("a failure after the first events ends the stream with INTERNAL (REST: a last error line)", async () => {
        feed.failAfterReads = 1;
        try {
          const watch = openWatch(protocol, srv.url, srv.adminToken, { startTimeMs: 0 });
          const { rest: events, end } = await within(30_000, watch.end(), "the failed stream");
          assert.equal(events.length, feed.records.length);
          assert.equal(end.code, 13);
          if (protocol.startsWith("rest")) assert.deepEqual([end.httpStatus, end.errorLine], [200, true]);
        } finally {
          feed.failAfterReads = Infinity;
        }
      });

      test("no token: UNAUTHENTICATED, nothing streamed", async () => {
        const { rest: events, end } = await within(30_000, openWatch(protocol, srv.url, "").end(), "the refusal");
        assert.deepEqual(events, []);
        assert.equal(end.code, 16);
        if (protocol.startsWith("rest")) assert.equal(end.httpStatus, 401);
      });

      test(`an identity past its watches (2 here) is RESOURCE_EXHAUSTED (${WATCH_LIMIT}) until one closes`, async () => {
        const open = [0, 1].map(() => openWatch(protocol, srv.url, caller.token, { startTimeMs: 0 }));
        // Each holds its slot once its first event arrives.
        for (const w of open) await within(30_000, w.take(1), "an open watch");
        const { end } = await within(30_000, openWatch(protocol, srv.url, caller.token, { startTimeMs: 0 }).end(), "the refusal");
        assert.deepEqual([end.code, end.reason], [8, WATCH_LIMIT]);
        if (protocol.startsWith("rest")) assert.equal(end.httpStatus, 429);
        // The administrator's watches do not count against the caller's.
        const admin = openWatch(protocol, srv.url, srv.adminToken, { startTimeMs: 0 });
        await within(30_000, admin.take(1), "the administrator's watch");
        admin.cancel();
        open[0]!.cancel();
        // The slot comes back when the server sees the hang-up; a new watch is served once it has.
        for (;;) {
          const again = openWatch(protocol, srv.url, caller.token, { startTimeMs: 0 });
          const served = await within(
            30_000,
            again.take(1).then(
              () => true,
              () => false,
            ),
            "a new watch",
          );
          if (!served) assert.equal((await again.end()).end.reason, WATCH_LIMIT);
          again.cancel();
          if (served) break;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        open[1]!.cancel();
      });
    });
  }

  test("grpc-js: a client that stops reading stops the feed reads (at most about a page ahead)", async () => {
    const big = new MemoryFeed();
    big.add(org, 4000);
    // A second server over the big feed: its reads count only this stream.
    const server = await startTestServer({ env: { PLATFORM_EVENT_WATCH_POLL_MS: "20" }, decorateStore: (store) => withFeed(store, big) });
    try {
      const Ctor = grpc.makeGenericClientConstructor(
        { watchEvents: methodDefinition(EventsService, EventsService.method.watchEvents) },
        EventsService.typeName,
      );
      const client = new Ctor(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
      const md = new grpc.Metadata();
      md.set("authorization", `Bearer ${server.adminToken}`);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const call = (client as any).watchEvents(watchRequest({ startTimeMs: 0 }), md) as grpc.ClientReadableStream<Event>;
      call.on("error", () => {});
      const first = await within(30_000, new Promise<Event>((resolve) => call.once("data", resolve)), "the first event");
      call.pause();
      assert.equal(first.id, big.records[0]!.id);
      // However long it waits, the server reads only what flow control lets it send, plus one page.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const reads = big.reads;
      assert.ok(reads <= 4, `the feed was read ${reads} times for a client that stopped reading (4,000 events, pages of 200)`);
      call.cancel();
      client.close();
    } finally {
      await server.close();
    }
  });
});

describe("WatchEvents ends with OK at its maximum duration", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer({
      env: { PLATFORM_EVENT_WATCH_MAX_MS: "300", PLATFORM_EVENT_WATCH_POLL_MS: "20" },
      decorateStore: (store) => withFeed(store, new MemoryFeed()),
    });
  });
  after(() => srv.close());

  for (const protocol of WATCH_PROTOCOLS) {
    test(protocol, async () => {
      const { rest: events, end } = await within(30_000, openWatch(protocol, srv.url, srv.adminToken).end(), "the stream's end");
      assert.deepEqual(events, []);
      assert.equal(end.code, 0, JSON.stringify(end));
      if (protocol.startsWith("rest")) assert.equal(end.httpStatus, 200);
    });
  }
});

// ---------------------------------------------------------------------------
// The real feed: events written by real mutations, on the suite's engine.

describe("WatchEvents over the real feed", () => {
  let srv: TestServer;
  const GROUP_CREATED = eventType("group", "created");

  /** A cursor at the feed's horizon now: ListEvents from a time after every event says where to resume. */
  async function horizon(): Promise<string> {
    const later = new Date(Date.now() + 3_600_000).toISOString();
    return (await ok(rest(srv.url, "GET", `/events/v1/events?start_time=${later}`))).nextPageToken as string;
  }
  const createGroup = async (name: string, parent = "") =>
    (await ok(rest(srv.url, "POST", `/iam/v2beta1/groups${parent ? `/${parent}` : ""}`, { name }))).uid as string;

  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  for (const protocol of WATCH_PROTOCOLS) {
    test(`${protocol}: groups created arrive in order; a watch resumed from the last cursor misses and repeats nothing`, async () => {
      const cursor = await horizon();
      const watch = openWatch(protocol, srv.url, srv.adminToken, { cursor, typePrefix: GROUP_CREATED });
      const a = await createGroup(`${protocol} a`);
      const b = await createGroup(`${protocol} b`);
      const got = await within(30_000, watch.take(2), "the two group events");
      assert.deepEqual(
        got.map((e) => [e.type, e.subject, e.group]),
        [
          [GROUP_CREATED, a, a],
          [GROUP_CREATED, b, b],
        ],
      );
      watch.cancel();
      // Committed while nobody watched.
      const c = await createGroup(`${protocol} c`);
      const resumed = openWatch(protocol, srv.url, srv.adminToken, { cursor: got[1]!.cursor, typePrefix: GROUP_CREATED });
      const next = await within(30_000, resumed.take(1), "the event committed meanwhile");
      assert.deepEqual([next[0]!.subject], [c]);
      // The REST line is the event exactly as ListEvents renders it.
      if (protocol === "rest-h1") {
        const listed = await ok(rest(srv.url, "GET", `/events/v1/events?page_token=${got[1]!.cursor}&type_prefix=${GROUP_CREATED}`));
        assert.deepEqual(next[0]!.json, listed.events[0]);
      }
      const d = await createGroup(`${protocol} d`);
      assert.deepEqual(
        (await within(30_000, resumed.take(1), "the next event")).map((e) => e.subject),
        [d],
      );
      resumed.cancel();
    });
  }

  test("a caller sees only the events of groups it may list", async () => {
    const mine = await createGroup("visible org");
    const other = await createGroup("invisible org");
    const caller = await createCaller(srv, mine, "group watcher", await builtinRole(srv, "viewer"));
    const cursor = await horizon();
    const watches = WATCH_PROTOCOLS.map((p) => openWatch(p, srv.url, caller.token, { cursor, typePrefix: GROUP_CREATED }));
    // The invisible group's event comes first in the feed: a watch that could see it would get it first.
    await createGroup("hidden child", other);
    const child = await createGroup("shown child", mine);
    for (const w of watches) {
      const [first] = await within(30_000, w.take(1), "the visible event");
      assert.deepEqual([first!.subject, first!.group], [child, child]);
      w.cancel();
    }
  });
});
