import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord } from "../sql/roles.js";
import type { ListQuery, ListResult, RoleChanges, RoleFilter, RoleOrder, RoleRecord, SyncRoleStore } from "../store.js";
import { exact, type ListRunner } from "./list.js";

/** Capabilities as the record promises them: ascending, without duplicates. */
function normalized(capabilities: readonly number[]): number[] {
  return [...new Set(capabilities)].sort((a, b) => a - b);
}

/** Kinds of record that use a role and block its deletion, in the order they are checked. */
const ROLE_USES: readonly { label: string; existsSql: string; detail: string }[] = [
  { label: "role bindings", existsSql: "SELECT 1 FROM role_bindings WHERE role_uid = ? LIMIT 1", detail: "delete them first" },
  {
    label: "identity providers",
    existsSql: "SELECT 1 FROM identity_providers WHERE default_role = ? LIMIT 1",
    detail: "give them another default role or delete them first",
  },
];

/**
 * RoleStore over SQLite. A role used by a role binding, or as an identity
 * provider's default role, cannot be deleted; the group invites that grant it
 * go with it (FK cascade).
 */
export class SqliteRoleStore implements SyncRoleStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly useChecks: { label: string; detail: string; stmt: Statement }[];
  private readonly deleteStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO roles (uid, parent_uid, name, description, capabilities, create_time, update_time)
       VALUES (@uid, @parentUid, @name, @description, @capabilities, @createTime, @updateTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM roles WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.updateStmt = db.prepare(
      `UPDATE roles SET name = @name, description = @description, capabilities = @capabilities,
         update_time = @updateTime WHERE uid = @uid`,
    );
    this.useChecks = ROLE_USES.map((u) => ({ label: u.label, detail: u.detail, stmt: db.prepare(u.existsSql) }));
    this.deleteStmt = db.prepare("DELETE FROM roles WHERE uid = ?");
  }

  create(role: RoleRecord): void {
    if (role.parentUid !== null && !this.groupExistsStmt.get(role.parentUid)) {
      throw new NotFoundError("group", role.parentUid);
    }
    if (this.getStmt.get(role.uid)) throw new AlreadyExistsError("role", role.uid);
    this.insertStmt.run({ ...role, capabilities: JSON.stringify(normalized(role.capabilities)) });
  }

  get(uid: string): RoleRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<RoleFilter, RoleOrder>): ListResult<RoleRecord> {
    return this.lists.records(TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: RoleChanges, updateTime: number): RoleRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("role", uid);
        const next: RoleRecord = { ...current, ...changes, updateTime };
        next.capabilities = normalized(next.capabilities);
        this.updateStmt.run({
          uid,
          name: next.name,
          description: next.description,
          capabilities: JSON.stringify(next.capabilities),
          updateTime,
        });
        return next;
      })
      .immediate();
  }

  delete(uid: string): void {
    this.db
      .transaction(() => {
        if (!this.getStmt.get(uid)) throw new NotFoundError("role", uid);
        for (const check of this.useChecks) {
          if (check.stmt.get(uid)) {
            throw new FailedPreconditionError([
              {
                type: "ROLE_IN_USE",
                subject: uid,
                description: `the role is used by ${check.label}; ${check.detail}`,
              },
            ]);
          }
        }
        this.deleteStmt.run(uid);
      })
      .immediate();
  }
}
