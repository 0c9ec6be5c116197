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

/**
 * The time (microseconds) of what last set a tag, as SQL over the tags table:
 * the registry event's (source_time_us), or for a tag an API call set, its
 * update time.
 */
export const SOURCE_TIME_SQL = "COALESCE(source_time_us, update_time * 1000)";

/** A tag row with its source time (SOURCE_TIME_SQL AS source_time). */
export type SourcedTagRow = TagRow & { source_time: number | string };

/**
 * True when a registry change at sourceTime to digest supersedes what set the
 * tag (at storedTime, to storedDigest): a later time wins; at the same
 * microsecond, the greater digest, so every order of delivery ends alike.
 */
export function supersedes(sourceTime: number, digest: string, storedTime: number, storedDigest: string): boolean {
  return sourceTime > storedTime || (sourceTime === storedTime && digest > storedDigest);
}

/**
 * How long a repo remembers that a manifest was deleted (registry_deleted_digests): longer than the
 * registry retries a notification in practice, so a push delivered after its manifest's delete is not
 * applied. Older entries are pruned at the next delete.
 */
export const DELETED_DIGEST_RETENTION_US = 30 * 86_400_000_000;
