import type { FeedPosition } from "../domain/events.js";
import type { Async } from "./async-type.js";
import type { ListQuery, ListResult } from "./sql/list-query.js";

/** Subscription orderings the store supports. */
export type SubscriptionOrder = "uid" | "created_at" | "updated_at";

/** Whether a subscription's deliveries go through: "failing" once an event was given up after its retries. */
export type SubscriptionState = "active" | "failing";

/** A subscription as stored. Times are milliseconds since the epoch. */
export interface SubscriptionRecord {
  /** A child uid of its group. */
  uid: string;
  /** The group whose subtree's events it receives. */
  groupUid: string;
  /** Where deliveries are posted. */
  sink: string;
  /** Type prefixes an event must start with one of; empty: every event. */
  types: string[];
  state: SubscriptionState;
  /** Why the last event given up was not delivered; "" while none was. */
  lastError: string;
  /** The "whsec_…" key that signs deliveries: stored as it is used, shown once, never listed by the API. */
  secret: string;
  /** The identity that created it: the events it receives are those this identity may list. */
  creatorUid: string;
  /** The creator was the built-in administrator (who sees every event). */
  creatorAdmin: boolean;
  createTime: number;
  updateTime: number;
}

/** What a deliverer needs of a subscription to tell which events concern it. */
export interface DeliveryTarget {
  uid: string;
  groupUid: string;
  types: string[];
  createTime: number;
}

/** Subscription list filters: none besides the hierarchy. */
export type SubscriptionFilter = Record<string, never>;

/** Persistence of subscriptions (their delivery state is the deliveries part's). */
export interface SyncSubscriptionStore {
  /**
   * Inserts a subscription and its delivery state, which starts with the
   * first event (in feed order) whose time is at or after startTime. Throws
   * NotFoundError when its group does not exist, AlreadyExistsError when
   * the uid is taken.
   */
  create(subscription: SubscriptionRecord, startTime: number): void;
  /** Returns the subscription, or null when absent. */
  get(uid: string): SubscriptionRecord | null;
  /**
   * Every subscription's uid, group, types and creation time, by uid: what a
   * deliverer matches the feed against (none: it has nothing to claim).
   */
  targets(): DeliveryTarget[];
  /** How many subscriptions the group rootUid and every group below it have (the per-organization quota). */
  countInTree(rootUid: string): number;
  /** Returns one page of subscriptions in the requested order. */
  list(query: ListQuery<SubscriptionFilter, SubscriptionOrder>): ListResult<SubscriptionRecord>;
  /** Deletes a subscription with its delivery state and log. Throws NotFoundError when absent. */
  delete(uid: string): void;
  /**
   * Sets state and lastError (and updateTime) when they differ from what is
   * stored; returns false when the subscription is gone.
   */
  setState(uid: string, state: SubscriptionState, lastError: string, updateTime: number): boolean;
}

/** The subscriptions part as every engine exposes it (Store.subscriptions). */
export type SubscriptionStore = Async<SyncSubscriptionStore>;

/** What came of one delivery attempt, as the log keeps it. */
export type DeliveryLogOutcome = "delivered" | "retry" | "failed";

/** One entry of a subscription's delivery log. */
export interface DeliveryLogEntry {
  /** When the attempt was made (ms). */
  time: number;
  eventId: string;
  eventType: string;
  /** The sink's HTTP status, 0 when it gave none. */
  status: number;
  latencyMs: number;
  outcome: DeliveryLogOutcome;
  /** Why it was not delivered; "" when it was. */
  error: string;
  /** This attempt's number for this event (1 for the first); 0 for a RedeliverEvent attempt. */
  attempt: number;
}

/** The event a subscription is retrying: the next read starts with it again. */
export interface RetryState {
  eventId: string;
  /** Failed attempts so far (at least 1). */
  attempts: number;
  /** When the first attempt was made (ms): retries stop 3 days after. */
  firstAttemptAt: number;
  /** When the next attempt is due (ms). */
  nextAttemptAt: number;
}

