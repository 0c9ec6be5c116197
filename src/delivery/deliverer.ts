import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { performance } from "node:perf_hooks";
import type { Authorizer } from "../auth/authorizer.js";
import type { EventRecord, FeedPosition } from "../domain/events.js";
import type { Store } from "../store/store.js";
import type {
  DeliveryLease,
  DeliveryLogEntry,
  DeliveryStep,
  DeliveryTarget,
  SubscriptionRecord,
  SubscriptionState,
} from "../store/subscription-store.js";
import { nextAttempt, type NextAttempt } from "./backoff.js";
import { DeliverySchedule, type LoopEnd } from "./schedule.js";
import { SINK_TIMEOUT_MS } from "./sink.js";
import { postEvent, readPrefix, subscriptionVisibility, typeMatches, type PostDeps } from "./subscriber.js";
import { createTicker } from "./ticker.js";

/**
 * The per-process deliverer of subscriptions (docs/events.md, "Delivering").
 *
 * It scans the feed's new events and claims only subscriptions with work (an
 * event that may concern them past their cursor, or a retry due), fairly
 * across organizations and longest-waiting first (schedule.ts): a caught-up
 * subscription costs nothing until the feed moves past it. Each
 * subscription is delivered by one process at a time: a process leases it
 * (store.deliveries.claim: FOR UPDATE SKIP LOCKED on PostgreSQL, a
 * conditional UPDATE on SQLite), reads the feed from the subscription's own
 * cursor, posts event after event for one turn, and records each outcome
 * with the cursor move in one transaction that also extends the lease. At
 * least once: the cursor passes an event only once its attempt is recorded,
 * so a process killed mid-delivery leaves the cursor before it and its lease
 * to expire, and the next holder posts it again (same webhook-id). A
 * retryable failure stores the event's retry and frees the subscription
 * until it is due; after three days (backoff.ts) or a refusal (4xx) the
 * event is skipped and the subscription marked FAILING until a later
 * delivery succeeds.
 *
 * Every subscription has its own loop, at most `concurrency` in flight per
 * process, each for one turn at a time, so a slow sink holds one slot for one
 * post, never another subscription's deliveries.
 */

/** How a deliverer runs; everything but the first five has a production default. */
export interface DelivererOptions extends PostDeps {
  store: Store;
  authz: Authorizer;
  /** This process's name in leases (default host:pid:random). */
  owner?: string;
  /** Subscriptions delivered at once by this process (default 16). */
  concurrency?: number;
  /** Slots kept for organizations with no delivery running (default: an eighth of concurrency; schedule.ts). */
  reserve?: number;
  /** How long a lease lasts past its last extension (default 60 s; keep it well above sinkTimeoutMs). */
  leaseMs?: number;
  /** How often the feed is scanned for other processes' commits and due retries looked for (default 1 s). */
  pollMs?: number;
  /** Events read from the feed at once (default 100). */
  batch?: number;
  /**
   * A claim's turn: once it has posted for this long (default 1 s) or a
   * batch of events, a subscription with more to deliver gives its slot
   * back and waits behind the work already waiting, so a slow sink's
   * backlog never holds a slot for long.
   */
  turnMs?: number;
  /** When a retryable failure is tried again (default: backoff.ts nextAttempt with Math.random). */
  retry?: (attempts: number, firstAttemptAt: number, now: number) => NextAttempt;
  /** How long stop() waits for posts in flight before leaving their leases to expire (default 10 s). */
  stopWaitMs?: number;
  /** Told of every attempt recorded (metrics: attempts by outcome; lag = attempt.time - event.time). */
  onAttempt?: (subscription: SubscriptionRecord, attempt: DeliveryLogEntry, event: EventRecord) => void;
  /** Told of an unexpected failure of a subscription's loop (a store error); the subscription is retried later. */
  onError?: (err: unknown) => void;
}

