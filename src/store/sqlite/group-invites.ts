import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type GroupInviteRow } from "../sql/group-invites.js";
import type { GroupInviteFilter, GroupInviteOrder, GroupInviteRecord, ListQuery, ListResult, SyncGroupInviteStore } from "../store.js";
import { exact, type ListRunner } from "./list.js";

// parent_uid is the invite's group: the hierarchy filters work on it as on any table.

/** GroupInviteStore over SQLite; an invite goes with its role (FK cascade). */
export class SqliteGroupInviteStore implements SyncGroupInviteStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly byKeyIdStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly roleExistsStmt: Statement;
  private readonly deleteStmt: Statement;

  constructor(
    db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO group_invites (uid, parent_uid, role_uid, email, expiration_time, single_use, key_id, code_hash, create_time)
       VALUES (@uid, @groupUid, @roleUid, @email, @expirationTime, @singleUse, @keyId, @codeHash, @createTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM group_invites WHERE uid = ?`);
    this.byKeyIdStmt = db.prepare(`SELECT ${TABLE.select} FROM group_invites WHERE key_id = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.roleExistsStmt = db.prepare("SELECT 1 FROM roles WHERE uid = ?");
    this.deleteStmt = db.prepare("DELETE FROM group_invites WHERE uid = ?");
  }

  create(invite: GroupInviteRecord): void {
    if (!this.groupExistsStmt.get(invite.groupUid)) throw new NotFoundError("group", invite.groupUid);
    if (!this.roleExistsStmt.get(invite.roleUid)) throw new NotFoundError("role", invite.roleUid);
    if (this.getStmt.get(invite.uid)) throw new AlreadyExistsError("group invite", invite.uid);
    // The key id is public (every invite shows it), so naming it in the error reveals nothing.
    if (this.byKeyIdStmt.get(invite.keyId)) throw new AlreadyExistsError("group invite key", invite.keyId);
    this.insertStmt.run({ ...invite, singleUse: invite.singleUse ? 1 : 0 });
  }

  get(uid: string): GroupInviteRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  findByKeyId(keyId: string): GroupInviteRecord | null {
    const row = this.byKeyIdStmt.get(keyId) as GroupInviteRow | undefined;
    return row ? toRecord(row) : null;
  }

  list(query: ListQuery<GroupInviteFilter, GroupInviteOrder>): ListResult<GroupInviteRecord> {
    return this.lists.records(TABLE, query, exact({ "t.key_id": query.filter.keyId }), toRecord);
  }

  delete(uid: string): void {
    if (!this.consume(uid)) throw new NotFoundError("group invite", uid);
  }

  consume(uid: string): boolean {
    return this.deleteStmt.run(uid).changes > 0;
  }
}
