import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import {
  USED_REFRESH_TOKENS_KEPT,
  type RefreshTokenRecord,
  type RotateResult,
  type SignInFlowChanges,
  type SignInFlowRecord,
  type SignInFlowStatus,
  type SyncRefreshTokenStore,
  type SyncSignInFlowStore,
} from "../sign-in-store.js";
import {
  REFRESH_SQL,
  insertValues as refreshValues,
  sameFamily,
  toRecord as toToken,
  type RefreshTokenRow,
} from "../sql/refresh-tokens.js";
import {
  advanceSql,
  dropExpiredHoldersSql,
  FLOW_HASH_COLUMNS,
  FLOW_SQL,
  insertValues as flowValues,
  hashesSet,
  toRecord as toFlow,
  tooManyFlows,
  type FlowHashColumn,
  type SignInFlowRow,
} from "../sql/sign-in-flows.js";

/** Statements built from a flow's shape (which hashes it holds, which fields change), prepared once each. */
class StatementCache {
  private readonly prepared = new Map<string, Statement>();
  constructor(private readonly db: Database) {}
  get(sql: string): Statement {
    let stmt = this.prepared.get(sql);
    if (!stmt) this.prepared.set(sql, (stmt = this.db.prepare(sql)));
    return stmt;
  }
}

/** SignInFlowStore over SQLite: one writer at a time, so a check before an insert or a conditional UPDATE is enough. */
export class SqliteSignInFlowStore implements SyncSignInFlowStore {
  private readonly statements: StatementCache;
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly countStmt: Statement;
  private readonly deleteExpiredStmt: Statement;
  private readonly byStmt: Record<FlowHashColumn, Statement>;

  constructor(db: Database) {
    this.statements = new StatementCache(db);
    this.insertStmt = db.prepare(FLOW_SQL.insert);
    this.getStmt = db.prepare(FLOW_SQL.get);
    this.countStmt = db.prepare(FLOW_SQL.countAtAddress).pluck();
    this.deleteExpiredStmt = db.prepare(FLOW_SQL.deleteExpired);
    this.byStmt = Object.fromEntries(FLOW_HASH_COLUMNS.map((c) => [c, db.prepare(FLOW_SQL.by(c))])) as Record<FlowHashColumn, Statement>;
  }

  create(flow: SignInFlowRecord, maxPerAddress: number, now: number): void {
    if ((this.countStmt.get(flow.clientAddress, now) as number) >= maxPerAddress) throw tooManyFlows();
    if (this.getStmt.get(flow.id, now)) throw new AlreadyExistsError("sign-in flow", "");
    for (const [column, hash] of hashesSet(flow)) if (this.byStmt[column].get(hash, now)) throw new AlreadyExistsError("sign-in flow", "");
    const drop = dropExpiredHoldersSql(flow, now);
    this.statements.get(drop.sql).run(...drop.params);
    this.insertStmt.run(...flowValues(flow));
  }

  get(id: string, now: number): SignInFlowRecord | null {
    return this.one(this.getStmt, id, now);
  }

  byUpstreamState(hash: string, now: number): SignInFlowRecord | null {
    return this.by("upstream_state_hash", hash, now);
  }

  byDeviceCode(hash: string, now: number): SignInFlowRecord | null {
    return this.by("device_code_hash", hash, now);
  }

  byUserCode(hash: string, now: number): SignInFlowRecord | null {
    return this.by("user_code_hash", hash, now);
  }

  byCode(hash: string, now: number): SignInFlowRecord | null {
    return this.by("code_hash", hash, now);
  }

  advance(id: string, from: SignInFlowStatus, changes: SignInFlowChanges): boolean {
    // A hash set here must name no other flow (expired or not: the unique index holds until the sweep).
    for (const [column, hash] of hashesSet(changes)) {
      const holder = this.statements.get(`SELECT id FROM sign_in_flows WHERE ${column} = ?`).pluck().get(hash) as string | undefined;
      if (holder !== undefined && holder !== id) throw new AlreadyExistsError("sign-in flow", "");
    }
    const update = advanceSql(id, from, changes);
    return this.statements.get(update.sql).run(...update.params).changes > 0;
  }

  deleteExpired(now: number, limit: number): number {
    return this.deleteExpiredStmt.run(now, limit).changes;
  }

