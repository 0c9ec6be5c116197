import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type { FeedPosition } from "../../src/domain/events.js";
import { EVERYWHERE } from "../../src/store/event-store.js";
import type { HierarchyFilter, Store } from "../../src/store/store.js";
import {
  DELIVERY_LOG_LIMIT,
  type DeliveryLease,
  type DeliveryLogEntry,
  type DeliveryState,
  type RetryState,
  type SubscriptionFilter,
  type SubscriptionOrder,
  type SubscriptionRecord,
} from "../../src/store/subscription-store.js";
import { assertAlreadyExists, assertNotFound, assertPrecondition } from "./store-conformance-iam.js";
import { A, A1, A1X, A2, A3, B, B1, C, compareText, hexSegments, hierarchyFixture, query, sorted } from "./store-fixtures.js";
import { belowFirstRoot, describePagedWalks, everything } from "./store-paged-walks.js";
import { buildPagingTree, OWNERS, type WalkFixture } from "./store-walk-fixtures.js";

// Subscriptions at groups of hierarchyFixture(): a digit repeated 16 times is one level down.
const below = (parent: string, digit: string) => `${parent}/${digit.repeat(16)}`;
const S_A = below(A, "6");
const S_A1 = below(A1, "6");
const S_A1X = below(A1X, "6");
const S_A3 = below(A3, "6");
const S_B = below(B, "6");
const S_B1 = below(B1, "6");

/** Injected clock readings: every lease and retry below is relative to T0, never to the wall clock. */
const T0 = 1_800_000_000_000;
const LEASE_MS = 30_000;
/** A position whose txid is past 2^53, so a cursor that went through a float would come back wrong. */
const FAR: FeedPosition = { txid: 9_007_199_254_740_993n, seq: 7n };
const NEAR: FeedPosition = { txid: 0n, seq: 42n };

export function subscription(uid: string, groupUid: string, over: Partial<SubscriptionRecord> = {}): SubscriptionRecord {
  return {
    uid,
    groupUid,
    sink: "https://hooks.example.com/platform",
    types: [],
    state: "active",
    lastError: "",
    secret: `whsec_${"k".repeat(32)}`,
    creatorUid: "9".repeat(40),
    creatorAdmin: false,
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_000_000,
    ...over,
  };
}

function attempt(n: number, over: Partial<DeliveryLogEntry> = {}): DeliveryLogEntry {
  return {
    time: T0 + n,
    eventId: `0190a000-0000-7000-8000-${n.toString(16).padStart(12, "0")}`,
    eventType: "api.platform.iam.group.created.v1",
    status: 200,
    latencyMs: 12,
    outcome: "delivered",
    error: "",
    attempt: 1,
    ...over,
  };
}

const byUid = <T extends { uid: string }>(xs: T[]): T[] => [...xs].sort((x, y) => compareText(x.uid, y.uid));
const leaseUids = (leases: DeliveryLease[]) => sorted(leases.map((l) => l.subscription.uid));

/** Conformance of subscriptions and their delivery state: contracts, leases, retries, the log, and the paged walks. */
export function subscriptionConformance(getStore: () => Store): void {
  describe("subscriptions: create, get, targets, countInTree, list, setState, delete", () => subscriptionContracts(getStore));
  describe("deliveries: claim, states, due, record, advance, release, the log", () => deliveryContracts(getStore));
  describePagedWalks<SubscriptionRecord, SubscriptionOrder>(getStore, {
    kind: "subscriptions",
    orders: ["uid", "created_at", "updated_at"],
    build: buildSubscriptionWalk,
    list: (store, q) => store.subscriptions.list(q),
    scopes: [
      everything(),
      belowFirstRoot(),
      {
        label: "visible within the first root",
        narrow: (f: WalkFixture<SubscriptionRecord>) => ({
          hierarchy: {},
          visibleWithin: [f.root],
          expected: f.records.filter((r) => r.uid.startsWith(`${f.root}/`)),
        }),
      },
    ],
  });
}

