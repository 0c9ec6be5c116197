import type { Database, Statement } from "better-sqlite3";
import { NotFoundError } from "../../domain/errors.js";
import { comparable, filterClauses, TABLE, toRecord } from "../sql/advisories.js";
import type { AdvisoryFilter, AdvisoryOrder, AdvisoryRecord, ListQuery, ListResult, SyncAdvisoryStore, UpsertOutcome } from "../store.js";
import { SQLITE_DIALECT, type ListRunner } from "./list.js";

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
    return this.lists.records(TABLE, query, filterClauses(query.filter, SQLITE_DIALECT), toRecord);
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
