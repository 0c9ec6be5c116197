import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import type { FeedPosition } from "../../domain/events.js";
import {
  DUE_WHERE,
  LEASE_SELECT,
  LOG_SELECT,
  STATE_SELECT,
  subscriptionColumns,
  TABLE,
  TARGETS_SQL,
  toLease,
  toLogEntry,
  toRecord,
  toState,
  toTarget,
  type LeaseRow,
  type LogRow,
  type StateRow,
  type SubscriptionRow,
  type TargetRow,
} from "../sql/subscriptions.js";
import type { ListQuery, ListResult } from "../store.js";
import {
  cursorText,
  DELIVERY_LOG_LIMIT,
  type DeliveryLease,
  type DeliveryLogEntry,
  type DeliveryState,
  type DeliveryStep,
  type DeliveryStore,
  type DeliveryTarget,
  type SubscriptionFilter,
  type SubscriptionOrder,
  type SubscriptionRecord,
  type SubscriptionState,
  type SubscriptionStore,
} from "../subscription-store.js";
import { exists, insertRow, listRecords, numbered, one, type Queryable } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/** SubscriptionStore over PostgreSQL; its delivery state and log go with it (FK cascade). */
export class PgSubscriptionStore implements SubscriptionStore {
  constructor(private readonly run: Runner) {}

