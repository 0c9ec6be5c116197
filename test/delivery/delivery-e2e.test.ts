/**
 * Issue 23 §3–4, end to end: subscriptions delivered to a receiver on
 * loopback that verifies every delivery's bearer token against the server's
 * JWKS and its Standard Webhooks signature. The first suite is the server's
 * own deliverer as `npm start` runs it; in the second, deliverers run in this process
 * over their own stores (as other processes would open the data) and, for
 * the kill and two-process cases, as child processes. Every wait is on
 * deliveries arriving, with generous bounds; no sleep is tuned to timing.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { spawnDeliveryWorker, startTestDeliverer } from "../support/deliverers.js";
import { startEventReceiver, type EventReceiver, type ReceivedDelivery, type Sink } from "../support/event-receiver.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const PATH = "/events/v1/subscriptions";
const WAIT = 60_000;

let srv: TestServer;
let receiver: EventReceiver;

before(async () => {
  // The tests below run their own deliverers (with their own retry schedules, leases and kills): the server delivers nothing itself.
  srv = await startTestServer({ env: { PLATFORM_DELIVERIES: "off" } });
  receiver = await startEventReceiver(srv);
});
after(async () => {
  await receiver.close();
  await srv.close();
});

/** Creates a subscription of group to sink (the sink learns its secret); returns its uid. */
async function subscribe(group: string, sink: Sink, types: string[] = []): Promise<string> {
  const created = await ok(rest(srv.url, "POST", `${PATH}/${group}`, { sink: sink.url, types }));
  sink.secret = created.secret;
  return created.uid;
}

/** Creates n child groups of group, one after another; returns their uids (each one event, group.created). */
async function children(group: string, n: number, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push((await createGroup(srv.url, group, `${prefix}-${i}`)).uid);
  return out;
}

