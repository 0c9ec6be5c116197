import type { Database, Statement } from "better-sqlite3";
import { NotFoundError } from "../../domain/errors.js";
import type {
  AdvisoryEventRecord,
  AdvisoryFilter,
  AdvisoryOrder,
  AdvisoryRecord,
  SyncAdvisoryStore,
  ListQuery,
  ListResult,
  UpsertOutcome,
} from "../store.js";
import type { Clause, ListRunner, ListableTable } from "./list.js";

const TABLE: ListableTable<AdvisoryOrder> = {
  table: "advisories",
  select:
    "uid, parent_uid, advisory_id, legacy_advisory_id, author, artifact_name, artifact_type, artifact_architecture, component_name, component_location, component_type, origin, aliases, severities, events, create_time, update_time, delete_time",
  orderColumns: { uid: "uid", advisory_id: "advisory_id", created_at: "create_time", updated_at: "update_time" },
  writtenElsewhere: true,
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

/** A list-valued filter; an empty list is treated as absent, as an empty repeated field is. */
function values(filter: AdvisoryFilter, key: keyof AdvisoryFilter): string | null {
  const v = filter[key];
  return Array.isArray(v) && v.length > 0 ? JSON.stringify(v) : null;
}

/** A LIKE pattern matching text anywhere, with the wildcards in text taken literally. */
function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** The filters as SQL; list values travel as one JSON parameter each, so the SQL depends only on which are set. */
function filterClauses(f: AdvisoryFilter): Clause[] {
  const out: Clause[] = [];
  for (const [key, column] of EXACT_FILTERS) {
    // origin covers every artifact built from it, so it replaces the artifact names.
    if (key === "artifactNames" && f.origin !== undefined) continue;
    const list = values(f, key);
    if (list !== null) out.push({ sql: `t.${column} IN (SELECT value FROM json_each(?))`, params: [list] });
  }
  if (f.origin !== undefined) out.push({ sql: "t.origin = ?", params: [f.origin] });
  const aliases = values(f, "aliases");
  if (aliases !== null) {
    out.push({
      sql: "EXISTS (SELECT 1 FROM json_each(t.aliases) AS a WHERE a.value IN (SELECT value FROM json_each(?)))",
      params: [aliases],
    });
  }
  for (const [key, field] of EVENT_FILTERS) {
    const list = values(f, key);
    if (list === null) continue;
    out.push({
      sql: `EXISTS (SELECT 1 FROM json_each(t.events) AS e WHERE json_extract(e.value, '$.${field}') IN (SELECT value FROM json_each(?)))`,
      params: [list],
    });
  }
  const excluded = values(f, "excludeEventAuthors");
  if (excluded !== null) {
    out.push({
      sql: "NOT EXISTS (SELECT 1 FROM json_each(t.events) AS e WHERE json_extract(e.value, '$.author') IN (SELECT value FROM json_each(?)))",
      params: [excluded],
    });
  }
  if (f.latestEventType !== undefined) {
    // Events are stored oldest first: among equal times the later one is the latest.
    out.push({
      sql: `(SELECT json_extract(e.value, '$.type') FROM json_each(t.events) AS e
             WHERE json_extract(e.value, '$.reviewState') = ${REVIEW_STATE_APPROVED}
             ORDER BY json_extract(e.value, '$.createTime') DESC, e.key DESC LIMIT 1) = ?`,
      params: [f.latestEventType],
    });
  }
  if (f.query !== undefined && f.query !== "") {
    // LIKE is case-insensitive for ASCII letters.
    const pattern = containsPattern(f.query);
    out.push({
      sql: `t.artifact_name LIKE ? ESCAPE '\\' OR t.component_name LIKE ? ESCAPE '\\'
            OR EXISTS (SELECT 1 FROM json_each(t.aliases) AS a WHERE a.value LIKE ? ESCAPE '\\')`,
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

/**
 * AdvisoryStore over SQLite. The importer may write from another process
 * (the CLI shares the database file); the ListRunner notices its commits.
 */
export class SqliteAdvisoryStore implements SyncAdvisoryStore {
  private readonly upsertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    // The create time of an existing advisory is kept: ON CONFLICT leaves create_time alone.
    this.upsertStmt = db.prepare(
      `INSERT INTO advisories (uid, parent_uid, advisory_id, legacy_advisory_id, author, artifact_name, artifact_type,
         artifact_architecture, component_name, component_location, component_type, origin, aliases, severities, events,
         create_time, update_time, delete_time)
       VALUES (@uid, @parentUid, @advisoryId, @legacyAdvisoryId, @author, @artifactName, @artifactType,
         @artifactArchitecture, @componentName, @componentLocation, @componentType, @origin, @aliases, @severities, @events,
         @createTime, @updateTime, @deleteTime)
       ON CONFLICT (uid) DO UPDATE SET parent_uid = excluded.parent_uid, advisory_id = excluded.advisory_id,
         legacy_advisory_id = excluded.legacy_advisory_id, author = excluded.author, artifact_name = excluded.artifact_name,
         artifact_type = excluded.artifact_type, artifact_architecture = excluded.artifact_architecture,
         component_name = excluded.component_name, component_location = excluded.component_location,
         component_type = excluded.component_type, origin = excluded.origin, aliases = excluded.aliases,
         severities = excluded.severities, events = excluded.events, update_time = excluded.update_time,
         delete_time = excluded.delete_time`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM advisories WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
  }

  get(uid: string): AdvisoryRecord | null {
    return this.lists.one(TABLE, this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<AdvisoryFilter, AdvisoryOrder>): ListResult<AdvisoryRecord> {
    return this.lists.records(TABLE, query, filterClauses(query.filter), toRecord);
  }

  upsert(advisories: readonly AdvisoryRecord[]): UpsertOutcome[] {
    return this.db.transaction(() => {
      const groups = new Set<string>();
      const outcomes = advisories.map((advisory): UpsertOutcome => {
        if (!groups.has(advisory.parentUid)) {
          if (!this.groupExistsStmt.get(advisory.parentUid)) throw new NotFoundError("group", advisory.parentUid);
          groups.add(advisory.parentUid);
        }
        const current = this.get(advisory.uid);
        if (current && comparable(current) === comparable(advisory)) return "unchanged";
        this.upsertStmt.run({
          ...advisory,
          aliases: JSON.stringify(advisory.aliases),
          severities: JSON.stringify(advisory.severities),
          events: JSON.stringify(advisory.events),
        });
        return current ? "updated" : "created";
      });
      if (outcomes.some((o) => o !== "unchanged")) this.lists.touched(TABLE.table);
      return outcomes;
    }).immediate();
  }
}
