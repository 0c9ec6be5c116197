import type { Database, Statement } from "better-sqlite3";
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
  type DeliveryTarget,
  type SubscriptionFilter,
  type SubscriptionOrder,
  type SubscriptionRecord,
  type SubscriptionState,
  type SyncDeliveryStore,
  type SyncSubscriptionStore,
} from "../subscription-store.js";
import type { ListRunner } from "./list.js";

/** SubscriptionStore over SQLite; its delivery state and log go with it (FK cascade). */
export class SqliteSubscriptionStore implements SyncSubscriptionStore {
  private readonly insertStmt: Statement;
  private readonly insertStateStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly setStateStmt: Statement;
  private readonly countInTreeStmt: Statement;
  private readonly targetsStmt: Statement;

  constructor(
    db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO subscriptions (uid, parent_uid, sink, types, state, last_error, secret, creator_uid, creator_admin, create_time, update_time)
       VALUES (@uid, @parent_uid, @sink, @types, @state, @last_error, @secret, @creator_uid, @creator_admin, @create_time, @update_time)`,
    );
    this.insertStateStmt = db.prepare("INSERT INTO subscription_deliveries (subscription_uid, start_time) VALUES (?, ?)");
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM subscriptions WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.deleteStmt = db.prepare("DELETE FROM subscriptions WHERE uid = ?");
    // A uid is hex and slashes: no LIKE wildcard can hide in it.
    this.targetsStmt = db.prepare(TARGETS_SQL);
    this.countInTreeStmt = db.prepare("SELECT count(*) FROM subscriptions WHERE parent_uid = ? OR parent_uid LIKE ? || '/%'").pluck();
    this.setStateStmt = db.prepare(
      `UPDATE subscriptions SET state = ?, last_error = ?, update_time = ?
       WHERE uid = ? AND (state <> ? OR last_error <> ?)`,
    );
  }

  create(subscription: SubscriptionRecord, startTime: number): void {
    if (!this.groupExistsStmt.get(subscription.groupUid)) throw new NotFoundError("group", subscription.groupUid);
    if (this.getStmt.get(subscription.uid)) throw new AlreadyExistsError("subscription", subscription.uid);
    const row = subscriptionColumns(subscription);
    this.insertStmt.run({ ...row, creator_admin: row.creator_admin ? 1 : 0 });
    this.insertStateStmt.run(subscription.uid, startTime);
  }

  get(uid: string): SubscriptionRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  targets(): DeliveryTarget[] {
    return (this.targetsStmt.all() as TargetRow[]).map(toTarget);
  }

  countInTree(rootUid: string): number {
    return this.countInTreeStmt.get(rootUid, rootUid) as number;
  }

  list(query: ListQuery<SubscriptionFilter, SubscriptionOrder>): ListResult<SubscriptionRecord> {
    return this.lists.records(TABLE, query, [], toRecord);
  }

  delete(uid: string): void {
    if (this.deleteStmt.run(uid).changes === 0) throw new NotFoundError("subscription", uid);
  }

  setState(uid: string, state: SubscriptionState, lastError: string, updateTime: number): boolean {
    if (this.setStateStmt.run(state, lastError, updateTime, uid, state, lastError).changes > 0) return true;
    return this.getStmt.get(uid) !== undefined;
  }
}

/**
 * DeliveryStore over SQLite. One writer at a time (processes sharing the
 * file take the write lock in turn), so a conditional UPDATE is enough to
 * take a lease: two processes never both see it free.
 */
export class SqliteDeliveryStore implements SyncDeliveryStore {
  private readonly claimStmt: Statement;
  private readonly statesStmt: Statement;
  private readonly dueStmt: Statement;
  private readonly leaseStmt: Statement;
  private readonly advanceStmt: Statement;
  private readonly retryStmt: Statement;
  private readonly moveStmt: Statement;
  private readonly releaseStmt: Statement;
  private readonly nextLogSeqStmt: Statement;
  private readonly insertLogStmt: Statement;
  private readonly trimLogStmt: Statement;
  private readonly logStmt: Statement;
  private readonly positionStmt: Statement;

  constructor(private readonly db: Database) {
    this.claimStmt = db.prepare(
      `UPDATE subscription_deliveries SET lease_owner = @owner, lease_until = @leaseUntil
       WHERE subscription_uid IN (SELECT value FROM json_each(@uids)) AND lease_until <= @now AND next_attempt_at <= @now
       RETURNING subscription_uid`,
    );
    this.statesStmt = db.prepare(
      `SELECT ${STATE_SELECT} FROM subscription_deliveries WHERE subscription_uid IN (SELECT value FROM json_each(?))`,
    );
    this.dueStmt = db.prepare(`SELECT ${STATE_SELECT} FROM subscription_deliveries WHERE ${DUE_WHERE}`);
    this.leaseStmt = db.prepare(
      `SELECT ${LEASE_SELECT} FROM subscriptions s JOIN subscription_deliveries d ON d.subscription_uid = s.uid WHERE s.uid = ?`,
    );
    this.advanceStmt = db.prepare(
      `UPDATE subscription_deliveries
       SET cursor = @cursor, retry_event_id = NULL, retry_attempts = 0, retry_first_at = NULL, next_attempt_at = 0, lease_until = @leaseUntil
       WHERE subscription_uid = @uid AND lease_owner = @owner`,
    );
    this.retryStmt = db.prepare(
      `UPDATE subscription_deliveries
       SET retry_event_id = @eventId, retry_attempts = @attempts, retry_first_at = @firstAttemptAt, next_attempt_at = @nextAttemptAt,
           lease_until = @leaseUntil
       WHERE subscription_uid = @uid AND lease_owner = @owner`,
    );
    this.moveStmt = db.prepare("UPDATE subscription_deliveries SET cursor = ? WHERE subscription_uid = ? AND lease_owner = ?");
    this.releaseStmt = db.prepare(
      "UPDATE subscription_deliveries SET lease_owner = NULL, lease_until = 0 WHERE subscription_uid = ? AND lease_owner = ?",
    );
    this.nextLogSeqStmt = db
      .prepare("UPDATE subscription_deliveries SET log_seq = log_seq + 1 WHERE subscription_uid = ? RETURNING log_seq")
      .pluck();
    this.insertLogStmt = db.prepare(
      `INSERT INTO delivery_attempts (subscription_uid, seq, time, event_id, event_type, status, latency_ms, outcome, error, attempt)
       VALUES (@uid, @seq, @time, @eventId, @eventType, @status, @latencyMs, @outcome, @error, @attempt)`,
    );
    this.trimLogStmt = db.prepare("DELETE FROM delivery_attempts WHERE subscription_uid = ? AND seq <= ?");
    this.logStmt = db.prepare(`SELECT ${LOG_SELECT} FROM delivery_attempts WHERE subscription_uid = ? ORDER BY seq DESC LIMIT ?`);
    this.positionStmt = db.prepare("SELECT seq FROM events WHERE id = ?").pluck();
  }

  claim(owner: string, uids: readonly string[], now: number, leaseUntil: number): DeliveryLease[] {
    if (uids.length === 0) return [];
    const claimed = this.claimStmt.all({ owner, uids: JSON.stringify(uids), now, leaseUntil }) as { subscription_uid: string }[];
    return claimed.map((u) => toLease(this.leaseStmt.get(u.subscription_uid) as LeaseRow));
  }

  states(uids: readonly string[]): DeliveryState[] {
    if (uids.length === 0) return [];
    return (this.statesStmt.all(JSON.stringify(uids)) as StateRow[]).map(toState);
  }

  due(now: number, limit: number): DeliveryState[] {
    return (this.dueStmt.all(now, now, limit) as StateRow[]).map(toState);
  }

  record(uid: string, owner: string, attempt: DeliveryLogEntry, step: DeliveryStep, leaseUntil: number): boolean {
    return this.db.transaction(() => {
      const changed =
        step.kind === "advance"
          ? this.advanceStmt.run({ uid, owner, cursor: cursorText(step.cursor), leaseUntil }).changes
          : this.retryStmt.run({ uid, owner, leaseUntil, ...step.retry }).changes;
      if (changed === 0) return false;
      this.appendLog(uid, attempt);
      return true;
    })();
  }

  advance(uid: string, owner: string, cursor: FeedPosition): boolean {
    return this.moveStmt.run(cursorText(cursor), uid, owner).changes > 0;
  }

  release(uid: string, owner: string): void {
    this.releaseStmt.run(uid, owner);
  }

  logAttempt(uid: string, attempt: DeliveryLogEntry): boolean {
    return this.db.transaction(() => this.appendLog(uid, attempt))();
  }

  log(uid: string): DeliveryLogEntry[] {
    return (this.logStmt.all(uid, DELIVERY_LOG_LIMIT) as LogRow[]).map(toLogEntry);
  }

  eventPosition(eventId: string): FeedPosition | null {
    const seq = this.positionStmt.get(eventId) as number | undefined;
    return seq === undefined ? null : { txid: 0n, seq: BigInt(seq) };
  }

  /** Adds an entry with the subscription's next log number and drops those past the limit; false when it is gone. */
  private appendLog(uid: string, attempt: DeliveryLogEntry): boolean {
    const seq = this.nextLogSeqStmt.get(uid) as number | undefined;
    if (seq === undefined) return false;
    this.insertLogStmt.run({ uid, seq, ...attempt });
    this.trimLogStmt.run(uid, seq - DELIVERY_LOG_LIMIT);
    return true;
  }
}
