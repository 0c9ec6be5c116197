/**
 * Issue 30 §1: a deliverer that is fair and quiet. Subscriptions are claimed
 * because they have work, in order of how long it has waited, never by uid
 * (beyond the slots, the lowest uids were claimed at every tick and every
 * other subscription starved); a caught-up subscription costs no claim and no
 * feed read; a slow sink gives its slot back after its turn; one
 * organization never holds more than its share while another waits. The
 * schedule's choices are checked on their own, then end to end with real
 * deliverers over the server's store (SQLite, or PostgreSQL with
 * PLATFORM_TEST_BACKEND=postgres) posting to sinks on loopback. Every wait
 * is a liveness bound on deliveries arriving; what is asserted is order and
 * counts, never time.
 */
import assert from "node:assert/strict";
import { after, before, describe, mock, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { DeliverySchedule } from "../../src/delivery/schedule.js";
import { createTicker } from "../../src/delivery/ticker.js";
import type { FeedPosition } from "../../src/domain/events.js";
import type { EventHeader } from "../../src/store/event-store.js";
import type { Store } from "../../src/store/store.js";
import type { DeliveryTarget } from "../../src/store/subscription-store.js";
import { startTestDeliverer, type TestDeliverer } from "../support/deliverers.js";
import { startEventReceiver, type EventReceiver, type Sink } from "../support/event-receiver.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const PATH = "/events/v1/subscriptions";
const WAIT = 60_000;
const at = (seq: number): FeedPosition => ({ txid: 0n, seq: BigInt(seq) });

describe("the schedule's choices", () => {
  const target = (uid: string): DeliveryTarget => ({ uid, groupUid: uid.slice(0, uid.lastIndexOf("/")), types: [], createTime: 0 });
  const event = (seq: number, subject: string, time = seq): EventHeader => ({
    id: `e${seq}`,
    kind: "group",
    type: "api.platform.iam.group.created.v1",
    subject,
    groupUid: subject,
    time,
    position: at(seq),
  });
  /** A schedule tracking targets, every one caught up at seq 0. */
  function caughtUp(concurrency: number, uids: string[], reserve?: number): DeliverySchedule {
    const s = new DeliverySchedule({ concurrency, reserve });
    s.sync(uids.map(target), at(0), 0);
    s.apply(
      uids.map((uid) => ({ uid, cursor: at(0), leaseUntil: 0, nextAttemptAt: 0 })),
      0,
    );
    return s;
  }

  test("caught-up subscriptions are not looked at again until an event may concern them", () => {
    const s = caughtUp(16, ["a/1", "a/2", "b/1"]);
    assert.deepEqual(s.unsure(10, 1000), []);
    assert.deepEqual(s.choose(16, 10), []);
    // An event in b's subtree concerns b/1 only (its group is b); one in a/1's concerns a/1 alone.
    s.observe([event(1, "b/child"), event(2, "a")]);
    assert.deepEqual(s.unsure(10, 1000).sort(), ["a/1", "a/2", "b/1"]);
    const s2 = caughtUp(16, ["a/1", "a/2", "b/1"]);
    s2.observe([event(1, "b/child")]);
    assert.deepEqual(s2.unsure(10, 1000), ["b/1"]);
  });

  test("a subscription whose cursor already passed its work (delivered elsewhere) is dropped without a claim", () => {
    const s = caughtUp(16, ["a/1"]);
    s.observe([event(5, "a/x")]);
    assert.deepEqual(s.unsure(10, 1000), ["a/1"]);
    s.apply([{ uid: "a/1", cursor: at(5), leaseUntil: 0, nextAttemptAt: 0 }], 10);
    assert.deepEqual(s.unsure(10, 1000), []);
    // Held by another process: not read again until its lease ends.
    s.observe([event(6, "a/x")]);
    s.apply([{ uid: "a/1", cursor: at(5), leaseUntil: 100, nextAttemptAt: 0 }], 10);
    assert.deepEqual(s.unsure(50, 1000), []);
    assert.deepEqual(s.unsure(100, 1000), ["a/1"]);
  });

  test("a tick reads the state of a bounded number of subscriptions, taken in turn across organizations", () => {
    const many = Array.from({ length: 300 }, (_, i) => `big/${String(i).padStart(3, "0")}`);
    const s = caughtUp(16, [...many, "small1/1", "small2/1"]);
    s.observe([...many, "small1/1", "small2/1"].map((uid, i) => event(i + 1, `${uid}/x`, i + 1)));
    const read = s.unsure(1000, 10);
    assert.equal(read.length, 10);
    assert.ok(read.includes("small1/1") && read.includes("small2/1"), "the small organizations' work is read with the big one's");
    assert.equal(s.unsure(1000, 303).length, 302);
  });

  test("past the slots, every subscription with work is served in turn: none starves whatever its uid", () => {
    const uids = Array.from({ length: 40 }, (_, i) => `org${String(i % 4)}/${String(i).padStart(3, "0")}`);
    const s = caughtUp(16, uids);
    s.observe(uids.map((uid, i) => event(i + 1, `${uid}/x`, i + 1)));
    const served = new Set<string>();
    for (let round = 0; round < 3; round++) {
      s.apply(
        s.unsure(100, 1000).map((uid) => ({ uid, cursor: at(0), leaseUntil: 0, nextAttemptAt: 0 })),
        100,
      );
      const chosen = s.choose(16, 100);
      assert.ok(chosen.length > 0);
      for (const uid of chosen) {
        assert.ok(!served.has(uid), `${uid} served twice before others`);
        served.add(uid);
        s.started(uid);
      }
      for (const uid of chosen) s.ended(uid, { kind: "caught-up", cursor: at(100) }, 100);
    }
    assert.equal(served.size, 40);
  });

  test("one organization holds no more than its share while another waits, and a newcomer finds a reserved slot", () => {
    const noisy = Array.from({ length: 20 }, (_, i) => `noisy/${String(i).padStart(2, "0")}`);
    const s = caughtUp(16, [...noisy, "quiet/1"]);
    s.observe(noisy.map((uid, i) => event(i + 1, `${uid}/x`, i + 1)));
    const first = s.choose(16, 100);
    // Alone, the noisy organization takes every slot but the reserved two.
    assert.equal(first.length, 14);
    for (const uid of first) s.started(uid);
    // The quiet organization's work, though newer than the noisy backlog, gets a reserved slot at once.
    s.observe([event(100, "quiet/1/x", 100)]);
    assert.deepEqual(s.choose(2, 100), ["quiet/1"]);
  });

  test("work is taken in order of how long it has waited; a yielded turn waits behind work already waiting", () => {
    const s = caughtUp(1, ["a/1", "b/1", "c/1"], 0);
    s.observe([event(1, "b/1/x", 10), event(2, "a/1/x", 20), event(3, "c/1/x", 30)]);
    assert.deepEqual(s.choose(1, 100), ["b/1"]);
    s.started("b/1");
    s.ended("b/1", { kind: "yielded", cursor: at(1) }, 100);
    assert.deepEqual(s.choose(1, 100), ["a/1"]);
    s.started("a/1");
    s.ended("a/1", { kind: "caught-up", cursor: at(3) }, 101);
    assert.deepEqual(s.choose(1, 101), ["c/1"]);
  });

  test("a retry waits for its time; lags are the age of the oldest waiting work", () => {
    const s = caughtUp(4, ["a/1", "b/1"]);
    s.observe([event(1, "a/1/x", 50), event(2, "b/1/x", 60)]);
    s.started("a/1");
    s.ended("a/1", { kind: "retry", at: 500 }, 100);
    assert.deepEqual(s.choose(4, 100), ["b/1"]);
    assert.equal(s.nextDue(100), 500);
    assert.deepEqual(s.choose(4, 500).sort(), ["a/1", "b/1"]);
    const lags = new Map(s.lags(1000));
    assert.equal(lags.get("b/1"), 0.94);
  });
});

test("the ticker: a wake planned while a run is under way is never pushed back by the run's own re-arm", async () => {
  mock.timers.enable({ apis: ["setTimeout"] });
  try {
    let clock = 0;
    const runs: number[] = [];
    let finish: () => void = () => {};
    const ticker = createTicker(
      () => {
        runs.push(clock);
        return new Promise<void>((resolve) => {
          finish = resolve;
        });
      },
      () => clock,
    );
    const advance = async (ms: number) => {
      clock += ms;
      mock.timers.tick(ms);
      await new Promise<void>((resolve) => setImmediate(resolve));
    };
    ticker.plan(0);
    await advance(0);
    assert.deepEqual(runs, [0]);
    // A commit wakes it 18 ms from now while the run goes on; the run ends and re-arms the poll an hour away.
    ticker.plan(18);
    await advance(2);
    finish();
    await new Promise<void>((resolve) => setImmediate(resolve));
    ticker.plan(3_600_000);
    await advance(16);
    assert.deepEqual(runs, [0, 18], "the wake ran at its time, not at the poll");
    // A wake that fires during a run runs another right after it.
    ticker.plan(0);
    await advance(0);
    assert.deepEqual(runs, [0, 18], "one run at a time");
    finish();
    await advance(0);
    await advance(0);
    assert.deepEqual(runs, [0, 18, 18]);
    finish();
    await ticker.stop();
  } finally {
    mock.timers.reset();
  }
});

describe("deliverers end to end", () => {
  let srv: TestServer;
  let receiver: EventReceiver;

  before(async () => {
    // The deliverers under test run in this process over their own stores; the server delivers nothing itself.
    srv = await startTestServer({ env: { PLATFORM_DELIVERIES: "off", PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG: "100" } });
    receiver = await startEventReceiver(srv);
  });
  after(async () => {
    await receiver.close();
    await srv.close();
  });

  async function subscribe(group: string, sink: Sink): Promise<string> {
    const created = await ok(rest(srv.url, "POST", `${PATH}/${group}`, { sink: sink.url }));
    sink.secret = created.secret;
    return created.uid;
  }

  /** Two new organizations, the one whose uid sorts first as `low` (its subscriptions sort before the other's). */
  async function twoOrgs(name: string): Promise<{ low: string; high: string }> {
    const a = (await createGroup(srv.url, null, `${name}-a`)).uid;
    const b = (await createGroup(srv.url, null, `${name}-b`)).uid;
    return a < b ? { low: a, high: b } : { low: b, high: a };
  }

  /** Counts calls of the named store methods (a deliverer's own store). */
  function counting(counts: Map<string, number>, names: string[]): (store: Store) => void {
    return (store) => {
      for (const name of names) {
        const [part, method] = name.split(".") as [keyof Store, string];
        const target = store[part] as unknown as Record<string, (...args: unknown[]) => unknown>;
        const inner = target[method]!.bind(target);
        target[method] = (...args: unknown[]) => {
          counts.set(name, (counts.get(name) ?? 0) + 1);
          return inner(...args);
        };
      }
    };
  }

  test("more subscriptions than slots: a subscription whose uid sorts last is delivered; caught up, nothing is claimed or read", async () => {
    const { low, high } = await twoOrgs("starve");
    const idle: Sink[] = [];
    for (let i = 0; i < 8; i++) {
      const sink = receiver.sink(`starve-idle-${i}`);
      await subscribe(low, sink);
      idle.push(sink);
    }
    const victim = receiver.sink("starve-victim");
    await subscribe(high, victim);
    const counts = new Map<string, number>();
    let d: TestDeliverer | undefined;
    try {
      d = await startTestDeliverer(
        srv,
        { concurrency: 4, pollMs: 20 },
        counting(counts, ["deliveries.claim", "events.read", "deliveries.states"]),
      );
      const child = (await createGroup(srv.url, high, "victim-child")).uid;
      const [got] = await victim.waitForDeliveries(1, WAIT);
      assert.equal(got!.headers["ce-subject"], child);
      assert.equal(
        idle.reduce((n, s) => n + s.deliveries.length, 0),
        0,
        "the idle organization's sinks got nothing",
      );
      // Each new subscription is read once (its first cursor); then, caught up, the deliverer polls on (50 times a
      // second) and neither claims nor reads any subscription's feed. Before, every poll claimed and read again: it
      // never went quiet.
      const quiet = () => `${counts.get("deliveries.claim") ?? 0}/${counts.get("events.read") ?? 0}`;
      let last = quiet();
      let quietSince = Date.now();
      const wentQuiet = await until(() => {
        const now = quiet();
        if (now !== last) [last, quietSince] = [now, Date.now()];
        return Date.now() - quietSince >= 1000;
      });
      assert.ok(wentQuiet, "an idle deliverer claims and reads nothing for a second (50 polls)");
      await settle(d);
      assert.ok(d.deliverer.lags().every(([, seconds]) => seconds === 0));
    } finally {
      await d?.stop();
    }
  });

  test("slow sinks give their slot back after a turn: another organization's event is delivered before their backlog", async () => {
    const { low, high } = await twoOrgs("slow");
    const slow = [receiver.sink("slow-0"), receiver.sink("slow-1")];
    for (const sink of slow) {
      sink.behave({ hangMs: 1500 });
      await subscribe(low, sink);
    }
    const victim = receiver.sink("slow-victim");
    await subscribe(high, victim);
    let d: TestDeliverer | undefined;
    try {
      d = await startTestDeliverer(srv, { concurrency: 2, reserve: 0, pollMs: 20, turnMs: 500 });
      // A backlog of four events for each slow sink.
      for (let i = 0; i < 4; i++) await createGroup(srv.url, low, `backlog-${i}`);
      await Promise.all(slow.map((s) => s.waitForDeliveries(1, WAIT)));
      // Both slots are held by slow posts; the victim's organization now has work.
      await createGroup(srv.url, high, "victim-event");
      const lagged = await until(() => d!.deliverer.lags().some(([, seconds]) => seconds > 0));
      assert.ok(lagged, "a waiting backlog shows as lag");
      await victim.waitForDeliveries(1, WAIT);
      const slowSoFar = slow.reduce((n, s) => n + s.deliveries.length, 0);
      assert.ok(slowSoFar < 8, `the victim waited for ${slowSoFar} of the 8 slow posts, not the whole backlog`);
      // The backlog is still delivered, in order, to the end.
      for (const sink of slow) {
        const got = await sink.waitForDeliveries(4, WAIT);
        assert.deepEqual(
          got.map((x) => x.headers["ce-type"]),
          Array(4).fill("api.platform.iam.group.created.v1"),
        );
      }
    } finally {
      for (const sink of slow) sink.behave({ status: 204 });
      receiver.releaseHangs();
      await d?.stop();
    }
  });

  test("a subscription that gives its slot back after every event goes on at once: its own lease is never taken for another's", async () => {
    const org = (await createGroup(srv.url, null, "turns")).uid;
    const sink = receiver.sink("turns");
    await subscribe(org, sink);
    for (let i = 0; i < 60; i++) await createGroup(srv.url, org, `turn-${i}`);
    let d: TestDeliverer | undefined;
    try {
      // A turn of one event, and a lease of an hour: a loop's end read as another process's lease would stall it for the hour.
      // Its ticks made slow, so loops end while a tick is reading states (the window where the race lay).
      d = await startTestDeliverer(srv, { concurrency: 2, pollMs: 20, batch: 1, turnMs: 0, leaseMs: 3_600_000 }, (store) => {
        const due = store.deliveries.due.bind(store.deliveries);
        store.deliveries.due = async (now, limit) => {
          await sleep(30);
          return due(now, limit);
        };
      });
      const got = await sink.waitForDeliveries(60, WAIT);
      assert.equal(new Set(got.map((x) => x.headers["ce-id"])).size, 60);
    } finally {
      await d?.stop();
    }
  });

  test("two deliverers over many subscriptions deliver each event once", async () => {
    const orgs = [];
    for (let i = 0; i < 3; i++) orgs.push((await createGroup(srv.url, null, `pair-${i}`)).uid);
    const sinks: Sink[] = [];
    for (const [i, org] of orgs.entries()) {
      for (let j = 0; j < 6; j++) {
        const sink = receiver.sink(`pair-${i}-${j}`);
        await subscribe(org, sink);
        sinks.push(sink);
      }
    }
    const ds: TestDeliverer[] = [];
    try {
      ds.push(await startTestDeliverer(srv, { concurrency: 4, pollMs: 20, owner: "one" }));
      ds.push(await startTestDeliverer(srv, { concurrency: 4, pollMs: 20, owner: "two" }));
      for (const org of orgs) await createGroup(srv.url, org, "pair-event");
      for (const sink of sinks) await sink.waitForDeliveries(1, WAIT);
      // Let both deliverers look again several times: nothing is posted twice.
      await Promise.all(ds.map(settle));
      await sleep(300);
      assert.deepEqual(
        sinks.map((s) => s.deliveries.length),
        sinks.map(() => 1),
      );
    } finally {
      await Promise.all(ds.map((d) => d.stop()));
    }
  });
});

/** Waits (bounded) until the deliverer has no delivery running. */
async function settle(d: TestDeliverer): Promise<void> {
  assert.ok(await until(() => d.deliverer.active === 0), "the deliverer went idle");
}

/** Polls pass until it holds (true) or a liveness bound passes (false). */
async function until(pass: () => boolean): Promise<boolean> {
  const deadline = Date.now() + WAIT;
  while (!pass()) {
    if (Date.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}
