import type { GroupInviteOrder, GroupInviteRecord } from "../store.js";
import { isTrue, type TableSpec } from "./table.js";

/** The group invites table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<GroupInviteOrder> = {
  table: "group_invites",
  select: "uid, parent_uid, role_uid, email, expiration_time, single_use, key_id, code_hash, create_time",
  orderColumns: { uid: "uid", created_at: "create_time", expiration_time: "expiration_time" },
};

export interface GroupInviteRow {
  uid: string;
  parent_uid: string;
  role_uid: string;
  email: string;
  expiration_time: number;
  single_use: number | boolean;
  key_id: string;
  code_hash: string;
  create_time: number;
}

export function toRecord(row: GroupInviteRow): GroupInviteRecord {
  return {
    uid: row.uid,
    groupUid: row.parent_uid,
    roleUid: row.role_uid,
    email: row.email,
    expirationTime: row.expiration_time,
    singleUse: isTrue(row.single_use),
    keyId: row.key_id,
    codeHash: row.code_hash,
    createTime: row.create_time,
  };
}
