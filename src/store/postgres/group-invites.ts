import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type GroupInviteRow } from "../sql/group-invites.js";
import type { GroupInviteFilter, GroupInviteOrder, GroupInviteRecord, GroupInviteStore, ListQuery, ListResult } from "../store.js";
import { exact, exists, insertRow, listRecords, one } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

// parent_uid is the invite's group: the hierarchy filters work on it as on any table.

/**
 * GroupInviteStore over PostgreSQL; consuming an invite is one conditional DELETE, so exactly one of any number of concurrent redeemers
 * wins.
 */
export class PgGroupInviteStore implements GroupInviteStore {
  constructor(private readonly run: Runner) {}

  create(invite: GroupInviteRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [invite.groupUid]))) throw new NotFoundError("group", invite.groupUid);
      if (!(await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [invite.roleUid]))) throw new NotFoundError("role", invite.roleUid);
      if (await exists(q, "SELECT 1 FROM group_invites WHERE uid = ?", [invite.uid]))
        throw new AlreadyExistsError("group invite", invite.uid);
      // The key id is public (every invite shows it), so naming it in the error reveals nothing.
      if (await exists(q, "SELECT 1 FROM group_invites WHERE key_id = ?", [invite.keyId]))
        throw new AlreadyExistsError("group invite key", invite.keyId);
      try {
        await insertRow(q, "group_invites", {
          uid: invite.uid,
          parent_uid: invite.groupUid,
          role_uid: invite.roleUid,
          email: invite.email,
          expiration_time: invite.expirationTime,
          single_use: invite.singleUse,
          key_id: invite.keyId,
          code_hash: invite.codeHash,
          create_time: invite.createTime,
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("group invite", invite.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("group", invite.groupUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<GroupInviteRecord | null> {
    const row = await one<GroupInviteRow>(this.run.q, `SELECT ${TABLE.select} FROM group_invites WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  async findByKeyId(keyId: string): Promise<GroupInviteRecord | null> {
    const row = await one<GroupInviteRow>(this.run.q, `SELECT ${TABLE.select} FROM group_invites WHERE key_id = ?`, [keyId]);
    return row && toRecord(row);
  }

  list(query: ListQuery<GroupInviteFilter, GroupInviteOrder>): Promise<ListResult<GroupInviteRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.key_id": query.filter.keyId }), toRecord);
  }

  async delete(uid: string): Promise<void> {
    if (!(await this.consume(uid))) throw new NotFoundError("group invite", uid);
  }

  async consume(uid: string): Promise<boolean> {
    const { rowCount } = await this.run.q.query("DELETE FROM group_invites WHERE uid = $1", [uid]);
    return (rowCount ?? 0) > 0;
  }
}
