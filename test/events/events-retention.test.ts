/**
 * Issue 23 §2, retention: events older than PLATFORM_EVENT_RETENTION are
 * pruned in batches; a cursor from before them gets OUT_OF_RANGE
 * (EVENT_CURSOR_EXPIRED) telling the client to restart from a time, while a
 * cursor past them and a start_time keep working. The server's clock is
 * injected, so nothing here waits.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { EVENT_CURSOR_EXPIRED } from "../../src/services/events/events.js";
import { assertRestError } from "../support/assertions.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const MINUTE = 60_000;

describe("event retention (PLATFORM_EVENT_RETENTION)", () => {
  let srv: TestServer;
  let clock = Date.UTC(2026, 0, 1);
  before(async () => {
    srv = await startTestServer({ now: () => clock, env: { PLATFORM_EVENT_RETENTION: "10m" } });
  });
  after(() => srv.close());

  const events = async (query: string) => ok(rest(srv.url, "GET", `/events/v1/events?${query}`));

  test("old events are pruned; a cursor before them is EVENT_CURSOR_EXPIRED, later cursors and start_time still read", async () => {
    const first = await createGroup(srv.url, null, "first of all");
    await createGroup(srv.url, null, "read by nobody");
    const beginning = await events("page_size=200");
    const firstEvent = (beginning.events as { subject: string; cursor: string }[]).find((e) => e.subject === first.uid)!;
    assert.ok(firstEvent, "the first group's event is in the feed");
    const oldCursor = firstEvent.cursor;
    // Everything so far ages out; then more happens. A reader at the first event has not read the next one, which goes.
    const caughtUp = beginning.nextPageToken as string;
    clock += 20 * MINUTE;
    const second = await createGroup(srv.url, null, "after the gap");
    assert.ok((await srv.server.pruneEvents()) >= 1, "the aged events were pruned");

    const expired = assertRestError(await rest(srv.url, "GET", `/events/v1/events?page_token=${oldCursor}`), 400, 11, EVENT_CURSOR_EXPIRED);
    assert.match(expired.message, /start_time/);

    // A cursor at or past the newest pruned event reads on without a gap.
    const fromCaughtUp = await events(`page_token=${caughtUp}`);
    assert.deepEqual(
      (fromCaughtUp.events as { subject: string }[]).map((e) => e.subject),
      [second.uid],
    );
    // Restarting from a time works.
    const fromTime = await events(`start_time=${new Date(clock - MINUTE).toISOString()}`);
    assert.deepEqual(
      (fromTime.events as { subject: string }[]).map((e) => e.subject),
      [second.uid],
    );
    // And the oldest event kept is now the second group's.
    assert.equal((await events("page_size=1")).events[0].subject, second.uid);
  });
});
