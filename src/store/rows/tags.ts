import type { TagFilter, TagOrder, TagRecord } from "../store.js";
import { isTrue, type Clause, type ListDialect, type TableSpec } from "./table.js";

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

/** The list filters as SQL in the engine's dialect: the include flags exclude a tag form unless set. */
export function filterClauses(f: TagFilter, d: ListDialect): Clause[] {
  const filters: Clause[] = [];
  if (f.name !== undefined) filters.push({ sql: "t.name = ?", params: [f.name] });
  if (f.digest !== undefined) filters.push({ sql: "t.digest = ?", params: [f.digest] });
  if (f.updatedSince !== undefined) filters.push({ sql: "t.update_time > ?", params: [f.updatedSince] });
  if (!f.includeReferrers) filters.push({ sql: d.isFalse("t.is_referrer"), params: [] });
  if (!f.includeDates) filters.push({ sql: d.isFalse("t.is_dated"), params: [] });
  if (!f.includeEpochs) filters.push({ sql: d.isFalse("t.is_epoch"), params: [] });
  return filters;
}
