import type { TagOrder, TagRecord } from "../store.js";
import { isTrue, type TableSpec } from "./table.js";

/** The tags table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<TagOrder> = {
  table: "tags",
  select: "uid, parent_uid, name, digest, deprecated, bundles, update_time",
  orderColumns: { uid: "uid", name: "name", updated_at: "update_time" },
};

export interface TagRow {
  uid: string;
  parent_uid: string;
  name: string;
  digest: string;
  deprecated: number | boolean;
  bundles: string;
  update_time: number;
}

export function toRecord(row: TagRow): TagRecord {
  return {
    uid: row.uid,
    repoUid: row.parent_uid,
    name: row.name,
    digest: row.digest,
    deprecated: isTrue(row.deprecated),
    bundles: JSON.parse(row.bundles) as string[],
    updateTime: row.update_time,
  };
}