  private by(column: FlowHashColumn, hash: string, now: number): SignInFlowRecord | null {
    return hash === "" ? null : this.one(this.byStmt[column], hash, now);
  }

  private one(stmt: Statement, key: string, now: number): SignInFlowRecord | null {
    const row = stmt.get(key, now) as SignInFlowRow | undefined;
    return row ? toFlow(row) : null;
  }
}

/** RefreshTokenStore over SQLite: each method is one step of a group commit, so a rotation is atomic. */
export class SqliteRefreshTokenStore implements SyncRefreshTokenStore {
  private readonly getStmt: Statement;
  private readonly insertStmt: Statement;
  private readonly identityExistsStmt: Statement;
  private readonly familiesOfStmt: Statement;
  private readonly markUsedStmt: Statement;
  private readonly trimUsedStmt: Statement;
  private readonly deleteFamilyStmt: Statement;
  private readonly deleteIdentityStmt: Statement;
  private readonly deleteKeyStmt: Statement;
  private readonly deleteExpiredStmt: Statement;

  constructor(db: Database) {
    this.getStmt = db.prepare(REFRESH_SQL.get);
    this.insertStmt = db.prepare(REFRESH_SQL.insert);
    this.identityExistsStmt = db.prepare(REFRESH_SQL.identityExists);
    this.familiesOfStmt = db.prepare(REFRESH_SQL.familiesOf).pluck();
    this.markUsedStmt = db.prepare(REFRESH_SQL.markUsed);
    this.trimUsedStmt = db.prepare(REFRESH_SQL.trimUsed);
    this.deleteFamilyStmt = db.prepare(REFRESH_SQL.deleteFamily);
    this.deleteIdentityStmt = db.prepare(REFRESH_SQL.deleteIdentity);
    this.deleteKeyStmt = db.prepare(REFRESH_SQL.deleteKey);
    this.deleteExpiredStmt = db.prepare(REFRESH_SQL.deleteExpired);
  }

  start(token: RefreshTokenRecord, maxFamilies: number): void {
    if (!this.identityExistsStmt.get(token.identityUid)) throw new NotFoundError("identity", token.identityUid);
    if (this.getStmt.get(token.hash)) throw new AlreadyExistsError("refresh token", "");
    const families = this.familiesOfStmt.all(token.identityUid) as string[];
    for (const familyId of families.slice(Math.max(0, maxFamilies - 1))) this.deleteFamilyStmt.run(familyId);
    this.insertStmt.run(...refreshValues(token));
  }

  rotate(hash: string, next: (old: RefreshTokenRecord) => RefreshTokenRecord, expired: (old: RefreshTokenRecord) => boolean): RotateResult {
    const row = this.getStmt.get(hash) as RefreshTokenRow | undefined;
    if (!row) return { kind: "invalid" };
    const old = toToken(row);
    if (old.usedTime !== 0) {
      this.deleteFamilyStmt.run(old.familyId);
      return { kind: "reused", familyId: old.familyId };
    }
    if (expired(old)) return { kind: "invalid" };
    const successor = next(old);
    if (!sameFamily(old, successor)) throw new Error("a rotated refresh token must stay in its family");
    this.markUsedStmt.run(successor.issueTime, hash);
    this.insertStmt.run(...refreshValues(successor));
    this.trimUsedStmt.run(old.familyId, old.familyId, USED_REFRESH_TOKENS_KEPT);
    return { kind: "rotated", previous: { ...old, usedTime: successor.issueTime }, next: successor };
  }

  get(hash: string): RefreshTokenRecord | null {
    const row = this.getStmt.get(hash) as RefreshTokenRow | undefined;
    return row ? toToken(row) : null;
  }

  revokeFamily(familyId: string): number {
    return this.deleteFamilyStmt.run(familyId).changes;
  }

  revokeIdentity(identityUid: string): number {
    return this.deleteIdentityStmt.run(identityUid).changes;
  }

  revokeKey(keyId: string): number {
    return this.deleteKeyStmt.run(keyId).changes;
  }

  deleteExpired(idleBefore: number, startedBefore: number, limit: number): number {
    return this.deleteExpiredStmt.run(idleBefore, startedBefore, limit).changes;
  }
}