/** A subscription claimed for delivery by one process until its lease ends. */
export interface DeliveryLease {
  subscription: SubscriptionRecord;
  /** Where its feed resumes: right after this position; null before its first read (then from startTime). */
  cursor: FeedPosition | null;
  /** Where the first read starts (ms), while cursor is null. */
  startTime: number;
  /** The event being retried, if any. */
  retry: RetryState | null;
}

/** Where a subscription's delivery stands, as a deliverer decides whether to claim it. */
export interface DeliveryState {
  uid: string;
  /** Its feed resumes right after this; null before its first read. */
  cursor: FeedPosition | null;
  /** When its current lease ends (ms); 0 or past: no one holds it. */
  leaseUntil: number;
  /** When its retry is due (ms); 0 when it is not retrying. */
  nextAttemptAt: number;
}

/** How a recorded attempt moves a subscription's delivery state. */
export type DeliveryStep =
  /** The event is done with (delivered, failed or given up): the cursor moves past it. */
  | { kind: "advance"; cursor: FeedPosition }
  /** The event will be tried again: the cursor stays before it. */
  | { kind: "retry"; retry: RetryState };

/** Delivery log entries kept per subscription (older ones are deleted as new ones are added). */
export const DELIVERY_LOG_LIMIT = 100;

/**
 * Delivery state of subscriptions: leases, cursors, retries and the log
 * (src/delivery/deliverer.ts). Every change a lease holder makes is
 * conditional on still holding the lease, so a process whose lease expired
 * (it was slow, or killed) changes nothing another has since done.
 */
export interface SyncDeliveryStore {
  /**
   * Leases to owner, until leaseUntil, those of uids that no one holds (no
   * lease, or an expired one) and that are due (no retry waiting past now);
   * the others are left as they are. Which subscriptions to claim, and in
   * what order, is the deliverer's choice (src/delivery/schedule.ts).
   * PostgreSQL takes them with FOR UPDATE SKIP LOCKED, so processes claiming
   * at once take different ones; SQLite with one conditional UPDATE (one
   * writer at a time).
   */
  claim(owner: string, uids: readonly string[], now: number, leaseUntil: number): DeliveryLease[];
  /** The delivery state of each of uids that exists, in no particular order. */
  states(uids: readonly string[]): DeliveryState[];
  /**
   * The delivery states of at most limit subscriptions whose retry is due at
   * now and that no one holds, the earliest due first: retries recorded by
   * any process, found without reading every subscription.
   */
  due(now: number, limit: number): DeliveryState[];
  /**
   * Records an attempt in the log (keeping the last DELIVERY_LOG_LIMIT) and
   * applies step, extending the lease to leaseUntil, all in one transaction,
   * if owner still holds the lease; returns false (recording nothing) when it
   * does not.
   */
  record(uid: string, owner: string, attempt: DeliveryLogEntry, step: DeliveryStep, leaseUntil: number): boolean;
  /** Moves the cursor (a read found nothing to deliver before it) if owner holds the lease; false when it does not. */
  advance(uid: string, owner: string, cursor: FeedPosition): boolean;
  /** Gives up owner's lease (a no-op when it holds none), so any process may claim the subscription again. */
  release(uid: string, owner: string): void;
  /** Adds an attempt made outside the lease (RedeliverEvent) to the log; false when the subscription is gone. */
  logAttempt(uid: string, attempt: DeliveryLogEntry): boolean;
  /** The last attempts, newest first (at most DELIVERY_LOG_LIMIT). */
  log(uid: string): DeliveryLogEntry[];
  /** The feed position of the event with this id, or null when it is not kept (or never was). */
  eventPosition(eventId: string): FeedPosition | null;
}

/** The deliveries part as every engine exposes it (Store.deliveries). */
export type DeliveryStore = Async<SyncDeliveryStore>;

/** A cursor as the delivery state stores it: "txid.seq", decimal. */
export function cursorText(p: FeedPosition): string {
  return `${p.txid}.${p.seq}`;
}

/** The position a stored cursor names (null for NULL). */
export function cursorOf(text: string | null): FeedPosition | null {
  if (text === null) return null;
  const [txid, seq] = text.split(".");
  return { txid: BigInt(txid!), seq: BigInt(seq!) };
}