function subscriptionContracts(getStore: () => Store): void {
  let store: Store;
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
  });

  const uids = async (hierarchy: HierarchyFilter, visibleWithin: readonly string[] | null = null) => {
    const r = await store.subscriptions.list(query<SubscriptionFilter, SubscriptionOrder>({ hierarchy, visibleWithin }));
    assert.equal(r.hasMore, false);
    assert.equal(r.totalCount, r.items.length);
    return r.items.map((s) => s.uid);
  };

  test("every field round-trips exactly through get and list; get returns null when absent", async () => {
    const full = subscription(S_A1, A1, {
      sink: "https://hooks.example.com/a?b=c&d=é",
      types: ["api.platform.registry.", 'api.platform.iam.group "quoted"'],
      state: "failing",
      lastError: "sink answered 503 after 12 attempts",
      creatorAdmin: true,
      createTime: 1_001,
      updateTime: 1_002,
    });
    const bare = subscription(S_A, A);
    await store.subscriptions.create(full, 5_000);
    await store.subscriptions.create(bare, 6_000);
    assert.deepEqual(await store.subscriptions.get(S_A1), full);
    assert.deepEqual(await store.subscriptions.get(S_A), bare);
    assert.deepEqual((await store.subscriptions.list(query<SubscriptionFilter, SubscriptionOrder>({}))).items, byUid([bare, full]));
    assert.equal(await store.subscriptions.get(S_B1), null);
  });

  test("create in a missing group throws NotFoundError; a taken uid AlreadyExistsError, keeping the first", async () => {
    const missing = below(C, "8");
    await assertNotFound(async () => store.subscriptions.create(subscription(below(missing, "6"), missing), 0), "group", missing);
    assert.deepEqual(await store.subscriptions.targets(), []);
    await store.subscriptions.create(subscription(S_A1, A1, { sink: "https://first.example.com/" }), 0);
    await assertAlreadyExists(
      async () => store.subscriptions.create(subscription(S_A1, A1, { sink: "https://second.example.com/" }), 9),
      "subscription",
      S_A1,
    );
    assert.equal((await store.subscriptions.get(S_A1))?.sink, "https://first.example.com/");
    assert.deepEqual(await store.deliveries.states([S_A1]), [{ uid: S_A1, cursor: null, leaseUntil: 0, nextAttemptAt: 0 }]);
  });

  test("create starts the delivery state at startTime, before any cursor", async () => {
    const s = subscription(S_A1, A1);
    await store.subscriptions.create(s, 1_234_567);
    const [lease] = await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    assert.deepEqual(lease, { subscription: s, cursor: null, startTime: 1_234_567, retry: null });
  });

  test("a transaction that fails leaves no subscription and no delivery state behind", async () => {
    await assert.rejects(
      async () =>
        store.transaction(async (tx) => {
          await tx.subscriptions.create(subscription(S_A1, A1), 0);
          assert.equal((await tx.subscriptions.get(S_A1))?.uid, S_A1, "the transaction sees its own write");
          throw new Error("abort");
        }),
      /abort/,
    );
    assert.equal(await store.subscriptions.get(S_A1), null);
    assert.deepEqual(await store.deliveries.states([S_A1]), []);
    assert.deepEqual(await store.subscriptions.targets(), []);
  });

  test("targets is every subscription's uid, group, types and creation time, by uid", async () => {
    assert.deepEqual(await store.subscriptions.targets(), [], "none: nothing to claim");
    // Created in an order other than uid order, with different types and times.
    const made = [
      subscription(S_B1, B1, { types: ["api.platform.registry.tag."], createTime: 3_000 }),
      subscription(S_A1X, A1X, { createTime: 1_000, state: "failing" }),
      subscription(S_A, A, { types: ["api.platform.iam.", "api.platform.registry.repo."], createTime: 2_000 }),
    ];
    for (const s of made) await store.subscriptions.create(s, 0);
    assert.deepEqual(
      await store.subscriptions.targets(),
      byUid(made).map((s) => ({ uid: s.uid, groupUid: s.groupUid, types: s.types, createTime: s.createTime })),
    );
    await store.subscriptions.delete(S_A1X);
    assert.deepEqual(
      (await store.subscriptions.targets()).map((t) => t.uid),
      sorted([S_A, S_B1]),
    );
  });

  test("countInTree counts the root group and every group below it, never a prefix-sharing sibling", async () => {
    for (const [uid, g] of [
      [S_A, A],
      [S_A1, A1],
      [S_A1X, A1X],
      [S_A3, A3],
      [S_B, B],
      [S_B1, B1],
    ] as const)
      await store.subscriptions.create(subscription(uid, g), 0);
    assert.equal(await store.subscriptions.countInTree(A), 4);
    // A3 is A1 with its last character changed, B is A with its last character changed.
    assert.equal(await store.subscriptions.countInTree(A1), 2);
    assert.equal(await store.subscriptions.countInTree(A3), 1);
    assert.equal(await store.subscriptions.countInTree(B), 2);
    assert.equal(await store.subscriptions.countInTree(A2), 0);
    assert.equal(await store.subscriptions.countInTree(C), 0);
    assert.equal(await store.subscriptions.countInTree(below(C, "9")), 0);
  });

  test("list honours hierarchy filters and visibleWithin, and counts only what it may show", async () => {
    for (const [uid, g] of [
      [S_A, A],
      [S_A1, A1],
      [S_A1X, A1X],
      [S_A3, A3],
      [S_B1, B1],
    ] as const)
      await store.subscriptions.create(subscription(uid, g), 0);
    assert.deepEqual(await uids({}), sorted([S_A, S_A1, S_A1X, S_A3, S_B1]));
    assert.deepEqual(await uids({ descendantsOf: A }), sorted([S_A, S_A1, S_A1X, S_A3]));
    assert.deepEqual(await uids({ descendantsOf: A1 }), sorted([S_A1, S_A1X]));
    assert.deepEqual(await uids({ descendantsOf: B }), [S_B1]);
    assert.deepEqual(await uids({ childrenOf: A1 }), [S_A1]);
    assert.deepEqual(await uids({ childrenOf: C }), []);
    assert.deepEqual(await uids({}, [A1]), sorted([S_A1, S_A1X]));
    assert.deepEqual(await uids({}, [A3, B]), sorted([S_A3, S_B1]));
    assert.deepEqual(await uids({ descendantsOf: A }, [B]), []);
    assert.deepEqual(await store.subscriptions.list(query<SubscriptionFilter, SubscriptionOrder>({ visibleWithin: [] })), {
      items: [],
      hasMore: false,
      totalCount: 0,
    });
  });

  test("setState changes state and lastError with updateTime only when they differ; false when the subscription is gone", async () => {
    const s = subscription(S_A1, A1, { createTime: 1_000, updateTime: 1_000 });
    await store.subscriptions.create(s, 0);
    assert.equal(await store.subscriptions.setState(S_A1, "failing", "sink answered 410", 2_000), true);
    const failing = { ...s, state: "failing" as const, lastError: "sink answered 410", updateTime: 2_000 };
    assert.deepEqual(await store.subscriptions.get(S_A1), failing);
    // The same state and error again: nothing moves, not even updateTime.
    assert.equal(await store.subscriptions.setState(S_A1, "failing", "sink answered 410", 3_000), true);
    assert.deepEqual(await store.subscriptions.get(S_A1), failing);
    // Only the error differs: it changes.
    assert.equal(await store.subscriptions.setState(S_A1, "failing", "timeout", 4_000), true);
    assert.deepEqual(await store.subscriptions.get(S_A1), { ...failing, lastError: "timeout", updateTime: 4_000 });
    assert.equal(await store.subscriptions.setState(S_A1, "active", "", 5_000), true);
    assert.deepEqual(await store.subscriptions.get(S_A1), { ...s, updateTime: 5_000 });
    assert.deepEqual((await store.subscriptions.list(query<SubscriptionFilter, SubscriptionOrder>({}))).items, [
      { ...s, updateTime: 5_000 },
    ]);
    assert.equal(await store.subscriptions.setState(S_B1, "failing", "x", 6_000), false);
    assert.equal(await store.subscriptions.get(S_B1), null, "setState creates nothing");
  });

  test("delete takes the delivery state and log with it; a missing subscription throws NotFoundError", async () => {
    await store.subscriptions.create(subscription(S_A1, A1), 0);
    const [lease] = await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    assert.ok(lease);
    assert.equal(await store.deliveries.record(S_A1, "p1", attempt(1), { kind: "advance", cursor: NEAR }, T0 + LEASE_MS), true);
    assert.equal(await store.deliveries.logAttempt(S_A1, attempt(2, { attempt: 0 })), true);
    await store.subscriptions.delete(S_A1);
    assert.equal(await store.subscriptions.get(S_A1), null);
    assert.deepEqual(await store.deliveries.states([S_A1]), []);
    assert.deepEqual(await store.deliveries.log(S_A1), []);
    assert.equal(await store.deliveries.logAttempt(S_A1, attempt(3)), false);
    assert.deepEqual(await store.deliveries.claim("p2", [S_A1], T0 + 2 * LEASE_MS, T0 + 3 * LEASE_MS), []);
    await assertNotFound(async () => store.subscriptions.delete(S_A1), "subscription", S_A1);
    // The same uid again starts afresh: nothing of the first one's delivery state or log remains.
    await store.subscriptions.create(subscription(S_A1, A1), 77);
    assert.deepEqual(await store.deliveries.states([S_A1]), [{ uid: S_A1, cursor: null, leaseUntil: 0, nextAttemptAt: 0 }]);
    assert.deepEqual(await store.deliveries.log(S_A1), []);
    assert.equal((await store.deliveries.claim("p2", [S_A1], T0, T0 + LEASE_MS))[0]?.startTime, 77);
  });

  test("a group holding a subscription cannot be deleted: RESOURCE_NOT_EMPTY naming subscriptions", async () => {
    await store.subscriptions.create(subscription(S_A1X, A1X), 0);
    await assertPrecondition(async () => store.groups.delete(A1X), "RESOURCE_NOT_EMPTY", A1X, /subscriptions/);
    assert.equal((await store.groups.get(A1X))?.name, "svc");
    await store.subscriptions.delete(S_A1X);
    await store.groups.delete(A1X);
    assert.equal(await store.groups.get(A1X), null);
  });
}