/** Polls a value the server answers until pass accepts it (bounded): for state the deliverer writes after a delivery arrived. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function eventually(read: () => Promise<any>, pass: (v: any) => boolean, what: string): Promise<any> {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const value = await read();
    if (pass(value)) return value;
    if (Date.now() > deadline) assert.fail(`${what}: last ${JSON.stringify(value)}`);
    await sleep(25);
  }
}

/** The subscription uid (or, with "/deliveries", its delivery log) once pass holds of it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const subscriptionOnce = (uid: string, pass: (v: any) => boolean, what: string, of = "") =>
  eventually(() => ok(rest(srv.url, "GET", `${PATH}/${uid}${of}`)), pass, what);

function assertVerified(d: ReceivedDelivery, sink: Sink, subscription: string): void {
  assert.equal(d.tokenError, "", "bearer token verified against the JWKS");
  assert.equal(d.signatureError, "", "webhook signature verified");
  assert.equal(d.claims?.aud, sink.url);
  assert.equal(d.claims?.sub, subscription);
  assert.equal(d.headers["webhook-id"], d.headers["ce-id"]);
  assert.equal(d.headers["ce-specversion"], "1.0");
  assert.equal(d.headers["content-type"], "application/json");
}

describe("the server's own deliverer", () => {
  let own: TestServer;
  let ownReceiver: EventReceiver;
  before(async () => {
    own = await startTestServer({ env: { PLATFORM_DELIVERY_POLL_MS: "50", ...METRICS_ENV } });
    ownReceiver = await startEventReceiver(own);
  });
  after(async () => {
    await ownReceiver.close();
    await own.close();
  });

  test("delivers its commits at once, verified, counted in /metrics; PLATFORM_DELIVERIES=off delivers nothing", async () => {
    const org = (await createGroup(own.url, null, "own")).uid;
    const sink = ownReceiver.sink("own");
    const created = await ok(rest(own.url, "POST", `${PATH}/${org}`, { sink: sink.url, types: ["api.platform.iam.group."] }));
    sink.secret = created.secret;
    const made = [];
    for (let i = 0; i < 3; i++) made.push((await createGroup(own.url, org, `own-${i}`)).uid);
    const got = await sink.waitForDeliveries(3, WAIT);
    for (const d of got) {
      assertVerified(d, sink, created.uid);
    }
    assert.deepEqual(
      got.map((x) => x.headers["ce-subject"]),
      made,
    );
    // Counted once each attempt is recorded, just after the sink answered.
    const metrics: string = await eventually(
      () => scrapeMetrics(own.url),
      (m) => /platform_event_delivery_attempts_total\{outcome="delivered"\} 3/.test(m),
      "three deliveries counted",
    );
    assert.match(metrics, /platform_event_delivery_lag_seconds_count 3/);
    // Each subscription's lag, caught up: 0.
    assert.match(metrics, new RegExp(`platform_event_subscription_lag_seconds\\{subscription="${created.uid}"\\} 0\n`));
    // srv (PLATFORM_DELIVERIES=off) has a subscription and events, and delivers none of them.
    const quiet = receiver.sink("quiet");
    const other = (await createGroup(srv.url, null, "quiet")).uid;
    const sub = await ok(rest(srv.url, "POST", `${PATH}/${other}`, { sink: quiet.url }));
    await createGroup(srv.url, other, "quiet-child");
    // Bounded by own's deliveries: one more event through own's deliverer, then srv's sink is still empty.
    await createGroup(own.url, org, "own-barrier");
    await sink.waitForDeliveries(4, WAIT);
    assert.equal(quiet.deliveries.length, 0);
    await ok(rest(srv.url, "DELETE", `${PATH}/${sub.uid}`));
  });
});

describe("delivery end to end", () => {
  test("deliveries arrive verified, in feed order, once each; the log and a redelivery", async () => {
    const org = (await createGroup(srv.url, null, "e2e-order")).uid;
    const sink = receiver.sink("order");
    const uid = await subscribe(org, sink);
    const d = await startTestDeliverer(srv);
    try {
      const made = await children(org, 3, "c");
      const got = await sink.waitForDeliveries(3, WAIT);
      got.forEach((x) => assertVerified(x, sink, uid));
      assert.deepEqual(
        got.map((x) => x.headers["ce-subject"]),
        made,
      );
      assert.deepEqual(
        got.map((x) => x.headers["ce-type"]),
        made.map(() => "api.platform.iam.group.created.v1"),
      );
      const feed = await ok(rest(srv.url, "GET", `/events/v1/events?uidp.descendants_of=${org}`));
      assert.deepEqual(
        got.map((x) => x.webhookId),
        feed.events.map((e: { id: string }) => e.id),
      );
      assert.equal(JSON.parse(got[0]!.body).body.uid, made[0]);
      const log = await subscriptionOnce(uid, (l) => l.deliveries.length === 3, "three attempts logged", "/deliveries");
      assert.deepEqual(
        log.deliveries.map((x: { eventId: string; outcome: string; status: number; attempt: number }) => [
          x.eventId,
          x.outcome,
          x.status,
          x.attempt,
        ]),
        [...got].reverse().map((x) => [x.webhookId, "DELIVERED", 204, 1]),
      );
      const again = await ok(rest(srv.url, "POST", `${PATH}/${uid}:redeliver`, { eventId: got[1]!.webhookId }));
      assert.equal(again.outcome, "DELIVERED");
      assert.equal(again.attempt, 0);
      const [, , , redelivered] = await sink.waitForDeliveries(4, WAIT);
      assertVerified(redelivered!, sink, uid);
      assert.equal(redelivered!.webhookId, got[1]!.webhookId);
      assert.equal(redelivered!.body, got[1]!.body);
    } finally {
      await d.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
    assert.equal(sink.deliveries.length, 4, "nothing delivered twice but the redelivery");
  });

  test("a 500 is retried with the same id until it is delivered", async () => {
    const org = (await createGroup(srv.url, null, "e2e-retry")).uid;
    const sink = receiver.sink("retry");
    sink.behave({ status: 500 });
    const uid = await subscribe(org, sink);
    const d = await startTestDeliverer(srv, { retry: (_attempts, _first, now) => ({ at: now + 20 }) });
    try {
      const [child] = await children(org, 1, "r");
      await sink.waitForDeliveries(1, WAIT);
      sink.behave({ status: 204 });
      let n = 1;
      while (sink.deliveries.at(-1)!.status !== 204) await sink.waitForDeliveries(++n, WAIT);
      const all = sink.deliveries;
      all.forEach((x) => assertVerified(x, sink, uid));
      assert.equal(all[0]!.status, 500);
      assert.deepEqual(new Set(all.map((x) => x.webhookId)).size, 1, "one event, one id");
      assert.equal(all[0]!.headers["ce-subject"], child);
      const log = await subscriptionOnce(uid, (l) => l.deliveries.length === all.length, "every attempt logged", "/deliveries");
      assert.deepEqual(
        log.deliveries.map((x: { outcome: string; attempt: number }) => [x.outcome, x.attempt]),
        all.map((_, i) => [i === 0 ? "DELIVERED" : "RETRY", all.length - i]),
      );
      assert.equal(log.deliveries.at(-1).status, 500);
      assert.equal(log.deliveries.at(-1).error, "HTTP 500");
      assert.equal((await ok(rest(srv.url, "GET", `${PATH}/${uid}`))).state, "ACTIVE");
    } finally {
      await d.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("a refused event is skipped and the subscription FAILING until a delivery succeeds; retries give up the same way", async () => {
    const org = (await createGroup(srv.url, null, "e2e-failing")).uid;
    const sink = receiver.sink("failing");
    sink.behave({ status: 410 });
    const uid = await subscribe(org, sink);
    // Every retryable failure gives up at once (the 3 days elapsed).
    const d = await startTestDeliverer(srv, { retry: () => "give-up" });
    try {
      await children(org, 1, "f");
      const [refused] = await sink.waitForDeliveries(1, WAIT);
      const failing = await subscriptionOnce(uid, (s) => s.state === "FAILING", "FAILING after a 410");
      assert.equal(failing.lastError, `event ${refused!.webhookId} was not delivered: HTTP 410`);
      sink.behave({ status: 503 });
      await children(org, 1, "g");
      const [, gaveUp] = await sink.waitForDeliveries(2, WAIT);
      await subscriptionOnce(uid, (s) => s.lastError.includes(gaveUp!.webhookId), "given up after retries");
      sink.behave({ status: 204 });
      await children(org, 1, "h");
      await sink.waitForDeliveries(3, WAIT);
      const back = await subscriptionOnce(uid, (s) => s.state === "ACTIVE", "ACTIVE after a delivery");
      assert.match(back.lastError, /given up after 3 days of retries: HTTP 503/);
      const log = (await ok(rest(srv.url, "GET", `${PATH}/${uid}/deliveries`))).deliveries;
      assert.deepEqual(
        log.map((x: { outcome: string; status: number }) => [x.outcome, x.status]),
        [
          ["DELIVERED", 204],
          ["FAILED", 503],
          ["FAILED", 410],
        ],
      );
      assert.equal(sink.deliveries.length, 3, "skipped events are not tried again");
    } finally {
      await d.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("a sink that hangs does not delay another sink's deliveries", async () => {
    const org = (await createGroup(srv.url, null, "e2e-hang")).uid;
    const hang = receiver.sink("hang");
    hang.behave({ hangMs: 10 * 60_000 });
    const fast = receiver.sink("fast");
    const slowUid = await subscribe(org, hang);
    const fastUid = await subscribe(org, fast);
    const d = await startTestDeliverer(srv, { sinkTimeoutMs: 10 * 60_000, leaseMs: 20 * 60_000 });
    try {
      await children(org, 1, "a");
      await hang.waitForDeliveries(1, WAIT);
      await children(org, 1, "b");
      const [first, second] = await fast.waitForDeliveries(2, WAIT);
      assertVerified(second!, fast, fastUid);
      assert.equal(hang.deliveries.length, 1, "the hanging sink still holds its first event");
      assert.equal(hang.deliveries[0]!.status, 0, "and has not answered it");
      assert.equal(hang.deliveries[0]!.webhookId, first!.webhookId);
      receiver.releaseHangs();
      hang.behave({ status: 204 });
      const [, next] = await hang.waitForDeliveries(2, WAIT);
      assert.equal(next!.webhookId, second!.webhookId);
    } finally {
      await d.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${slowUid}`));
      await ok(rest(srv.url, "DELETE", `${PATH}/${fastUid}`));
    }
  });

  test("a process killed mid-delivery: its lease expires and another process delivers the event", async () => {
    const org = (await createGroup(srv.url, null, "e2e-kill")).uid;
    const sink = receiver.sink("kill");
    sink.behave({ hangMs: 10 * 60_000 });
    const uid = await subscribe(org, sink);
    const a = await spawnDeliveryWorker(srv, { owner: "worker-a", leaseMs: 1500 });
    let b: Awaited<ReturnType<typeof spawnDeliveryWorker>> | undefined;
    try {
      await children(org, 1, "k");
      const [cut] = await sink.waitForDeliveries(1, WAIT);
      await a.kill();
      sink.behave({ status: 204 });
      b = await spawnDeliveryWorker(srv, { owner: "worker-b", leaseMs: 1500 });
      const [, retried] = await sink.waitForDeliveries(2, 15_000).catch((e) => assert.fail(`${e}\n${b!.output()}\n${a.output()}`));
      assertVerified(retried!, sink, uid);
      assert.equal(retried!.webhookId, cut!.webhookId, b.output());
      const log = await subscriptionOnce(uid, (l) => l.deliveries.length === 1, "the delivery logged", "/deliveries");
      assert.equal(log.deliveries[0].outcome, "DELIVERED");
      assert.equal(log.deliveries[0].eventId, cut!.webhookId);
    } finally {
      await a.kill();
      await b?.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("stop() mid-delivery loses nothing: the next deliverer posts the event again", async () => {
    const org = (await createGroup(srv.url, null, "e2e-stop")).uid;
    const sink = receiver.sink("stop");
    sink.behave({ hangMs: 10 * 60_000 });
    const uid = await subscribe(org, sink);
    const first = await startTestDeliverer(srv, { sinkTimeoutMs: 10 * 60_000, leaseMs: 20 * 60_000, stopWaitMs: 0 });
    const second = await (async () => {
      try {
        await children(org, 1, "s");
        await sink.waitForDeliveries(1, WAIT);
      } finally {
        await first.deliverer.stop();
      }
      sink.behave({ status: 204 });
      return startTestDeliverer(srv);
    })();
    try {
      const [cut, again] = await sink.waitForDeliveries(2, WAIT);
      assertVerified(again!, sink, uid);
      assert.equal(again!.webhookId, cut!.webhookId);
      assert.equal(again!.status, 204);
    } finally {
      receiver.releaseHangs();
      await second.stop();
      await first.store.close();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("RedeliverEvent posts one event at a time per subscription: a second while one hangs is 429 REDELIVERY_IN_FLIGHT", async () => {
    const org = (await createGroup(srv.url, null, "e2e-redeliver")).uid;
    const sink = receiver.sink("redeliver");
    const uid = await subscribe(org, sink);
    try {
      await children(org, 1, "r");
      const [event] = (await ok(rest(srv.url, "GET", `/events/v1/events?uidp.descendants_of=${org}`))).events as { id: string }[];
      sink.behave({ hangMs: 10 * 60_000 });
      const first = rest(srv.url, "POST", `${PATH}/${uid}:redeliver`, { eventId: event!.id });
      await sink.waitForDeliveries(1, WAIT);
      const second = await rest(srv.url, "POST", `${PATH}/${uid}:redeliver`, { eventId: event!.id });
      assert.equal(second.status, 429, JSON.stringify(second.body));
      assert.equal(second.body.details[0].reason, "REDELIVERY_IN_FLIGHT");
      sink.behave({ status: 204 });
      receiver.releaseHangs();
      assert.equal((await first).status, 200);
      // Once the first has answered, the subscription may be redelivered again.
      assert.equal((await ok(rest(srv.url, "POST", `${PATH}/${uid}:redeliver`, { eventId: event!.id }))).outcome, "DELIVERED");
    } finally {
      receiver.releaseHangs();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("a subscription freed while this process is still ticking is claimed again, not left held until its lease expires", async () => {
    const org = (await createGroup(srv.url, null, "e2e-release")).uid;
    const sink = receiver.sink("release");
    const uid = await subscribe(org, sink);
    // Each release takes a while after it has freed the lease: the deliverer's polls (every 50 ms) go on meanwhile.
    // Were the claim of such a poll to see its own finishing loop, it would skip the subscription while holding its
    // (20-minute) lease, and the events below would wait that long.
    const d = await startTestDeliverer(srv, { leaseMs: 20 * 60_000 }, (store) => {
      const release = store.deliveries.release.bind(store.deliveries);
      store.deliveries.release = async (...args) => {
        await release(...args);
        await sleep(200);
      };
    });
    try {
      const made: string[] = [];
      for (let i = 0; i < 4; i++) {
        made.push(...(await children(org, 1, `r${i}`)));
        await sink.waitForDeliveries(made.length, WAIT);
      }
      assert.deepEqual(
        sink.deliveries.map((x) => x.headers["ce-subject"]),
        made,
      );
    } finally {
      await d.stop();
      await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
  });

  test("two processes deliver each event once in normal operation", async () => {
    const org = (await createGroup(srv.url, null, "e2e-two")).uid;
    const sinks = [0, 1, 2, 3].map((i) => receiver.sink(`two-${i}`));
    const uids = [];
    for (const sink of sinks) uids.push(await subscribe(org, sink));
    const workers = [
      await spawnDeliveryWorker(srv, { owner: "two-a", leaseMs: 60_000 }),
      await spawnDeliveryWorker(srv, { owner: "two-b", leaseMs: 60_000 }),
    ];
    try {
      const made = await children(org, 12, "t");
      for (const sink of sinks) {
        const got = await sink.waitForDeliveries(made.length, WAIT).catch((err: Error) => {
          throw new Error(`${err.message}; the workers said: ${workers.map((w) => JSON.stringify(w.output())).join(", ")}`);
        });
        assert.deepEqual(
          got.map((x) => x.headers["ce-subject"]),
          made,
          sink.url,
        );
      }
      // One more event through every sink: anything delivered twice would have arrived before it.
      const [last] = await children(org, 1, "barrier");
      for (const sink of sinks) {
        await sink.waitForDeliveries(made.length + 1, WAIT);
        assert.equal(sink.deliveries.at(-1)!.headers["ce-subject"], last);
      }
    } finally {
      for (const w of workers) await w.stop();
      for (const uid of uids) await ok(rest(srv.url, "DELETE", `${PATH}/${uid}`));
    }
    for (const sink of sinks) {
      assert.equal(sink.deliveries.length, 13, `${sink.url}: each event once`);
      assert.equal(new Set(sink.deliveries.map((x) => x.webhookId)).size, 13);
      sink.deliveries.forEach((x) => assert.equal(x.status, 204));
    }
  });
});
