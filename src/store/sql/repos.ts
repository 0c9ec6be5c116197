import type { RepoOrder, RepoRecord } from "../store.js";
import { type TableSpec } from "./table.js";

/** The repos table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<RepoOrder> = {
  table: "repos",
  select: "uid, parent_uid, name, description, catalog_tier, bundles, aliases, active_tags, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface RepoRow {
  uid: string;
  parent_uid: string;
  name: string;
  description: string;
  catalog_tier: number;
  bundles: string;
  aliases: string;
  active_tags: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: RepoRow): RepoRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    catalogTier: row.catalog_tier,
    bundles: JSON.parse(row.bundles) as string[],
    aliases: JSON.parse(row.aliases) as string[],
    activeTags: JSON.parse(row.active_tags) as string[],
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}
