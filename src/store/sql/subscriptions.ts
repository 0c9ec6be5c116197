import {
  cursorOf,
  type DeliveryLease,
  type DeliveryLogEntry,
  type DeliveryLogOutcome,
  type DeliveryState,
  type DeliveryTarget,
  type SubscriptionOrder,
  type SubscriptionRecord,
  type SubscriptionState,
} from "../subscription-store.js";
import { isTrue, type TableSpec } from "./table.js";

/** The subscriptions table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<SubscriptionOrder> = {
  table: "subscriptions",
  select: "uid, parent_uid, sink, types, state, last_error, secret, creator_uid, creator_admin, create_time, update_time",
  orderColumns: { uid: "uid", created_at: "create_time", updated_at: "update_time" },
};

export interface SubscriptionRow {
  uid: string;
  parent_uid: string;
  sink: string;
  types: string;
  state: string;
  last_error: string;
  secret: string;
  creator_uid: string;
  creator_admin: number | boolean;
  create_time: number | string;
  update_time: number | string;
}

export function toRecord(row: SubscriptionRow): SubscriptionRecord {
  return {
    uid: row.uid,
    groupUid: row.parent_uid,
    sink: row.sink,
    types: JSON.parse(row.types) as string[],
    state: row.state as SubscriptionState,
    lastError: row.last_error,
    secret: row.secret,
    creatorUid: row.creator_uid,
    creatorAdmin: isTrue(row.creator_admin),
    createTime: Number(row.create_time),
    updateTime: Number(row.update_time),
  };
}

/** A subscription's columns as both engines insert them. */
export function subscriptionColumns(s: SubscriptionRecord) {
  return {
    uid: s.uid,
    parent_uid: s.groupUid,
    sink: s.sink,
    types: JSON.stringify(s.types),
    state: s.state,
    last_error: s.lastError,
    secret: s.secret,
    creator_uid: s.creatorUid,
    creator_admin: s.creatorAdmin,
    create_time: s.createTime,
    update_time: s.updateTime,
  };
}

/** A claimed subscription joined with its delivery state (subscription_deliveries d). */
export interface LeaseRow extends SubscriptionRow {
  cursor: string | null;
  start_time: number | string;
  retry_event_id: string | null;
  retry_attempts: number;
  retry_first_at: number | string | null;
  next_attempt_at: number | string;
}

/** The select list of a LeaseRow over subscriptions s joined with subscription_deliveries d. */
export const LEASE_SELECT = `${TABLE.select
  .split(", ")
  .map((c) => `s.${c}`)
  .join(", ")}, d.cursor, d.start_time, d.retry_event_id, d.retry_attempts, d.retry_first_at, d.next_attempt_at`;

export function toLease(row: LeaseRow): DeliveryLease {
  return {
    subscription: toRecord(row),
    cursor: cursorOf(row.cursor),
    startTime: Number(row.start_time),
    retry:
      row.retry_event_id === null
        ? null
        : {
            eventId: row.retry_event_id,
            attempts: row.retry_attempts,
            firstAttemptAt: Number(row.retry_first_at),
            nextAttemptAt: Number(row.next_attempt_at),
          },
  };
}

/** The subscriptions columns of a DeliveryTarget, by uid. */
export const TARGETS_SQL = "SELECT uid, parent_uid, types, create_time FROM subscriptions ORDER BY uid";

export interface TargetRow {
  uid: string;
  parent_uid: string;
  types: string;
  create_time: number | string;
}

export function toTarget(row: TargetRow): DeliveryTarget {
  return { uid: row.uid, groupUid: row.parent_uid, types: JSON.parse(row.types) as string[], createTime: Number(row.create_time) };
}

/** The subscription_deliveries columns of a DeliveryState. */
export const STATE_SELECT =
  "subscription_uid, cursor, lease_until, CASE WHEN retry_event_id IS NULL THEN 0 ELSE next_attempt_at END AS next_attempt_at";

/** The due retries no one holds, earliest first (parameters: now, now, limit). */
export const DUE_WHERE =
  "retry_event_id IS NOT NULL AND next_attempt_at <= ? AND lease_until <= ? ORDER BY next_attempt_at, subscription_uid LIMIT ?";

export interface StateRow {
  subscription_uid: string;
  cursor: string | null;
  lease_until: number | string;
  next_attempt_at: number | string;
}

export function toState(row: StateRow): DeliveryState {
  return {
    uid: row.subscription_uid,
    cursor: cursorOf(row.cursor),
    leaseUntil: Number(row.lease_until),
    nextAttemptAt: Number(row.next_attempt_at),
  };
}

/** The delivery_attempts columns of the log, newest first. */
export const LOG_SELECT = "time, event_id, event_type, status, latency_ms, outcome, error, attempt";

export interface LogRow {
  time: number | string;
  event_id: string;
  event_type: string;
  status: number;
  latency_ms: number;
  outcome: string;
  error: string;
  attempt: number;
}

export function toLogEntry(row: LogRow): DeliveryLogEntry {
  return {
    time: Number(row.time),
    eventId: row.event_id,
    eventType: row.event_type,
    status: row.status,
    latencyMs: row.latency_ms,
    outcome: row.outcome as DeliveryLogOutcome,
    error: row.error,
    attempt: row.attempt,
  };
}
