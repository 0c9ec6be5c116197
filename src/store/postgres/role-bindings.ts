import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type RoleBindingRow } from "../sql/role-bindings.js";
import type { ListQuery, ListResult, RoleBindingFilter, RoleBindingOrder, RoleBindingRecord, RoleBindingStore } from "../store.js";
import { exact, exists, listRecords, one, type Queryable } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

// parent_uid is the binding's group: the hierarchy filters work on it as on any table.

/**
 * RoleBindingStore over PostgreSQL; references are checked first so a NotFoundError names their kind, and the foreign keys hold regardless.
 */
export class PgRoleBindingStore implements RoleBindingStore {
  constructor(private readonly run: Runner) {}

  create(bindings: readonly RoleBindingRecord[]): Promise<void> {
    if (bindings.length === 0) return Promise.resolve();
    return this.run.atomically(async (q) => {
      for (const b of bindings) {
        if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [b.groupUid]))) throw new NotFoundError("group", b.groupUid);
        await requireIdentity(q, b.identityUid);
        await requireRole(q, b.roleUid);
        // Earlier bindings of the batch are already inserted, so a uid repeated in the batch is caught too.
        if (await exists(q, "SELECT 1 FROM role_bindings WHERE uid = ?", [b.uid])) throw new AlreadyExistsError("role binding", b.uid);
        try {
          await q.query("INSERT INTO role_bindings (uid, parent_uid, identity_uid, role_uid, create_time) VALUES ($1, $2, $3, $4, $5)", [
            b.uid,
            b.groupUid,
            b.identityUid,
            b.roleUid,
            b.createTime,
          ]);
        } catch (err) {
          if (sqlState(err) === "23505") throw new AlreadyExistsError("role binding", b.uid);
          if (sqlState(err) === "23503") throw new NotFoundError("group", b.groupUid);
          throw err;
        }
      }
    });
  }

  async get(uid: string): Promise<RoleBindingRecord | null> {
    const row = await one<RoleBindingRow>(this.run.q, `SELECT ${TABLE.select} FROM role_bindings WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<RoleBindingFilter, RoleBindingOrder>): Promise<ListResult<RoleBindingRecord>> {
    const { identityUid, groupUid, roleUid } = query.filter;
    return listRecords(
      this.run.q,
      TABLE,
      query,
      exact({ "t.identity_uid": identityUid, "t.parent_uid": groupUid, "t.role_uid": roleUid }),
      toRecord,
    );
  }

  update(uid: string, changes: Partial<Pick<RoleBindingRecord, "identityUid" | "roleUid">>): Promise<RoleBindingRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<RoleBindingRow>(q, `SELECT ${TABLE.select} FROM role_bindings WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("role binding", uid);
      const next: RoleBindingRecord = { ...toRecord(row), ...changes };
      await requireIdentity(q, next.identityUid);
      await requireRole(q, next.roleUid);
      await q.query("UPDATE role_bindings SET identity_uid = $2, role_uid = $3 WHERE uid = $1", [uid, next.identityUid, next.roleUid]);
      return next;
    });
  }

  async delete(uid: string): Promise<boolean> {
    const { rowCount } = await this.run.q.query("DELETE FROM role_bindings WHERE uid = $1", [uid]);
    return (rowCount ?? 0) > 0;
  }

  async forIdentity(identityUid: string): Promise<RoleBindingRecord[]> {
    const { rows } = await this.run.q.query<RoleBindingRow>(
      `SELECT ${TABLE.select} FROM role_bindings WHERE identity_uid = $1 ORDER BY uid`,
      [identityUid],
    );
    return rows.map(toRecord);
  }
}

/** A group's identity must exist; a person's root-level uid may be one who has not signed up yet. */
async function requireIdentity(q: Queryable, uid: string): Promise<void> {
  if (uid.includes("/") && !(await exists(q, "SELECT 1 FROM identities WHERE uid = ?", [uid]))) throw new NotFoundError("identity", uid);
}

async function requireRole(q: Queryable, uid: string): Promise<void> {
  if (!(await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [uid]))) throw new NotFoundError("role", uid);
}