/** The deliverer of one process. */
export interface Deliverer {
  /** Starts looking for subscriptions with work (idempotent). */
  start(): void;
  /** The feed may have new events (this process committed some): look now rather than at the next poll. */
  wake(): void;
  /**
   * Stops claiming, lets each loop finish the post in flight (up to
   * stopWaitMs), releases every lease held (a post still in flight then
   * records nothing) and resolves. A delivery cut short is not lost: the
   * cursor never passed it, so the next holder posts it again.
   */
  stop(): Promise<void>;
  /** Subscriptions this process is delivering now. */
  readonly active: number;
  /** Each subscription's delivery lag in seconds as this process sees it (DeliverySchedule.lags). */
  lags(): [uid: string, seconds: number][];
}

/** The least time between two ticks woken by this process's commits. */
const WAKE_SPACING_MS = 20;

/** Events scanned from the feed per tick: a burst longer than this is scanned over several ticks, one right after another. */
const SCAN_LIMIT = 1000;

/** Delivery states read per tick at most (of the subscriptions that may have work, taken in turn across organizations). */
const STATES_PER_TICK = 256;

/** The production retry schedule. */
const defaultRetry = (attempts: number, firstAttemptAt: number, now: number) => nextAttempt(attempts, firstAttemptAt, now, Math.random());

