import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type RoleRow } from "../sql/roles.js";
import type { ListQuery, ListResult, RoleChanges, RoleFilter, RoleOrder, RoleRecord, RoleStore } from "../store.js";
import { exact, exists, insertRow, listRecords, one, updateRow } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/** Capabilities as stored: each once, ascending. */
function normalized(capabilities: readonly number[]): number[] {
  return [...new Set(capabilities)].sort((a, b) => a - b);
}

/** What keeps a role from being deleted. */
const ROLE_USES: readonly { label: string; existsSql: string; detail: string }[] = [
  { label: "role bindings", existsSql: "SELECT 1 FROM role_bindings WHERE role_uid = ? LIMIT 1", detail: "delete them first" },
  {
    label: "identity providers",
    existsSql: "SELECT 1 FROM identity_providers WHERE default_role = ? LIMIT 1",
    detail: "give them another default role or delete them first",
  },
];

function inUse(uid: string, label: string, detail: string): FailedPreconditionError {
  return new FailedPreconditionError([{ type: "ROLE_IN_USE", subject: uid, description: `the role is used by ${label}; ${detail}` }]);
}

/** RoleStore over PostgreSQL; roles are authorization data, so every write moves the authorization version. */
export class PgRoleStore implements RoleStore {
  constructor(private readonly run: Runner) {}

  create(role: RoleRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      if (role.parentUid !== null && !(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [role.parentUid]))) {
        throw new NotFoundError("group", role.parentUid);
      }
      if (await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [role.uid])) throw new AlreadyExistsError("role", role.uid);
      try {
        await insertRow(q, "roles", {
          uid: role.uid,
          parent_uid: role.parentUid,
          name: role.name,
          description: role.description,
          capabilities: JSON.stringify(normalized(role.capabilities)),
          create_time: role.createTime,
          update_time: role.updateTime,
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("role", role.uid);
        if (sqlState(err) === "23503" && role.parentUid !== null) throw new NotFoundError("group", role.parentUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<RoleRecord | null> {
    const row = await one<RoleRow>(this.run.q, `SELECT ${TABLE.select} FROM roles WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<RoleFilter, RoleOrder>): Promise<ListResult<RoleRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: RoleChanges, updateTime: number): Promise<RoleRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<RoleRow>(q, `SELECT ${TABLE.select} FROM roles WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("role", uid);
      const next: RoleRecord = { ...toRecord(row), ...changes, updateTime };
      next.capabilities = normalized(next.capabilities);
      await updateRow(q, "roles", uid, {
        name: next.name,
        description: next.description,
        capabilities: JSON.stringify(next.capabilities),
        update_time: updateTime,
      });
      return next;
    });
  }

  delete(uid: string): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [uid]))) throw new NotFoundError("role", uid);
      for (const use of ROLE_USES) if (await exists(q, use.existsSql, [uid])) throw inUse(uid, use.label, use.detail);
      try {
        // Invites of the role go with it (ON DELETE CASCADE).
        await q.query("DELETE FROM roles WHERE uid = $1", [uid]);
      } catch (err) {
        if (sqlState(err) === "23503") throw inUse(uid, "role bindings or identity providers", "delete them first");
        throw err;
      }
    });
  }
}
