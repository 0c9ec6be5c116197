import { NotFoundError } from "../../domain/errors.js";
import { comparable, filterClauses, TABLE, toRecord, type AdvisoryRow } from "../sql/advisories.js";
import type { AdvisoryFilter, AdvisoryOrder, AdvisoryRecord, AdvisoryStore, ListQuery, ListResult, UpsertOutcome } from "../store.js";
import { exists, listRecords, one, POSTGRES_DIALECT } from "./list.js";
import type { Runner } from "./tx.js";

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
    return listRecords(this.run.q, TABLE, query, filterClauses(query.filter, POSTGRES_DIALECT), toRecord);
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
          a.uid,
          a.parentUid,
          a.advisoryId,
          a.legacyAdvisoryId,
          a.author,
          a.artifactName,
          a.artifactType,
          a.artifactArchitecture,
          a.componentName,
          a.componentLocation,
          a.componentType,
          a.origin,
          JSON.stringify(a.aliases),
          JSON.stringify(a.severities),
          JSON.stringify(a.events),
          a.createTime,
          a.updateTime,
          a.deleteTime,
        ]);
        outcomes.push(current ? "updated" : "created");
      }
      return outcomes;
    });
  }
}
