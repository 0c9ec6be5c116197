/**
 * The change feed at the store, on the suite's engine (PLATFORM_TEST_BACKEND):
 * pages follow the feed's order across positions of every digit count (a
 * transaction of 150 events, seqs 2–151: a text ordering would put 100 before
 * 11), resume with no gap and no repeat, and a filtered-out run of events
 * still moves the cursor.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { eventType, type EventDraft, type FeedPosition } from "../src/domain/events.js";
import { EVERYWHERE } from "../src/store/event-store.js";
import type { Store } from "../src/store/store.js";
import { freshStorage } from "./support/server.js";

const ORG = "a".repeat(40);

function draft(n: number): EventDraft {
  return {
    id: randomUUID(),
    kind: "group",
    type: eventType("group", "created"),
    subject: `${ORG}/${n.toString(16).padStart(16, "0")}`,
    groupUid: ORG,
    time: 1_000 + n,
    data: `{"n":${n}}`,
  };
}

describe("the change feed at the store", () => {
  let store: Store;
  before(async () => {
    store = await (await freshStorage()).openStore();
    await store.transaction(async (tx) => tx.events.append([draft(0)]));
    await store.transaction(async (tx) => tx.events.append(Array.from({ length: 150 }, (_, i) => draft(i + 1))));
  });
  after(() => store.close());

  const read = (after: FeedPosition | null, limit: number, typePrefix = "") =>
    store.events.read({ after, typePrefix, hierarchy: {}, visible: EVERYWHERE, limit });

  test("pages of 50 walk the 151 events in order, once each", async () => {
    const seen: number[] = [];
    let after: FeedPosition | null = null;
    for (let i = 0; i < 10; i++) {
      const page = await read(after, 50);
      seen.push(...page.events.map((e) => (JSON.parse(e.data) as { n: number }).n));
      after = page.resume;
      if (page.events.length < 50) break;
    }
    assert.deepEqual(
      seen,
      Array.from({ length: 151 }, (_, i) => i),
    );
    assert.equal((await read(after, 50)).events.length, 0, "nothing after the end");
  });

  test("a read whose filter matches nothing still moves past what it examined", async () => {
    const page = await read(null, 50, "api.platform.registry.");
    assert.equal(page.events.length, 0);
    const next = await read(page.resume, 200);
    assert.equal(next.events.length, 0, "the cursor is past every event examined");
  });
});