function deliveryContracts(getStore: () => Store): void {
  let store: Store;
  const SUBS = [S_A, S_A1, S_A1X, S_A3, S_B1];
  beforeEach(async () => {
    store = getStore();
    for (const g of hierarchyFixture()) await store.groups.create(g);
    for (const [i, uid] of SUBS.entries()) await store.subscriptions.create(subscription(uid, uid.slice(0, uid.lastIndexOf("/"))), 100 + i);
  });

  const state = async (uid: string): Promise<DeliveryState> => {
    const [s] = await store.deliveries.states([uid]);
    assert.ok(s, `${uid} has a delivery state`);
    return s;
  };
  /** Claims uid for owner at now and waits for a retry at nextAttemptAt, then lets the lease go. */
  const retrying = async (uid: string, owner: string, now: number, retry: RetryState) => {
    assert.equal((await store.deliveries.claim(owner, [uid], now, now + LEASE_MS)).length, 1, `${owner} claims ${uid}`);
    assert.equal(
      await store.deliveries.record(uid, owner, attempt(now, { outcome: "retry", status: 503 }), { kind: "retry", retry }, now + LEASE_MS),
      true,
    );
    await store.deliveries.release(uid, owner);
  };

  test("claim leases exactly the requested subscriptions that exist, each with its record, start and no cursor or retry", async () => {
    assert.deepEqual(await store.deliveries.claim("p1", [], T0, T0 + LEASE_MS), []);
    const leases = await store.deliveries.claim("p1", [S_A1, S_B1, below(C, "6")], T0, T0 + LEASE_MS);
    assert.deepEqual(
      [...leases].sort((x, y) => compareText(x.subscription.uid, y.subscription.uid)),
      [
        { subscription: (await store.subscriptions.get(S_A1))!, cursor: null, startTime: 101, retry: null },
        { subscription: (await store.subscriptions.get(S_B1))!, cursor: null, startTime: 104, retry: null },
      ],
    );
    // The others are left as they are.
    assert.deepEqual(
      byUid(await store.deliveries.states(SUBS)),
      byUid(SUBS.map((uid) => ({ uid, cursor: null, leaseUntil: uid === S_A1 || uid === S_B1 ? T0 + LEASE_MS : 0, nextAttemptAt: 0 }))),
    );
  });

  test("a lease excludes every other claim, its holder's too, until it ends; then another owner may take it", async () => {
    assert.equal((await store.deliveries.claim("p1", [S_A1, S_A3], T0, T0 + LEASE_MS)).length, 2);
    assert.deepEqual(await store.deliveries.claim("p2", [S_A1, S_A3], T0, T0 + 2 * LEASE_MS), []);
    assert.deepEqual(
      await store.deliveries.claim("p2", [S_A1], T0 + LEASE_MS - 1, T0 + 2 * LEASE_MS),
      [],
      "one millisecond before it ends",
    );
    assert.deepEqual(await store.deliveries.claim("p1", [S_A1], T0 + 1, T0 + 2 * LEASE_MS), [], "no one holds it: not even its holder");
    // Only what is asked for is claimed: S_A1 passes to p2 at the lease's end, S_A3 stays as it was.
    assert.deepEqual(leaseUids(await store.deliveries.claim("p2", [S_A1, S_A], T0 + LEASE_MS, T0 + 2 * LEASE_MS)), sorted([S_A, S_A1]));
    assert.equal((await state(S_A1)).leaseUntil, T0 + 2 * LEASE_MS);
    assert.equal((await state(S_A3)).leaseUntil, T0 + LEASE_MS);
    // The expired holder changes nothing the new one has: no advance, no record, no release.
    assert.equal(await store.deliveries.advance(S_A1, "p1", FAR), false);
    assert.equal(await store.deliveries.record(S_A1, "p1", attempt(1), { kind: "advance", cursor: FAR }, T0 + 9 * LEASE_MS), false);
    await store.deliveries.release(S_A1, "p1");
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: null, leaseUntil: T0 + 2 * LEASE_MS, nextAttemptAt: 0 });
    assert.deepEqual(await store.deliveries.log(S_A1), [], "a refused record logs nothing");
    assert.deepEqual(await store.deliveries.claim("p3", [S_A1], T0 + LEASE_MS + 1, T0 + 3 * LEASE_MS), []);
  });

  test("owners claiming the same subscriptions at once take each exactly once", async () => {
    const [p1, p2, p3] = await Promise.all(["p1", "p2", "p3"].map((owner) => store.deliveries.claim(owner, SUBS, T0, T0 + LEASE_MS)));
    const taken = [...leaseUids(p1!), ...leaseUids(p2!), ...leaseUids(p3!)];
    assert.deepEqual(sorted(taken), sorted(SUBS), "disjoint, and together every subscription");
  });

  test("release gives the lease up so any owner may claim at once; another owner's release, or a second one, is a no-op", async () => {
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    await store.deliveries.release(S_A1, "p2");
    assert.equal((await state(S_A1)).leaseUntil, T0 + LEASE_MS, "p2 holds no lease: nothing changes");
    assert.deepEqual(await store.deliveries.claim("p2", [S_A1], T0 + 1, T0 + LEASE_MS), []);
    await store.deliveries.release(S_A1, "p1");
    const released = await state(S_A1);
    assert.ok(released.leaseUntil <= T0 + 1, `no one holds it once released (leaseUntil ${released.leaseUntil})`);
    await store.deliveries.release(S_A1, "p1");
    await store.deliveries.release(S_A, "p1");
    await store.deliveries.release(below(C, "6"), "p1");
    assert.equal(await store.deliveries.advance(S_A1, "p1", NEAR), false, "a released lease moves nothing");
    assert.deepEqual(leaseUids(await store.deliveries.claim("p2", [S_A1], T0 + 1, T0 + 1 + LEASE_MS)), [S_A1]);
    assert.equal((await state(S_A1)).leaseUntil, T0 + 1 + LEASE_MS);
  });

  test("advance moves the holder's cursor, seen by states and the next claim; anyone else's advance is refused", async () => {
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    assert.equal(await store.deliveries.advance(S_A1, "p2", NEAR), false);
    assert.equal(await store.deliveries.advance(below(C, "6"), "p1", NEAR), false);
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: null, leaseUntil: T0 + LEASE_MS, nextAttemptAt: 0 });
    assert.equal(await store.deliveries.advance(S_A1, "p1", NEAR), true);
    assert.deepEqual(
      await state(S_A1),
      { uid: S_A1, cursor: NEAR, leaseUntil: T0 + LEASE_MS, nextAttemptAt: 0 },
      "the lease stays as it was",
    );
    assert.equal(await store.deliveries.advance(S_A1, "p1", FAR), true);
    assert.deepEqual((await state(S_A1)).cursor, FAR, "a txid past 2^53 comes back exact");
    await store.deliveries.release(S_A1, "p1");
    assert.deepEqual((await state(S_A1)).cursor, FAR, "a released cursor stays");
    const [lease] = await store.deliveries.claim("p2", [S_A1], T0 + 1, T0 + LEASE_MS);
    assert.deepEqual(lease?.cursor, FAR);
    assert.deepEqual(await store.deliveries.log(S_A1), [], "advance logs nothing");
  });

  test("record with an advance logs the attempt, moves the cursor, clears any retry and extends the lease", async () => {
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    const delivered = attempt(1);
    assert.equal(await store.deliveries.record(S_A1, "p1", delivered, { kind: "advance", cursor: NEAR }, T0 + 2 * LEASE_MS), true);
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: NEAR, leaseUntil: T0 + 2 * LEASE_MS, nextAttemptAt: 0 });
    assert.deepEqual(await store.deliveries.log(S_A1), [delivered]);
    assert.deepEqual(await store.deliveries.claim("p2", [S_A1], T0 + LEASE_MS, T0 + 3 * LEASE_MS), [], "the lease was extended");
    const [lease] = await store.deliveries.claim("p2", [S_A1], T0 + 2 * LEASE_MS, T0 + 3 * LEASE_MS);
    assert.deepEqual(lease && { cursor: lease.cursor, retry: lease.retry }, { cursor: NEAR, retry: null });
    assert.equal(await store.deliveries.record(S_A1, "p1", attempt(2), { kind: "advance", cursor: FAR }, T0 + 9 * LEASE_MS), false);
    assert.deepEqual(await store.deliveries.log(S_A1), [delivered], "a refused record logs nothing");
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: NEAR, leaseUntil: T0 + 3 * LEASE_MS, nextAttemptAt: 0 });
  });

  test("record with a retry keeps the cursor, holds the subscription until the retry is due, and hands the retry to the next claim", async () => {
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    assert.equal(await store.deliveries.advance(S_A1, "p1", NEAR), true);
    const retry: RetryState = { eventId: attempt(5).eventId, attempts: 1, firstAttemptAt: T0, nextAttemptAt: T0 + 10_000 };
    const failed = attempt(5, { outcome: "retry", status: 503, error: "sink answered 503", latencyMs: 40 });
    assert.equal(await store.deliveries.record(S_A1, "p1", failed, { kind: "retry", retry }, T0 + 2_000), true);
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: NEAR, leaseUntil: T0 + 2_000, nextAttemptAt: T0 + 10_000 });
    assert.deepEqual(await store.deliveries.log(S_A1), [failed]);
    await store.deliveries.release(S_A1, "p1");
    // No one holds it, but its retry is not due: no claim takes it.
    assert.deepEqual(await store.deliveries.claim("p2", [S_A1], T0 + 9_999, T0 + 9_999 + LEASE_MS), []);
    const [lease] = await store.deliveries.claim("p2", [S_A1], T0 + 10_000, T0 + 10_000 + LEASE_MS);
    assert.deepEqual(lease && { cursor: lease.cursor, retry: lease.retry }, { cursor: NEAR, retry });
    // A second failure moves the retry on; then a delivery clears it.
    const again: RetryState = { ...retry, attempts: 2, nextAttemptAt: T0 + 40_000 };
    assert.equal(
      await store.deliveries.record(S_A1, "p2", attempt(6, { outcome: "retry", attempt: 2 }), { kind: "retry", retry: again }, T0 + 20_000),
      true,
    );
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: NEAR, leaseUntil: T0 + 20_000, nextAttemptAt: T0 + 40_000 });
    assert.equal(
      await store.deliveries.record(S_A1, "p2", attempt(7, { attempt: 3 }), { kind: "advance", cursor: FAR }, T0 + 20_000),
      true,
    );
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: FAR, leaseUntil: T0 + 20_000, nextAttemptAt: 0 });
    assert.deepEqual(await store.deliveries.due(T0 + 100_000, 10), [], "a cleared retry is never due");
    assert.deepEqual(
      (await store.deliveries.log(S_A1)).map((e) => e.eventId),
      [attempt(7).eventId, attempt(6).eventId, failed.eventId],
      "newest first",
    );
    await store.deliveries.release(S_A1, "p2");
    const [next] = await store.deliveries.claim("p3", [S_A1], T0 + 20_000, T0 + 20_000 + LEASE_MS);
    assert.deepEqual(next && { cursor: next.cursor, retry: next.retry }, { cursor: FAR, retry: null });
  });

  test("states answers each requested subscription that exists, in any order", async () => {
    assert.deepEqual(await store.deliveries.states([]), []);
    assert.deepEqual(await store.deliveries.states([below(C, "6")]), []);
    await store.deliveries.claim("p1", [S_A3], T0, T0 + LEASE_MS);
    await store.deliveries.advance(S_A3, "p1", FAR);
    await retrying(S_B1, "p1", T0, { eventId: "e", attempts: 3, firstAttemptAt: T0 - 5, nextAttemptAt: T0 + 77 });
    assert.deepEqual(
      byUid(await store.deliveries.states([S_B1, below(C, "6"), S_A3, S_A])),
      byUid([
        { uid: S_A, cursor: null, leaseUntil: 0, nextAttemptAt: 0 },
        { uid: S_A3, cursor: FAR, leaseUntil: T0 + LEASE_MS, nextAttemptAt: 0 },
        { uid: S_B1, cursor: null, leaseUntil: (await state(S_B1)).leaseUntil, nextAttemptAt: T0 + 77 },
      ]),
    );
    assert.ok((await state(S_B1)).leaseUntil <= T0, "released");
  });

  test("due returns only due retries no one holds, earliest due first, at most limit", async () => {
    // Due times in an order other than uid order.
    const dueAt = new Map([
      [S_B1, T0 + 1_000],
      [S_A, T0 + 3_000],
      [S_A1X, T0 + 2_000],
    ]);
    for (const [uid, at] of dueAt)
      await retrying(uid, "p1", T0, { eventId: `e-${at}`, attempts: 1, firstAttemptAt: T0, nextAttemptAt: at });
    // S_A3 retries later than now; S_A1 retries at once but stays held; the others are not retrying.
    await retrying(S_A3, "p1", T0, { eventId: "later", attempts: 1, firstAttemptAt: T0, nextAttemptAt: T0 + 60_000 });
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    assert.equal(
      await store.deliveries.record(
        S_A1,
        "p1",
        attempt(1),
        { kind: "retry", retry: { eventId: "held", attempts: 1, firstAttemptAt: T0, nextAttemptAt: T0 + 500 } },
        T0 + LEASE_MS,
      ),
      true,
    );

    const now = T0 + 5_000;
    const expected = [S_B1, S_A1X, S_A];
    const all = await store.deliveries.due(now, 10);
    assert.deepEqual(
      all.map((s) => s.uid),
      expected,
    );
    for (const s of all) assert.deepEqual(s, await state(s.uid), "each as states() reads it");
    assert.deepEqual(
      all.map((s) => s.nextAttemptAt),
      [T0 + 1_000, T0 + 2_000, T0 + 3_000],
    );
    for (let limit = 1; limit <= expected.length + 1; limit++)
      assert.deepEqual(
        (await store.deliveries.due(now, limit)).map((s) => s.uid),
        expected.slice(0, limit),
        `limit ${limit}`,
      );
    assert.deepEqual(
      (await store.deliveries.due(T0 + 1_999, 10)).map((s) => s.uid),
      [S_B1],
      "only what is due at now",
    );
    assert.deepEqual(
      (await store.deliveries.due(T0 + 999, 10)).map((s) => s.uid),
      [],
    );
    // Once its lease ends, the held retry is due too (the earliest); a claim takes a due retry out of due.
    assert.deepEqual(
      (await store.deliveries.due(T0 + LEASE_MS, 10)).map((s) => s.uid),
      [S_A1, ...expected],
    );
    assert.equal((await store.deliveries.claim("p2", [S_A1X], now, now + LEASE_MS)).length, 1);
    assert.deepEqual(
      (await store.deliveries.due(now, 10)).map((s) => s.uid),
      [S_B1, S_A],
    );
    assert.deepEqual(
      (await store.deliveries.due(T0 + 60_000, 10)).map((s) => s.uid),
      [S_A1, S_B1, S_A1X, S_A, S_A3],
    );
  });

  test("logAttempt adds to the log outside any lease; false when the subscription is gone", async () => {
    const redelivered = attempt(1, { attempt: 0, status: 0, outcome: "failed", error: "connection refused", latencyMs: 0 });
    assert.equal(await store.deliveries.logAttempt(S_A1, redelivered), true);
    assert.deepEqual(await store.deliveries.log(S_A1), [redelivered]);
    assert.deepEqual(await store.deliveries.log(S_A), [], "each subscription has its own log");
    assert.equal(await store.deliveries.logAttempt(below(C, "6"), redelivered), false);
    assert.deepEqual(await store.deliveries.log(below(C, "6")), []);
    assert.deepEqual(await state(S_A1), { uid: S_A1, cursor: null, leaseUntil: 0, nextAttemptAt: 0 }, "the delivery state is untouched");
  });

  test(`the log keeps the last ${DELIVERY_LOG_LIMIT} attempts, newest first, whichever way they were added`, async () => {
    await store.deliveries.claim("p1", [S_A1], T0, T0 + LEASE_MS);
    const added: DeliveryLogEntry[] = [];
    for (let i = 0; i < DELIVERY_LOG_LIMIT + 5; i++) {
      const entry = attempt(i, { attempt: i % 3, outcome: i % 2 === 0 ? "delivered" : "retry", time: T0 + (i % 4) });
      added.push(entry);
      if (i % 10 === 0)
        assert.equal(
          await store.deliveries.record(S_A1, "p1", entry, { kind: "advance", cursor: { txid: 0n, seq: BigInt(i) } }, T0 + LEASE_MS),
          true,
        );
      else assert.equal(await store.deliveries.logAttempt(S_A1, entry), true);
    }
    assert.deepEqual(await store.deliveries.log(S_A1), added.slice(5).reverse());
  });

  test("eventPosition is the feed position of a kept event, and null for any other id", async () => {
    const drafts = [1, 2, 3].map((n) => ({
      id: attempt(n).eventId,
      kind: "group" as const,
      type: "api.platform.iam.group.created.v1",
      subject: A1,
      groupUid: A1,
      time: T0 + n,
      data: JSON.stringify({ actor: { subject: "x" }, requestId: `r${n}`, body: { uid: A1 } }),
    }));
    await store.transaction(async (tx) => tx.events.append(drafts.slice(0, 2)));
    await store.transaction(async (tx) => tx.events.append(drafts.slice(2)));
    const page = await store.events.read({ after: null, typePrefix: "", hierarchy: {}, visible: EVERYWHERE, limit: 200 });
    assert.deepEqual(
      page.events.map((e) => e.id),
      drafts.map((d) => d.id),
    );
    for (const e of page.events) assert.deepEqual(await store.deliveries.eventPosition(e.id), e.position, `the position of ${e.id}`);
    assert.equal(await store.deliveries.eventPosition(attempt(9).eventId), null);
  });
}

