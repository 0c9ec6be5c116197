import type { AdvisoryEventRecord, AdvisoryFilter, AdvisoryOrder, AdvisoryRecord } from "../store.js";
import type { Clause, ListDialect, TableSpec } from "./table.js";

/** The advisories table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<AdvisoryOrder> = {
  table: "advisories",
  select:
    "uid, parent_uid, advisory_id, legacy_advisory_id, author, artifact_name, artifact_type, artifact_architecture, component_name, component_location, component_type, origin, aliases, severities, events, create_time, update_time, delete_time",
  orderColumns: { uid: "uid", advisory_id: "advisory_id", created_at: "create_time", updated_at: "update_time" },
};

/** The ReviewState number of an approved event: latestEventType looks at approved events only. */
const REVIEW_STATE_APPROVED = 2;

export interface AdvisoryRow {
  uid: string;
  parent_uid: string;
  advisory_id: string;
  legacy_advisory_id: string;
  author: string;
  artifact_name: string;
  artifact_type: string;
  artifact_architecture: string;
  component_name: string;
  component_location: string;
  component_type: string;
  origin: string;
  aliases: string;
  severities: string;
  events: string;
  create_time: number;
  update_time: number;
  delete_time: number | null;
}

export function toRecord(row: AdvisoryRow): AdvisoryRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    advisoryId: row.advisory_id,
    legacyAdvisoryId: row.legacy_advisory_id,
    author: row.author,
    artifactName: row.artifact_name,
    artifactType: row.artifact_type,
    artifactArchitecture: row.artifact_architecture,
    componentName: row.component_name,
    componentLocation: row.component_location,
    componentType: row.component_type,
    origin: row.origin,
    aliases: JSON.parse(row.aliases) as string[],
    severities: JSON.parse(row.severities) as AdvisoryRecord["severities"],
    events: JSON.parse(row.events) as AdvisoryEventRecord[],
    createTime: row.create_time,
    updateTime: row.update_time,
    deleteTime: row.delete_time,
  };
}

/** Exact-match list filters and the column each one reads. */
const EXACT_FILTERS: readonly [keyof AdvisoryFilter, string][] = [
  ["advisoryIds", "advisory_id"],
  ["legacyAdvisoryIds", "legacy_advisory_id"],
  ["artifactNames", "artifact_name"],
  ["artifactTypes", "artifact_type"],
  ["artifactArchitectures", "artifact_architecture"],
  ["componentNames", "component_name"],
  ["componentTypes", "component_type"],
  ["componentLocations", "component_location"],
];

/** Event list filters and the event field each one reads: at least one event must match. */
const EVENT_FILTERS: readonly [keyof AdvisoryFilter, string][] = [
  ["eventReviewStates", "reviewState"],
  ["eventAuthors", "author"],
  ["eventReviewers", "reviewer"],
  ["eventTypes", "type"],
];

/**
 * The list filters as SQL in the engine's dialect. Each list travels as one
 * parameter, so the SQL depends only on which filters are set; an empty
 * list is treated as absent, as an empty repeated field is.
 */
export function filterClauses(f: AdvisoryFilter, d: ListDialect): Clause[] {
  const values = (key: keyof AdvisoryFilter) => {
    const v = f[key];
    return Array.isArray(v) && v.length > 0 ? d.listParam(v) : null;
  };
  const aliases = d.jsonArray("t.aliases", "a");
  const events = d.jsonArray("t.events", "e");
  const out: Clause[] = [];
  for (const [key, column] of EXACT_FILTERS) {
    // origin covers every artifact built from it, so it replaces the artifact names.
    if (key === "artifactNames" && f.origin !== undefined) continue;
    const list = values(key);
    if (list !== null) out.push({ sql: d.inList(`t.${column}`), params: [list] });
  }
  if (f.origin !== undefined) out.push({ sql: "t.origin = ?", params: [f.origin] });
  const aliasList = values("aliases");
  if (aliasList !== null) out.push({ sql: `EXISTS (SELECT 1 FROM ${aliases.texts} WHERE ${d.inList(aliases.text)})`, params: [aliasList] });
  for (const [key, field] of EVENT_FILTERS) {
    const list = values(key);
    if (list !== null) out.push({ sql: `EXISTS (SELECT 1 FROM ${events.objects} WHERE ${d.inList(events.field(field))})`, params: [list] });
  }
  const excluded = values("excludeEventAuthors");
  if (excluded !== null) {
    out.push({ sql: `NOT EXISTS (SELECT 1 FROM ${events.objects} WHERE ${d.inList(events.field("author"))})`, params: [excluded] });
  }
  if (f.latestEventType !== undefined) {
    // Events are stored oldest first: among equal times the later one is the latest.
    out.push({
      sql: `(SELECT ${events.field("type")} FROM ${events.ordered}
             WHERE ${events.number("reviewState")} = ${REVIEW_STATE_APPROVED}
             ORDER BY ${events.number("createTime")} DESC, ${events.position} DESC LIMIT 1) = ?`,
      params: [f.latestEventType],
    });
  }
  if (f.query !== undefined && f.query !== "") {
    const pattern = containsPattern(f.query);
    const like = `${d.caselessLike} ? ESCAPE '\\'`;
    out.push({
      sql: `t.artifact_name ${like} OR t.component_name ${like}
            OR EXISTS (SELECT 1 FROM ${aliases.texts} WHERE ${aliases.text} ${like})`,
      params: [pattern, pattern, pattern],
    });
  }
  return out;
}

/** A LIKE pattern matching text anywhere, with the wildcards in text taken literally. */
function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** JSON with object keys sorted at every level, so equal values give equal text. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/** What decides whether an upsert changes an advisory: everything but its and its events' create and update times. */
export function comparable(a: AdvisoryRecord): string {
  const { createTime: _created, updateTime: _updated, events, ...rest } = a;
  return canonicalJson({ ...rest, events: events.map(({ createTime: _eventCreated, ...e }) => e) });
}
