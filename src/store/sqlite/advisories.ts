import type { Database, Statement } from "better-sqlite3";
import { NotFoundError } from "../../domain/errors.js";
import {
  comparable,
  containsPattern,
  EVENT_FILTERS,
  EXACT_FILTERS,
  REVIEW_STATE_APPROVED,
  TABLE as SHARED_TABLE,
  toRecord,
} from "../rows/advisories.js";
import type { AdvisoryFilter, AdvisoryOrder, AdvisoryRecord, ListQuery, ListResult, SyncAdvisoryStore, UpsertOutcome } from "../store.js";
import type { Clause, ListableTable, ListRunner } from "./list.js";

const TABLE: ListableTable<AdvisoryOrder> = SHARED_TABLE;

/** A list-valued filter; an empty list is treated as absent, as an empty repeated field is. */
function values(filter: AdvisoryFilter, key: keyof AdvisoryFilter): string | null {
  const v = filter[key];
  return Array.isArray(v) && v.length > 0 ? JSON.stringify(v) : null;
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
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<AdvisoryFilter, AdvisoryOrder>): ListResult<AdvisoryRecord> {
    return this.lists.records(TABLE, query, filterClauses(query.filter), toRecord);
  }

  upsert(advisories: readonly AdvisoryRecord[]): UpsertOutcome[] {
    return this.db
      .transaction(() => {
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
        return outcomes;
      })
      .immediate();
  }
}