/** Subscriptions in groups across the paging tree, with repeated times and some state changes moving updateTime. */
async function buildSubscriptionWalk(store: Store): Promise<WalkFixture<SubscriptionRecord>> {
  const groups = await buildPagingTree(store);
  const seg = hexSegments(59, 16);
  const times = [1_000, 2_000, 1_000, 3_000, 1_000];
  const out: SubscriptionRecord[] = [];
  await store.transaction(async (tx) => {
    for (const [i, owner] of [...OWNERS.map((o) => (o < 0 ? 4 : o)), 0, 17].entries()) {
      const groupUid = groups[owner]!.uid;
      const t = times[i % times.length]!;
      const rec = subscription(`${groupUid}/${seg.next().value!}`, groupUid, {
        types: i % 3 === 0 ? [] : [`api.platform.iam.${i}`],
        creatorAdmin: i % 4 === 0,
        createTime: t,
        updateTime: t,
      });
      await tx.subscriptions.create(rec, t);
      out.push(rec);
    }
    for (const [i, t] of [
      [1, 9_000],
      [6, 8_000],
      [11, 9_000],
      [15, 9_000],
    ] as const) {
      assert.equal(await tx.subscriptions.setState(out[i]!.uid, "failing", `error ${i}`, t), true);
      out[i] = { ...out[i]!, state: "failing", lastError: `error ${i}`, updateTime: t };
    }
  });
  return { records: out, root: groups[0]!.uid };
}
