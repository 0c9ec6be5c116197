import type { GroupOrder, GroupRecord } from "../store.js";
import { isTrue, type TableSpec } from "./table.js";

/** The groups table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<GroupOrder> = {
  table: "groups",
  select: "uid, parent_uid, name, description, verified, resource_limits, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface GroupRow {
  uid: string;
  parent_uid: string | null;
  name: string;
  description: string;
  verified: number | boolean;
  resource_limits: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: GroupRow): GroupRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    verified: isTrue(row.verified),
    resourceLimits: row.resource_limits === "{}" ? {} : (JSON.parse(row.resource_limits) as Record<string, number>),
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}

/**
 * A kind of record that lives in a group and blocks the group's deletion: a
 * part's `blocksGroupDelete` in STORE_PARTS (parts.ts), which both engines'
 * group stores take, in that order, as GROUP_CHILD_KINDS.
 */
export interface GroupChildKind {
  /** Plural name used in the precondition message, e.g. "repos". */
  label: string;
  /** SQL returning a row when the group (the single "?" parameter) holds one. */
  existsSql: string;
}
