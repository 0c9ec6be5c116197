import type { RoleBindingOrder, RoleBindingRecord } from "../store.js";
import { type TableSpec } from "./table.js";

/** The role bindings table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<RoleBindingOrder> = {
  table: "role_bindings",
  select: "uid, parent_uid, identity_uid, role_uid, create_time",
  orderColumns: { uid: "uid", created_at: "create_time" },
};

export interface RoleBindingRow {
  uid: string;
  parent_uid: string;
  identity_uid: string;
  role_uid: string;
  create_time: number;
}

export function toRecord(row: RoleBindingRow): RoleBindingRecord {
  return {
    uid: row.uid,
    groupUid: row.parent_uid,
    identityUid: row.identity_uid,
    roleUid: row.role_uid,
    createTime: row.create_time,
  };
}
