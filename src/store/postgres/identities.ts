import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type IdentityRow } from "../sql/identities.js";
import type {
  IdentityChanges,
  IdentityFilter,
  IdentityOrder,
  IdentityRecord,
  IdentityRelationship,
  IdentityStore,
  ListQuery,
  ListResult,
} from "../store.js";
import { exact, exists, insertRow, listRecords, one, updateRow } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

function relationshipColumns(r: IdentityRelationship): { relationship_kind: string; relationship: string } {
  return { relationship_kind: r.kind, relationship: JSON.stringify(r.kind === "claimMatch" ? r.claimMatch : r.staticKeys) };
}

/** IdentityStore over PostgreSQL; deleting an identity deletes its role bindings in the same transaction. */
export class PgIdentityStore implements IdentityStore {
  constructor(private readonly run: Runner) {}

  create(identity: IdentityRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      if (identity.parentUid !== null && !(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [identity.parentUid]))) {
        throw new NotFoundError("group", identity.parentUid);
      }
      if (await exists(q, "SELECT 1 FROM identities WHERE uid = ?", [identity.uid])) throw new AlreadyExistsError("identity", identity.uid);
      try {
        await insertRow(q, "identities", {
          uid: identity.uid,
          parent_uid: identity.parentUid,
          name: identity.name,
          description: identity.description,
          email: identity.email,
          email_unverified: identity.emailUnverified,
          company: identity.company,
          ...relationshipColumns(identity.relationship),
          last_seen_time: identity.lastSeenTime,
          create_time: identity.createTime,
          update_time: identity.updateTime,
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("identity", identity.uid);
        if (sqlState(err) === "23503" && identity.parentUid !== null) throw new NotFoundError("group", identity.parentUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<IdentityRecord | null> {
    const row = await one<IdentityRow>(this.run.q, `SELECT ${TABLE.select} FROM identities WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<IdentityFilter, IdentityOrder>): Promise<ListResult<IdentityRecord>> {
    const { name, relationshipKind } = query.filter;
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": name, "t.relationship_kind": relationshipKind }), toRecord);
  }

  update(uid: string, changes: IdentityChanges, updateTime: number): Promise<IdentityRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<IdentityRow>(q, `SELECT ${TABLE.select} FROM identities WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("identity", uid);
      const next: IdentityRecord = { ...toRecord(row), ...changes, updateTime };
      await updateRow(q, "identities", uid, {
        name: next.name,
        description: next.description,
        company: next.company,
        ...relationshipColumns(next.relationship),
        update_time: updateTime,
      });
      return next;
    });
  }

  /** Only last_seen_time changes: neither list order nor authorization depends on it. */
  async touchLastSeen(uid: string, time: number): Promise<void> {
    await this.run.q.query("UPDATE identities SET last_seen_time = $2 WHERE uid = $1", [uid, time]);
  }

  delete(uid: string): Promise<void> {
    return this.run.atomically(async (q) => {
      const { rowCount } = await q.query("DELETE FROM identities WHERE uid = $1", [uid]);
      if (!rowCount) throw new NotFoundError("identity", uid);
      // No foreign key does this since bindings may name a person before sign-up.
      await q.query("DELETE FROM role_bindings WHERE identity_uid = $1", [uid]);
    });
  }
}
