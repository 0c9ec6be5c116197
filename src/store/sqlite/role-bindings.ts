import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type RoleBindingRow } from "../sql/role-bindings.js";
import type { ListQuery, ListResult, RoleBindingFilter, RoleBindingOrder, RoleBindingRecord, SyncRoleBindingStore } from "../store.js";
import { exact, type ListRunner } from "./list.js";

// parent_uid is the binding's group: the hierarchy filters work on it as on any table.

/** RoleBindingStore over SQLite; references are checked first so a NotFoundError names their kind. */
export class SqliteRoleBindingStore implements SyncRoleBindingStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly identityExistsStmt: Statement;
  private readonly roleExistsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly forIdentityStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO role_bindings (uid, parent_uid, identity_uid, role_uid, create_time)
       VALUES (@uid, @groupUid, @identityUid, @roleUid, @createTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM role_bindings WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.identityExistsStmt = db.prepare("SELECT 1 FROM identities WHERE uid = ?");
    this.roleExistsStmt = db.prepare("SELECT 1 FROM roles WHERE uid = ?");
    this.updateStmt = db.prepare("UPDATE role_bindings SET identity_uid = @identityUid, role_uid = @roleUid WHERE uid = @uid");
    this.deleteStmt = db.prepare("DELETE FROM role_bindings WHERE uid = ?");
    this.forIdentityStmt = db.prepare(`SELECT ${TABLE.select} FROM role_bindings WHERE identity_uid = ? ORDER BY uid`);
  }

  create(bindings: readonly RoleBindingRecord[]): void {
    if (bindings.length === 0) return;
    this.db
      .transaction(() => {
        for (const b of bindings) {
          if (!this.groupExistsStmt.get(b.groupUid)) throw new NotFoundError("group", b.groupUid);
          this.requireIdentity(b.identityUid);
          this.requireRole(b.roleUid);
          // Earlier bindings of the batch are already inserted, so a uid repeated in the batch is caught too.
          if (this.getStmt.get(b.uid)) throw new AlreadyExistsError("role binding", b.uid);
          this.insertStmt.run(b);
        }
      })
      .immediate();
  }

  get(uid: string): RoleBindingRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<RoleBindingFilter, RoleBindingOrder>): ListResult<RoleBindingRecord> {
    const { identityUid, groupUid, roleUid } = query.filter;
    const filters = exact({ "t.identity_uid": identityUid, "t.parent_uid": groupUid, "t.role_uid": roleUid });
    return this.lists.records(TABLE, query, filters, toRecord);
  }

  update(uid: string, changes: Partial<Pick<RoleBindingRecord, "identityUid" | "roleUid">>): RoleBindingRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("role binding", uid);
        const next: RoleBindingRecord = { ...current, ...changes };
        this.requireIdentity(next.identityUid);
        this.requireRole(next.roleUid);
        this.updateStmt.run({ uid, identityUid: next.identityUid, roleUid: next.roleUid });
        return next;
      })
      .immediate();
  }

  delete(uid: string): boolean {
    return this.deleteStmt.run(uid).changes > 0;
  }

  forIdentity(identityUid: string): RoleBindingRecord[] {
    return (this.forIdentityStmt.all(identityUid) as RoleBindingRow[]).map(toRecord);
  }

  /** A group's identity must exist; a person's root-level uid may be one who has not signed up yet. */
  private requireIdentity(uid: string): void {
    if (uid.includes("/") && !this.identityExistsStmt.get(uid)) throw new NotFoundError("identity", uid);
  }

  private requireRole(uid: string): void {
    if (!this.roleExistsStmt.get(uid)) throw new NotFoundError("role", uid);
  }
}
