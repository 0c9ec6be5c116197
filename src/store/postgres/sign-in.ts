import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import {
  USED_REFRESH_TOKENS_KEPT,
  type RefreshTokenRecord,
  type RefreshTokenStore,
  type RotateResult,
  type SignInFlowChanges,
  type SignInFlowRecord,
  type SignInFlowStatus,
  type SignInFlowStore,
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
  FLOW_SQL,
  insertValues as flowValues,
  hashesSet,
  toRecord as toFlow,
  tooManyFlows,
  type FlowHashColumn,
  type SignInFlowRow,
} from "../sql/sign-in-flows.js";
import { exists, numbered, one, type Queryable } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/** Runs sql ("?" placeholders) and answers how many rows it changed. */
async function changed(q: Queryable, sql: string, params: unknown[]): Promise<number> {
  return (await q.query(numbered(sql), params)).rowCount ?? 0;
}

/** SignInFlowStore over PostgreSQL: a create's bound and an advance's compare-and-set hold under SERIALIZABLE. */
export class PgSignInFlowStore implements SignInFlowStore {
  constructor(private readonly run: Runner) {}

  create(flow: SignInFlowRecord, maxPerAddress: number, now: number): Promise<void> {
    return this.run.atomically(async (q) => {
      const count = await one<{ n: number | string }>(q, FLOW_SQL.countAtAddress, [flow.clientAddress, now]);
      if (Number(count?.n ?? 0) >= maxPerAddress) throw tooManyFlows();
      if (await exists(q, FLOW_SQL.get, [flow.id, now])) throw new AlreadyExistsError("sign-in flow", "");
      for (const [column, hash] of hashesSet(flow))
        if (await exists(q, FLOW_SQL.by(column), [hash, now])) throw new AlreadyExistsError("sign-in flow", "");
      const drop = dropExpiredHoldersSql(flow, now);
      await changed(q, drop.sql, drop.params);
      try {
        await changed(q, FLOW_SQL.insert, flowValues(flow));
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("sign-in flow", "");
        throw err;
      }
    });
  }

  get(id: string, now: number): Promise<SignInFlowRecord | null> {
    return this.one(FLOW_SQL.get, id, now);
  }

  byUpstreamState(hash: string, now: number): Promise<SignInFlowRecord | null> {
    return this.by("upstream_state_hash", hash, now);
  }

  byDeviceCode(hash: string, now: number): Promise<SignInFlowRecord | null> {
    return this.by("device_code_hash", hash, now);
  }

  byUserCode(hash: string, now: number): Promise<SignInFlowRecord | null> {
    return this.by("user_code_hash", hash, now);
  }

  byCode(hash: string, now: number): Promise<SignInFlowRecord | null> {
    return this.by("code_hash", hash, now);
  }

  async advance(id: string, from: SignInFlowStatus, changes: SignInFlowChanges): Promise<boolean> {
    const update = advanceSql(id, from, changes);
    try {
      return (await changed(this.run.q, update.sql, update.params)) > 0;
    } catch (err) {
      if (sqlState(err) === "23505") throw new AlreadyExistsError("sign-in flow", "");
      throw err;
    }
  }

  deleteExpired(now: number, limit: number): Promise<number> {
    return changed(this.run.q, FLOW_SQL.deleteExpired, [now, limit]);
  }

  private by(column: FlowHashColumn, hash: string, now: number): Promise<SignInFlowRecord | null> {
    return hash === "" ? Promise.resolve(null) : this.one(FLOW_SQL.by(column), hash, now);
  }

  private async one(sql: string, key: string, now: number): Promise<SignInFlowRecord | null> {
    const row = await one<SignInFlowRow>(this.run.q, sql, [key, now]);
    return row && toFlow(row);
  }
}

/**
 * RefreshTokenStore over PostgreSQL. A rotation is one SERIALIZABLE transaction: of two concurrent rotations of
 * one token, the second runs again after the first commits and finds the token used (reuse).
 */
export class PgRefreshTokenStore implements RefreshTokenStore {
  constructor(private readonly run: Runner) {}

  start(token: RefreshTokenRecord, maxFamilies: number): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, REFRESH_SQL.identityExists, [token.identityUid]))) throw new NotFoundError("identity", token.identityUid);
      if (await exists(q, REFRESH_SQL.get, [token.hash])) throw new AlreadyExistsError("refresh token", "");
      const { rows } = await q.query<{ family_id: string }>(numbered(REFRESH_SQL.familiesOf), [token.identityUid]);
      for (const { family_id } of rows.slice(Math.max(0, maxFamilies - 1))) await changed(q, REFRESH_SQL.deleteFamily, [family_id]);
      try {
        await changed(q, REFRESH_SQL.insert, refreshValues(token));
      } catch (err) {
        if (sqlState(err) === "23503") throw new NotFoundError("identity", token.identityUid);
        if (sqlState(err) === "23505") throw new AlreadyExistsError("refresh token", "");
        throw err;
      }
    });
  }

  rotate(
    hash: string,
    next: (old: RefreshTokenRecord) => RefreshTokenRecord,
    expired: (old: RefreshTokenRecord) => boolean,
  ): Promise<RotateResult> {
    return this.run.atomically(async (q): Promise<RotateResult> => {
      const row = await one<RefreshTokenRow>(q, REFRESH_SQL.get, [hash]);
      if (!row) return { kind: "invalid" };
      const old = toToken(row);
      if (old.usedTime !== 0) {
        await changed(q, REFRESH_SQL.deleteFamily, [old.familyId]);
        return { kind: "reused", familyId: old.familyId };
      }
      if (expired(old)) return { kind: "invalid" };
      const successor = next(old);
      if (!sameFamily(old, successor)) throw new Error("a rotated refresh token must stay in its family");
      if ((await changed(q, REFRESH_SQL.markUsed, [successor.issueTime, hash])) === 0) {
        await changed(q, REFRESH_SQL.deleteFamily, [old.familyId]);
        return { kind: "reused", familyId: old.familyId };
      }
      await changed(q, REFRESH_SQL.insert, refreshValues(successor));
      await changed(q, REFRESH_SQL.trimUsed, [old.familyId, old.familyId, USED_REFRESH_TOKENS_KEPT]);
      return { kind: "rotated", previous: { ...old, usedTime: successor.issueTime }, next: successor };
    });
  }

  async get(hash: string): Promise<RefreshTokenRecord | null> {
    const row = await one<RefreshTokenRow>(this.run.q, REFRESH_SQL.get, [hash]);
    return row && toToken(row);
  }

  revokeFamily(familyId: string): Promise<number> {
    return changed(this.run.q, REFRESH_SQL.deleteFamily, [familyId]);
  }

  revokeIdentity(identityUid: string): Promise<number> {
    return changed(this.run.q, REFRESH_SQL.deleteIdentity, [identityUid]);
  }

  revokeKey(keyId: string): Promise<number> {
    return changed(this.run.q, REFRESH_SQL.deleteKey, [keyId]);
  }

  deleteExpired(idleBefore: number, startedBefore: number, limit: number): Promise<number> {
    return changed(this.run.q, REFRESH_SQL.deleteExpired, [idleBefore, startedBefore, limit]);
  }
}
