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
import { eventType, type EventDraft, type FeedPosition } from "../../src/domain/events.js";
import { EVERYWHERE } from "../../src/store/event-store.js";
import { eventsCarryingRunner } from "../../src/store/postgres/events.js";
import { insertWithEvents, type Store } from "../../src/store/store.js";
import { freshStorage, TEST_BACKEND } from "../support/server.js";

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

  test("a scan walks every event in order without data, from the horizon it gives when asked with no position", async () => {
    const first = await store.events.scan({ txid: 0n, seq: 0n }, 60);
    assert.equal(first.events.length, 60);
    assert.deepEqual(first.resume, first.events[59]!.position);
    assert.equal("data" in first.events[0]!, false, "a scan carries no data");
    const subjects: string[] = first.events.map((e) => e.subject);
    let after = first.resume;
    for (;;) {
      const page = await store.events.scan(after, 60);
      subjects.push(...page.events.map((e) => e.subject));
      after = page.resume;
      if (page.events.length < 60) break;
    }
    assert.deepEqual(
      subjects,
      Array.from({ length: 151 }, (_, i) => draft(i).subject),
    );
    // Past the end, and from nowhere: nothing, and the horizon, where the next event will be found.
    const horizon = await store.events.scan(null, 60);
    assert.deepEqual(horizon.events, []);
    const end = await store.events.scan(after, 60);
    assert.deepEqual(end.events, []);
    await store.transaction(async (tx) => tx.events.append([draft(151)]));
    const next = await store.events.scan(horizon.resume, 60);
    assert.deepEqual(
      next.events.map((e) => e.subject),
      [draft(151).subject],
    );
  });

  test("a read whose filter matches nothing still moves past what it examined", async () => {
    const page = await read(null, 50, "api.platform.registry.");
    assert.equal(page.events.length, 0);
    const next = await read(page.resume, 200);
    assert.equal(next.events.length, 0, "the cursor is past every event examined");
  });
});

describe("one INSERT with its events (insertWithEvents)", () => {
  let store: Store;
  const org = "b".repeat(40);
  const group = (uid: string, parentUid: string | null) => ({
    uid,
    parentUid,
    name: uid.slice(-4),
    description: "",
    verified: false,
    resourceLimits: {},
    createTime: 1,
    updateTime: 1,
  });
  const eventFor = (subject: string): EventDraft => ({ ...draft(0), subject, groupUid: subject });
  const subjects = async () =>
    (await store.events.read({ after: null, typePrefix: "", hierarchy: {}, visible: EVERYWHERE, limit: 200 })).events.map((e) => e.subject);

  before(async () => {
    store = await (await freshStorage()).openStore();
    await store.groups.createRoot(group(org, null), "creator");
  });
  after(() => store.close());

  test("the row and its event commit together; a refused INSERT writes neither, on the suite's engine", async () => {
    const child = `${org}/${"1".repeat(16)}`;
    await insertWithEvents(store, (parts) => parts.groups.create(group(child, org)), [eventFor(child)]);
    assert.equal((await store.groups.get(child))?.uid, child);
    assert.deepEqual(await subjects(), [child]);
    // The same uid again (a unique violation), and a parent that does not exist (a foreign key): errors, no event.
    await assert.rejects(
      insertWithEvents(store, (parts) => parts.groups.create(group(child, org)), [eventFor("x")]),
      /already exists/i,
    );
    const orphan = `${"c".repeat(40)}/${"2".repeat(16)}`;
    await assert.rejects(
      insertWithEvents(store, (parts) => parts.groups.create(group(orphan, "c".repeat(40))), [eventFor(orphan)]),
      /not found/i,
    );
    assert.deepEqual(await subjects(), [child]);
    assert.equal(await store.groups.get(orphan), null);
  });

  test(
    "on PostgreSQL, a write that is not one plain INSERT is a programming error, thrown",
    { skip: TEST_BACKEND !== "postgres" },
    async () => {
      // A second statement (its first has committed, with its events: why only one INSERT may be passed).
      const first = `${org}/${"3".repeat(16)}`;
      const second = `${org}/${"4".repeat(16)}`;
      await assert.rejects(
        insertWithEvents(
          store,
          async (parts) => {
            await parts.groups.create(group(first, org));
            await parts.groups.create(group(second, org));
          },
          [eventFor(first)],
        ),
        /insertWithEvents: the write made a second statement/,
      );
      assert.equal(await store.groups.get(second), null);
      // A part method that needs a transaction (here an UPDATE with its read) is refused before it sends anything.
      await assert.rejects(
        insertWithEvents(store, (parts) => parts.groups.update(org, { name: "renamed" }, 2), [eventFor(org)]),
        /insertWithEvents: the write opened a transaction/,
      );
      assert.equal((await store.groups.get(org))?.name, org.slice(-4), "the UPDATE was not sent");
      assert.ok(!(await subjects()).includes(org));
    },
  );
});

test("the PostgreSQL carrier sends one plain INSERT with the events' WITH, numbering their parameters after its own", async () => {
  const sent: { text: string; params: unknown[] }[] = [];
  const q = {
    query: async (text: string, params: unknown[] = []) => {
      sent.push({ text, params });
      return { rows: [], rowCount: 1 };
    },
  };
  const events = [draft(1), draft(2)];
  await eventsCarryingRunner(q as never, events).q.query("INSERT INTO groups (uid, name) VALUES ($1, $2)", ["u", "n"]);
  assert.equal(sent.length, 1);
  assert.match(sent[0]!.text, /^WITH platform_events AS \(INSERT INTO events .*\$3::text\[\].*\$10::text\[\]\)\) INSERT INTO groups/s);
  assert.equal(sent[0]!.params.length, 10);
  assert.deepEqual(sent[0]!.params[2], [events[0]!.id, events[1]!.id]);
  for (const text of ["UPDATE groups SET name = $1", "DELETE FROM groups", "INSERT INTO groups (uid) VALUES ($1) ON CONFLICT DO NOTHING"]) {
    await assert.rejects(async () => eventsCarryingRunner(q as never, events).q.query(text, []), /not one plain INSERT/);
  }
  assert.equal(sent.length, 1, "nothing refused was sent");
});
