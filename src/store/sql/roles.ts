import type { RoleOrder, RoleRecord } from "../store.js";
import { type TableSpec } from "./table.js";

/** The roles table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<RoleOrder> = {
  table: "roles",
  select: "uid, parent_uid, name, description, capabilities, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
  // Built-in roles are roots: anyone who may list roles somewhere sees them.
  rootsVisible: true,
};

export interface RoleRow {
  uid: string;
  parent_uid: string | null;
  name: string;
  description: string;
  capabilities: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: RoleRow): RoleRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    capabilities: JSON.parse(row.capabilities) as number[],
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}