  create(subscription: SubscriptionRecord, startTime: number): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [subscription.groupUid])))
        throw new NotFoundError("group", subscription.groupUid);
      if (await exists(q, "SELECT 1 FROM subscriptions WHERE uid = ?", [subscription.uid]))
        throw new AlreadyExistsError("subscription", subscription.uid);
      try {
        await insertRow(q, "subscriptions", subscriptionColumns(subscription));
        await insertRow(q, "subscription_deliveries", { subscription_uid: subscription.uid, start_time: startTime });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("subscription", subscription.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("group", subscription.groupUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<SubscriptionRecord | null> {
    const row = await one<SubscriptionRow>(this.run.q, `SELECT ${TABLE.select} FROM subscriptions WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  async targets(): Promise<DeliveryTarget[]> {
    const { rows } = await this.run.q.query<TargetRow>(TARGETS_SQL);
    return rows.map(toTarget);
  }

  async countInTree(rootUid: string): Promise<number> {
    // A uid is hex and slashes: no LIKE wildcard can hide in it.
    const { rows } = await this.run.q.query<{ n: string }>(
      "SELECT count(*) AS n FROM subscriptions WHERE parent_uid = $1 OR parent_uid LIKE $1 || '/%'",
      [rootUid],
    );
    return Number(rows[0]!.n);
  }

  list(query: ListQuery<SubscriptionFilter, SubscriptionOrder>): Promise<ListResult<SubscriptionRecord>> {
    return listRecords(this.run.q, TABLE, query, [], toRecord);
  }

  async delete(uid: string): Promise<void> {
    const { rowCount } = await this.run.q.query("DELETE FROM subscriptions WHERE uid = $1", [uid]);
    if ((rowCount ?? 0) === 0) throw new NotFoundError("subscription", uid);
  }

  async setState(uid: string, state: SubscriptionState, lastError: string, updateTime: number): Promise<boolean> {
    const { rowCount } = await this.run.q.query(
      "UPDATE subscriptions SET state = $1, last_error = $2, update_time = $3 WHERE uid = $4 AND (state <> $1 OR last_error <> $2)",
      [state, lastError, updateTime, uid],
    );
    if ((rowCount ?? 0) > 0) return true;
    return exists(this.run.q, "SELECT 1 FROM subscriptions WHERE uid = ?", [uid]);
  }
}

/**
 * DeliveryStore over PostgreSQL. A claim is one statement that locks the
 * due rows FOR UPDATE SKIP LOCKED and leases them: processes claiming at once
 * take disjoint sets, never waiting on one another.
 */
export class PgDeliveryStore implements DeliveryStore {
  constructor(private readonly run: Runner) {}

  async claim(owner: string, uids: readonly string[], now: number, leaseUntil: number): Promise<DeliveryLease[]> {
    if (uids.length === 0) return [];
    const { rows } = await this.run.q.query<LeaseRow>(
      `WITH due AS (
         SELECT subscription_uid FROM subscription_deliveries
         WHERE subscription_uid = ANY($2::text[]) AND lease_until <= $1 AND next_attempt_at <= $1
         FOR UPDATE SKIP LOCKED
       ), d AS (
         UPDATE subscription_deliveries t SET lease_owner = $3, lease_until = $4
         FROM due WHERE t.subscription_uid = due.subscription_uid RETURNING t.*
       )
       SELECT ${LEASE_SELECT} FROM subscriptions s JOIN d ON d.subscription_uid = s.uid`,
      [now, uids, owner, leaseUntil],
    );
    return rows.map(toLease);
  }

  async states(uids: readonly string[]): Promise<DeliveryState[]> {
    if (uids.length === 0) return [];
    const { rows } = await this.run.q.query<StateRow>(
      `SELECT ${STATE_SELECT} FROM subscription_deliveries WHERE subscription_uid = ANY($1::text[])`,
      [uids],
    );
    return rows.map(toState);
  }

  async due(now: number, limit: number): Promise<DeliveryState[]> {
    const { rows } = await this.run.q.query<StateRow>(numbered(`SELECT ${STATE_SELECT} FROM subscription_deliveries WHERE ${DUE_WHERE}`), [
      now,
      now,
      limit,
    ]);
    return rows.map(toState);
  }

  record(uid: string, owner: string, attempt: DeliveryLogEntry, step: DeliveryStep, leaseUntil: number): Promise<boolean> {
    return this.run.atomically(async (q) => {
      const moved =
        step.kind === "advance"
          ? await q.query(
              `UPDATE subscription_deliveries
               SET cursor = $1, retry_event_id = NULL, retry_attempts = 0, retry_first_at = NULL, next_attempt_at = 0, lease_until = $2
               WHERE subscription_uid = $3 AND lease_owner = $4`,
              [cursorText(step.cursor), leaseUntil, uid, owner],
            )
          : await q.query(
              `UPDATE subscription_deliveries
               SET retry_event_id = $1, retry_attempts = $2, retry_first_at = $3, next_attempt_at = $4, lease_until = $5
               WHERE subscription_uid = $6 AND lease_owner = $7`,
              [step.retry.eventId, step.retry.attempts, step.retry.firstAttemptAt, step.retry.nextAttemptAt, leaseUntil, uid, owner],
            );
      if ((moved.rowCount ?? 0) === 0) return false;
      return appendLog(q, uid, attempt);
    });
  }

  async advance(uid: string, owner: string, cursor: FeedPosition): Promise<boolean> {
    const { rowCount } = await this.run.q.query(
      "UPDATE subscription_deliveries SET cursor = $1 WHERE subscription_uid = $2 AND lease_owner = $3",
      [cursorText(cursor), uid, owner],
    );
    return (rowCount ?? 0) > 0;
  }

  async release(uid: string, owner: string): Promise<void> {
    await this.run.q.query(
      "UPDATE subscription_deliveries SET lease_owner = NULL, lease_until = 0 WHERE subscription_uid = $1 AND lease_owner = $2",
      [uid, owner],
    );
  }

  logAttempt(uid: string, attempt: DeliveryLogEntry): Promise<boolean> {
    return this.run.atomically((q) => appendLog(q, uid, attempt));
  }

  async log(uid: string): Promise<DeliveryLogEntry[]> {
    const { rows } = await this.run.q.query<LogRow>(
      `SELECT ${LOG_SELECT} FROM delivery_attempts WHERE subscription_uid = $1 ORDER BY seq DESC LIMIT $2`,
      [uid, DELIVERY_LOG_LIMIT],
    );
    return rows.map(toLogEntry);
  }

  async eventPosition(eventId: string): Promise<FeedPosition | null> {
    const row = await one<{ txid: string; seq: string }>(
      this.run.q,
      "SELECT txid::text AS txid, seq::text AS seq FROM events WHERE id = ?",
      [eventId],
    );
    return row && { txid: BigInt(row.txid), seq: BigInt(row.seq) };
  }
}

/** Adds an entry with the subscription's next log number and drops those past the limit; false when it is gone. */
async function appendLog(q: Queryable, uid: string, a: DeliveryLogEntry): Promise<boolean> {
  const next = await q.query<{ log_seq: string }>(
    "UPDATE subscription_deliveries SET log_seq = log_seq + 1 WHERE subscription_uid = $1 RETURNING log_seq::text AS log_seq",
    [uid],
  );
  const seq = next.rows[0]?.log_seq;
  if (seq === undefined) return false;
  await insertRow(q, "delivery_attempts", {
    subscription_uid: uid,
    seq,
    time: a.time,
    event_id: a.eventId,
    event_type: a.eventType,
    status: a.status,
    latency_ms: a.latencyMs,
    outcome: a.outcome,
    error: a.error,
    attempt: a.attempt,
  });
  await q.query("DELETE FROM delivery_attempts WHERE subscription_uid = $1 AND seq <= $2::bigint - $3", [uid, seq, DELIVERY_LOG_LIMIT]);
  return true;
}
