/**
 * Issue 30, item 4: WatchEvents streams survive every proxy. A REST or
 * Connect watch opened on a quiet feed sent no response headers until its
 * first event (HAProxy answered 504 in its place), and a stream with no event
 * sent nothing at all (HAProxy cut it after 60 s). Now the first message comes
 * as soon as a watch is admitted (a heartbeat when no event is waiting), and a
 * heartbeat follows whenever the stream sent nothing for
 * PLATFORM_EVENT_WATCH_HEARTBEAT_MS: an Event of type
 * api.platform.events.heartbeat.v1 carrying only where the stream stands.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { within } from "../support/assertions.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { ok } from "../support/principals.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";
import { HEARTBEAT_TYPE, openWatch, WATCH_PROTOCOLS, type SeenEvent, type Watch } from "../support/watch-clients.js";

const createGroup = async (srv: TestServer, name: string, parent = "") =>
  (await ok(rest(srv.url, "POST", `/iam/v2beta1/groups${parent ? `/${parent}` : ""}`, { name }))).uid as string;

/** A heartbeat as the contract describes it: the type, a cursor, the time, source and spec version, nothing else. */
function assertHeartbeat(srv: TestServer, beat: SeenEvent, what: string): void {
  assert.equal(beat.type, HEARTBEAT_TYPE, what);
  assert.match(beat.cursor, /^[A-Za-z0-9_-]{32}$/, `${what}: a cursor`);
  // Empty where an event has its id, subject, group and content type (REST renders every field; the others omit empty ones).
  const { cursor, source, specVersion, time, type, ...rest } = beat.json;
  assert.ok(cursor !== undefined && time !== undefined && type !== undefined, `${what}: ${JSON.stringify(beat.json)}`);
  for (const [name, value] of Object.entries(rest)) {
    assert.ok(["id", "subject", "group", "dataContentType"].includes(name) && value === "", `${what}: ${name} ${JSON.stringify(value)}`);
  }
  assert.equal(specVersion, "1.0");
  assert.equal(source, srv.server.tokens.audience);
}

describe("a watch's response headers come when it is admitted, before any event", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  test("on every protocol, a watch of a quiet feed gets its headers and a heartbeat at once, and stays open", async () => {
    const quiet = await createGroup(srv, "quiet");
    const watches = WATCH_PROTOCOLS.map((p) => [p, openWatch(p, srv.url, srv.adminToken, { descendantsOf: quiet })] as const);
    for (const [protocol, w] of watches) await within(30_000, w.opened, `${protocol}: the response headers`);
    for (const [protocol, w] of watches) {
      const [beat] = await within(30_000, w.heartbeats(1), `${protocol}: the opening heartbeat`);
      assertHeartbeat(srv, beat!, protocol);
      assert.equal(w.ended, false, protocol);
    }
    // Still open: an event committed now arrives on each.
    const child = await createGroup(srv, "first event", quiet);
    for (const [protocol, w] of watches) {
      const [event] = await within(30_000, w.take(1), `${protocol}: the event`);
      assert.equal(event!.subject, child);
      w.cancel();
    }
  });
});

describe("a quiet watch sends heartbeats (PLATFORM_EVENT_WATCH_HEARTBEAT_MS)", () => {
  let srv: TestServer;
  let org: string;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_EVENT_WATCH_HEARTBEAT_MS: "200", ...METRICS_ENV } });
    org = await createGroup(srv, "heartbeats");
  });
  after(() => srv.close());

  test("on every protocol: heartbeat after heartbeat, each with a cursor and nothing of an event", async () => {
    const watches = WATCH_PROTOCOLS.map((p) => [p, openWatch(p, srv.url, srv.adminToken, { descendantsOf: org })] as const);
    for (const [protocol, w] of watches) {
      const beats = await within(30_000, w.heartbeats(3), `${protocol}: three heartbeats`);
      for (const beat of beats) assertHeartbeat(srv, beat, protocol);
      w.cancel();
      assert.deepEqual((await w.end()).rest, [], `${protocol}: no event`);
    }
  });

  test("resuming from a heartbeat's cursor loses and repeats nothing", async () => {
    for (const protocol of ["grpc-js", "connect-h1", "rest-h1"] as const) {
      const first = openWatch(protocol, srv.url, srv.adminToken, { descendantsOf: org });
      // Admitted (its opening heartbeat): it starts from the feed as it was then.
      await within(30_000, first.heartbeats(1), `${protocol}: the opening heartbeat`);
      const seen = await createGroup(srv, `${protocol} seen`, org);
      const [event] = await within(30_000, first.take(1), `${protocol}: the first event`);
      assert.equal(event!.subject, seen);
      const beat = await heartbeatAfter(first, event!.arrival!, protocol);
      first.cancel();
      // Committed while nobody watched.
      const missed = await createGroup(srv, `${protocol} missed`, org);
      const resumed = openWatch(protocol, srv.url, srv.adminToken, { cursor: beat.cursor, descendantsOf: org });
      const [next] = await within(30_000, resumed.take(1), `${protocol}: the event after the heartbeat`);
      assert.equal(next!.subject, missed, `${protocol}: the first event after the heartbeat's cursor is the one committed since`);
      resumed.cancel();
    }
  });

  test("heartbeats are never events: ListEvents and the metrics know none", async () => {
    const watch = openWatch("rest-h1", srv.url, srv.adminToken);
    await within(30_000, watch.heartbeats(2), "heartbeats");
    watch.cancel();
    const listed = await ok(rest(srv.url, "GET", "/events/v1/events?start_time=1970-01-01T00:00:00Z&page_size=200"));
    assert.ok(listed.events.length > 0);
    for (const e of listed.events as { type: string }[]) assert.notEqual(e.type, HEARTBEAT_TYPE);
    const typed = await ok(rest(srv.url, "GET", `/events/v1/events?start_time=1970-01-01T00:00:00Z&type_prefix=${HEARTBEAT_TYPE}`));
    assert.deepEqual(typed.events, []);
    const metrics = await scrapeMetrics(srv.url);
    assert.match(metrics, /platform_events_written_total\{kind="group"\}/);
    assert.doesNotMatch(metrics, /heartbeat/);
  });
});

/** The first heartbeat of w that arrived after its message number arrival. */
async function heartbeatAfter(w: Watch, arrival: number, what: string): Promise<SeenEvent> {
  for (;;) {
    const [beat] = await within(30_000, w.heartbeats(1), `${what}: a heartbeat`);
    if (beat!.arrival! > arrival) return beat!;
  }
}
