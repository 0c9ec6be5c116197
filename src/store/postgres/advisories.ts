import { NotFoundError } from "../../domain/errors.js";
import type { AdvisoryEventRecord, AdvisoryFilter, AdvisoryOrder, AdvisoryRecord, AdvisoryStore, ListQuery, ListResult, UpsertOutcome } from "../store.js";
import { exists, listRecords, one, type Clause, type PgTable } from "./list.js";
import type { Runner } from "./tx.js";

const TABLE: PgTable<AdvisoryOrder> = {
  table: "advisories",
  select:
    "uid, parent_uid, advisory_id, legacy_advisory_id, author, artifact_name, artifact_type, artifact_architecture, component_name, component_location, component_type, origin, aliases, severities, events, create_time, update_time, delete_time",
  orderColumns: { uid: "uid", advisory_id: "advisory_id", created_at: "create_time", updated_at: "update_time" },
};

/** The ReviewState number of an approved event: latestEventType looks at approved events only. */
const REVIEW_STATE_APPROVED = 2;

interface AdvisoryRow {
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

function toRecord(row: AdvisoryRow): AdvisoryRecord {
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

/** A list-valued filter as text values; an empty list is treated as absent, as an empty repeated field is. */
function values(filter: AdvisoryFilter, key: keyof AdvisoryFilter): string[] | null {
  const v = filter[key];
  return Array.isArray(v) && v.length > 0 ? v.map(String) : null;
}

/** A LIKE pattern matching text anywhere, with the wildcards in text taken literally. */
function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** The filters as SQL over the same JSON text columns SQLite reads, as jsonb. */
function filterClauses(f: AdvisoryFilter): Clause[] {
  const out: Clause[] = [];
  for (const [key, column] of EXACT_FILTERS) {
    // origin covers every artifact built from it, so it replaces the artifact names.
    if (key === "artifactNames" && f.origin !== undefined) continue;
    const list = values(f, key);
    if (list !== null) out.push({ sql: `t.${column} = ANY(?::text[])`, params: [list] });
  }
  if (f.origin !== undefined) out.push({ sql: "t.origin = ?", params: [f.origin] });
  const aliases = values(f, "aliases");
  if (aliases !== null) out.push({ sql: "EXISTS (SELECT 1 FROM jsonb_array_elements_text(t.aliases::jsonb) AS a(v) WHERE a.v = ANY(?::text[]))", params: [aliases] });
  for (const [key, field] of EVENT_FILTERS) {
    const list = values(f, key);
    if (list === null) continue;
    out.push({ sql: `EXISTS (SELECT 1 FROM jsonb_array_elements(t.events::jsonb) AS e(v) WHERE e.v->>'${field}' = ANY(?::text[]))`, params: [list] });
  }
  const excluded = values(f, "excludeEventAuthors");
  if (excluded !== null) {
    out.push({ sql: "NOT EXISTS (SELECT 1 FROM jsonb_array_elements(t.events::jsonb) AS e(v) WHERE e.v->>'author' = ANY(?::text[]))", params: [excluded] });
  }
  if (f.latestEventType !== undefined) {
    // Events are stored oldest first: among equal times the later one is the latest.
    out.push({
      sql: `(SELECT e.v->>'type' FROM jsonb_array_elements(t.events::jsonb) WITH ORDINALITY AS e(v, i)
             WHERE (e.v->>'reviewState')::int = ${REVIEW_STATE_APPROVED}
             ORDER BY (e.v->>'createTime')::bigint DESC, e.i DESC LIMIT 1) = ?`,
      params: [f.latestEventType],
    });
  }
  if (f.query !== undefined && f.query !== "") {
    // Case-insensitive for ASCII letters, as SQLite's LIKE (the cluster's ctype is C).
    const pattern = containsPattern(f.query);
    out.push({
      sql: `t.artifact_name ILIKE ? ESCAPE '\\' OR t.component_name ILIKE ? ESCAPE '\\'
            OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(t.aliases::jsonb) AS a(v) WHERE a.v ILIKE ? ESCAPE '\\')`,
      params: [pattern, pattern, pattern],
    });
  }
  return out;
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
function comparable(a: AdvisoryRecord): string {
  const { createTime: _created, updateTime: _updated, events, ...rest } = a;
  return canonicalJson({ ...rest, events: events.map(({ createTime: _eventCreated, ...e }) => e) });
}

const COLUMNS =
  "uid, parent_uid, advisory_id, legacy_advisory_id, author, artifact_name, artifact_type, artifact_architecture, component_name, component_location, component_type, origin, aliases, severities, events, create_time, update_time, delete_time";

/** The create time of an existing advisory is kept: ON CONFLICT leaves create_time alone. */
const UPSERT = `INSERT INTO advisories (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
  ON CONFLICT (uid) DO UPDATE SET parent_uid = excluded.parent_uid, advisory_id = excluded.advisory_id,
    legacy_advisory_id = excluded.legacy_advisory_id, author = excluded.author, artifact_name = excluded.artifact_name,
    artifact_type = excluded.artifact_type, artifact_architecture = excluded.artifact_architecture,
    component_name = excluded.component_name, component_location = excluded.component_location,
    component_type = excluded.component_type, origin = excluded.origin, aliases = excluded.aliases,
    severities = excluded.severities, events = excluded.events, update_time = excluded.update_time,
    delete_time = excluded.delete_time`;

/** AdvisoryStore over PostgreSQL: read-only over the API, written by the importer in batches. */
export class PgAdvisoryStore implements AdvisoryStore {
  constructor(private readonly run: Runner) {}

  async get(uid: string): Promise<AdvisoryRecord | null> {
    const row = await one<AdvisoryRow>(this.run.q, `SELECT ${TABLE.select} FROM advisories WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<AdvisoryFilter, AdvisoryOrder>): Promise<ListResult<AdvisoryRecord>> {
    return listRecords(this.run.q, TABLE, query, filterClauses(query.filter), toRecord);
  }

  upsert(advisories: readonly AdvisoryRecord[]): Promise<UpsertOutcome[]> {
    return this.run.atomically(async (q) => {
      const groups = new Set<string>();
      const outcomes: UpsertOutcome[] = [];
      for (const a of advisories) {
        if (!groups.has(a.parentUid)) {
          if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [a.parentUid]))) throw new NotFoundError("group", a.parentUid);
          groups.add(a.parentUid);
        }
        const row = await one<AdvisoryRow>(q, `SELECT ${TABLE.select} FROM advisories WHERE uid = ? FOR UPDATE`, [a.uid]);
        const current = row && toRecord(row);
        if (current && comparable(current) === comparable(a)) {
          outcomes.push("unchanged");
          continue;
        }
        await q.query(UPSERT, [
          a.uid, a.parentUid, a.advisoryId, a.legacyAdvisoryId, a.author, a.artifactName, a.artifactType, a.artifactArchitecture,
          a.componentName, a.componentLocation, a.componentType, a.origin, JSON.stringify(a.aliases), JSON.stringify(a.severities),
          JSON.stringify(a.events), a.createTime, a.updateTime, a.deleteTime,
        ]);
        outcomes.push(current ? "updated" : "created");
      }
      return outcomes;
    });
  }
}