/** Creates a deliverer; nothing happens until start(). */
export function createDeliverer(opts: DelivererOptions): Deliverer {
  const { store } = opts;
  const owner = opts.owner ?? `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;
  const concurrency = opts.concurrency ?? 16;
  const sinkTimeoutMs = opts.sinkTimeoutMs ?? SINK_TIMEOUT_MS;
  const leaseMs = opts.leaseMs ?? Math.max(60_000, 3 * sinkTimeoutMs);
  const pollMs = opts.pollMs ?? 1000;
  const batch = opts.batch ?? 100;
  const turnMs = opts.turnMs ?? 1000;
  const retry = opts.retry ?? defaultRetry;
  const onError = opts.onError ?? (() => {});
  const schedule = new DeliverySchedule({ concurrency, reserve: opts.reserve });
  const loops = new Map<string, Promise<void>>();
  // Loops that have ended and whose leases the next tick releases. Releasing in the tick, before it claims, keeps a
  // lease this process frees from being claimed again by the same tick while its old loop is still listed (the
  // claim would then be skipped as a duplicate, and the subscription held idle until its lease expired).
  // How each ended; the schedule hears of it once the lease is released, so it never reads its own unreleased lease
  // as another process's.
  const ended = new Map<string, LoopEnd>();
  // Where this process's scan of the feed has got to (null until the first tick with a subscription).
  let head: FeedPosition | null = null;
  let running = false;
  const ticker = createTicker(tick);
  const plan = ticker.plan;
  // When retries recorded by any process were last looked for: once a poll, not at every tick a commit wakes.
  let dueLookedAt = -Infinity;
  // No subscription existed at the last look: this process's commits wake nothing until the next poll finds one.
  let idle = false;
  let lastTick = 0;

  const leaseUntil = () => opts.now() + leaseMs;

  /**
   * One look: releases ended loops, scans the feed's new events (which
   * subscriptions they may concern), finds due retries, reads the state of
   * the subscriptions that may have work, and claims what this process has
   * room for, fairly (schedule.ts). A caught-up deployment does one scan
   * that finds nothing and one look for due retries.
   */
  async function tick(): Promise<void> {
    lastTick = performance.now();
    let more = false;
    try {
      await releaseEnded();
      // Grants and subscriptions are read through the caches: bring them up to date with every process's writes.
      await store.refresh();
      // A cached read while the subscriptions table is unchanged: a deployment without subscriptions pays
      // nothing per commit, and one look per poll.
      const targets = await store.subscriptions.targets();
      idle = targets.length === 0;
      if (idle) {
        // Every subscription is gone: forget them all (and their lag series), scan from the horizon when one comes.
        head = null;
        schedule.sync(targets, { txid: 0n, seq: 0n }, opts.now());
      } else {
        more = await look(targets);
      }
    } catch (err) {
      onError(err);
    }
    if (running) plan(more ? 0 : nextDelay());
  }

  /** Scans, reads and claims for targets (every subscription); true when the scan stopped at its limit (more to scan at once). */
  async function look(targets: readonly DeliveryTarget[]): Promise<boolean> {
    let now = opts.now();
    head ??= (await store.events.scan(null, 0)).resume;
    schedule.sync(targets, head, now);
    const scan = await store.events.scan(head, SCAN_LIMIT);
    schedule.observe(scan.events);
    head = scan.resume;
    const room = concurrency - loops.size;
    if (room > 0) {
      if (performance.now() - dueLookedAt >= pollMs) {
        dueLookedAt = performance.now();
        schedule.apply(await store.deliveries.due(now, room), now);
      }
      const unsure = schedule.unsure(now, STATES_PER_TICK);
      if (unsure.length > 0) schedule.apply(await store.deliveries.states(unsure), now);
      const chosen = schedule.choose(room, now);
      now = opts.now();
      for (const lease of chosen.length > 0 ? await store.deliveries.claim(owner, chosen, now, now + leaseMs) : []) {
        const uid = lease.subscription.uid;
        // Its lease ran out under a post slower than leaseMs and this process took it again: the loop goes on.
        if (loops.has(uid)) continue;
        schedule.started(uid);
        const loop = deliver(lease)
          .catch((err: unknown): LoopEnd => {
            onError(err);
            return { kind: "unknown" };
          })
          .then((end) => {
            ended.set(uid, end);
            // A slot comes free: release and claim again soon rather than at the next poll.
            if (running) plan(0);
          });
        loops.set(uid, loop);
      }
    }
    return scan.events.length >= SCAN_LIMIT;
  }

  /** The next poll, or sooner when a retry or a lease held elsewhere comes due before it. */
  function nextDelay(): number {
    const now = opts.now();
    const due = schedule.nextDue(now);
    return due === null ? pollMs : Math.max(0, Math.min(pollMs, due - now));
  }

  /**
   * Releases the leases of loops that have ended. One whose release fails
   * stays listed (not claimed again by this process) and is released by a
   * later tick; its lease never outlives this process by more than leaseMs.
   */
  async function releaseEnded(): Promise<void> {
    for (const [uid, end] of [...ended]) {
      try {
        await store.deliveries.release(uid, owner);
      } catch (err) {
        onError(err);
        continue;
      }
      ended.delete(uid);
      loops.delete(uid);
      schedule.ended(uid, end, opts.now());
    }
  }

  /**
   * Delivers one leased subscription's due events, in feed order, until it
   * is caught up, must wait for a retry, or has used its turn (a batch of
   * events or turnMs of posting).
   */
  async function deliver(lease: DeliveryLease): Promise<LoopEnd> {
    const s = lease.subscription;
    const visible = await subscriptionVisibility(opts.authz, s);
    let cursor: FeedPosition | null = lease.cursor;
    let pending = lease.retry;
    const status = { state: s.state, lastError: s.lastError };
    const turnEnds = performance.now() + turnMs;
    let posted = 0;
    while (running) {
      const page = await store.events.read({
        after: cursor,
        startTime: cursor === null ? lease.startTime : undefined,
        typePrefix: readPrefix(s),
        hierarchy: {},
        visible,
        limit: batch,
      });
      if (page.expired) {
        // Events were pruned before this subscription received them (it was failing or stopped for longer than
        // the retention): it goes on with the oldest event kept, and says what it lost.
        await mark(s, status, "failing", "events were pruned before they could be delivered");
        cursor = null;
        lease = { ...lease, startTime: 0 };
        continue;
      }
      for (const event of page.events) {
        if (!running) return { kind: "unknown" };
        if (!typeMatches(s.types, event.type)) continue;
        if (cursor !== null && posted > 0 && (posted >= batch || performance.now() >= turnEnds)) return { kind: "yielded", cursor };
        schedule.delivering(s.uid, event.time);
        const retrying = pending !== null && pending.eventId === event.id ? pending : null;
        const attempt = await postEvent({ ...opts, sinkTimeoutMs }, s, event, (retrying?.attempts ?? 0) + 1);
        posted++;
        const { step, final } = nextStep(event, attempt, retrying);
        if (!(await store.deliveries.record(s.uid, owner, final, step, leaseUntil()))) return { kind: "unknown" }; // the lease was lost
        opts.onAttempt?.(s, final, event);
        if (step.kind === "retry") return { kind: "retry", at: step.retry.nextAttemptAt }; // released; claimed again when due
        cursor = event.position;
        pending = null;
        if (final.outcome === "delivered") await mark(s, status, "active", status.lastError);
        else await mark(s, status, "failing", `event ${event.id} was not delivered: ${final.error}`);
      }
      const caughtUp = page.events.length < batch;
      if (cursor === null || positionDiffers(cursor, page.resume)) {
        if (!(await store.deliveries.advance(s.uid, owner, page.resume))) return { kind: "unknown" };
        cursor = page.resume;
      }
      if (caughtUp) return { kind: "caught-up", cursor };
    }
    return { kind: "unknown" };
  }

  /** What an attempt does to the delivery state: pass the event, or wait and retry it. */
  function nextStep(
    event: EventRecord,
    attempt: DeliveryLogEntry,
    retrying: DeliveryLease["retry"],
  ): { step: DeliveryStep; final: DeliveryLogEntry } {
    if (attempt.outcome !== "retry") return { step: { kind: "advance", cursor: event.position }, final: attempt };
    const firstAttemptAt = retrying?.firstAttemptAt ?? attempt.time;
    const next = retry(attempt.attempt, firstAttemptAt, opts.now());
    if (next === "give-up") {
      const final = { ...attempt, outcome: "failed" as const, error: `given up after 3 days of retries: ${attempt.error}` };
      return { step: { kind: "advance", cursor: event.position }, final };
    }
    return {
      step: { kind: "retry", retry: { eventId: event.id, attempts: attempt.attempt, firstAttemptAt, nextAttemptAt: next.at } },
      final: attempt,
    };
  }

  /**
   * Sets the subscription's state and last error when they change (a write
   * to the versioned table only then). A recovery keeps the last error: it
   * says what was lost.
   */
  async function mark(
    s: SubscriptionRecord,
    status: { state: SubscriptionState; lastError: string },
    state: SubscriptionState,
    error: string,
  ) {
    if (status.state === state && status.lastError === error) return;
    await store.subscriptions.setState(s.uid, state, error, opts.now());
    status.state = state;
    status.lastError = error;
  }

  return {
    get active() {
      return loops.size - ended.size;
    },
    lags() {
      return schedule.lags(opts.now());
    },
    start() {
      if (running) return;
      running = true;
      plan(0);
    },
    wake() {
      // Ticks woken by commits start at most every WAKE_SPACING_MS: under a stream of writes, a scan per spacing
      // rather than one per commit (each event still reaches its sink within the spacing of its commit).
      if (running && !idle) plan(Math.max(0, lastTick + WAKE_SPACING_MS - performance.now()));
    },
    async stop() {
      running = false;
      await ticker.stop();
      let waited: NodeJS.Timeout | undefined;
      // Not unref'd: a process closing keeps running until its posts are done or this bound has passed.
      const bound = new Promise<void>((resolve) => {
        waited = setTimeout(resolve, opts.stopWaitMs ?? sinkTimeoutMs);
      });
      await Promise.race([Promise.allSettled([...loops.values()]), bound]);
      clearTimeout(waited);
      // Posts still in flight record nothing once their lease is gone: another process posts those events again now.
      await Promise.allSettled([...loops.keys()].map((uid) => store.deliveries.release(uid, owner)));
    },
  };
}

function positionDiffers(a: FeedPosition, b: FeedPosition): boolean {
  return a.txid !== b.txid || a.seq !== b.seq;
}
