import { AlreadyExistsError, NotFoundError, PermissionDeniedError } from "../../domain/errors.js";
import { isDatedTag, isEpochTag, isReferrerTag } from "../../domain/registry-names.js";
import {
  DELETED_DIGEST_RETENTION_US,
  filterClauses,
  SOURCE_TIME_SQL,
  supersedes,
  TABLE,
  toRecord,
  type SourcedTagRow,
  type TagRow,
} from "../sql/tags.js";
import type { DeletedDigest, ListQuery, ListResult, TagFilter, TagOrder, TagRecord, TagSourceTime, TagStore } from "../store.js";
import { exists, insertRow, listRecords, one, POSTGRES_DIALECT, updateRow, type Queryable } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

// parent_uid is the tag's repo: the hierarchy filters work on it as on any table.

/** Remembers a digest deleted from a repo at a time ($1 repo, $2 digest, $3 µs); one remembered already keeps the later time. */
const REMEMBER_DELETED = `INSERT INTO registry_deleted_digests (repo_uid, digest, time_us) VALUES ($1, $2, $3)
  ON CONFLICT (repo_uid, digest) DO UPDATE SET time_us = GREATEST(registry_deleted_digests.time_us, excluded.time_us)`;

/** A tag with the time of what set it. */
const SOURCED = `SELECT ${TABLE.select}, ${SOURCE_TIME_SQL} AS source_time FROM tags`;

/**
 * Inserts a new tag: AlreadyExistsError for a uid taken, NotFoundError for a missing repo. sourceTimeUs is the
 * registry event that set it, or null for an API put (its update time counts: SOURCE_TIME_SQL).
 */
async function insertTag(q: Queryable, tag: TagRecord, sourceTimeUs: number | null): Promise<void> {
  if (await exists(q, "SELECT 1 FROM tags WHERE uid = ?", [tag.uid])) throw new AlreadyExistsError("tag", tag.uid);
  try {
    await insertRow(q, "tags", {
      uid: tag.uid,
      parent_uid: tag.repoUid,
      name: tag.name,
      digest: tag.digest,
      deprecated: tag.deprecated,
      bundles: JSON.stringify(tag.bundles),
      update_time: tag.updateTime,
      is_referrer: isReferrerTag(tag.name),
      is_dated: isDatedTag(tag.name),
      is_epoch: isEpochTag(tag.name),
      source_time_us: sourceTimeUs,
    });
  } catch (err) {
    if (sqlState(err) === "23505") throw new AlreadyExistsError("tag", tag.uid);
    if (sqlState(err) === "23503") throw new NotFoundError("repo", tag.repoUid);
    throw err;
  }
}

/** TagStore over PostgreSQL. put() creates or updates by (repo, name), the unique constraint deciding a race. */
export class PgTagStore implements TagStore {
  constructor(private readonly run: Runner) {}

  put(tag: TagRecord, opts: { mayUpdate?: boolean } = {}): Promise<{ tag: TagRecord; created: boolean }> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [tag.repoUid]))) throw new NotFoundError("repo", tag.repoUid);
      const existing = await one<{ uid: string }>(q, "SELECT uid FROM tags WHERE parent_uid = ? AND name = ? FOR UPDATE", [
        tag.repoUid,
        tag.name,
      ]);
      const stored: TagRecord = { ...tag, uid: existing?.uid ?? tag.uid };
      const columns = {
        digest: stored.digest,
        deprecated: stored.deprecated,
        bundles: JSON.stringify(stored.bundles),
        update_time: stored.updateTime,
        // An API put is the tag's newest source: its update time counts (SOURCE_TIME_SQL).
        source_time_us: null,
      };
      if (existing) {
        if (opts.mayUpdate === false) throw new PermissionDeniedError();
        await updateRow(q, "tags", existing.uid, columns);
        return { tag: stored, created: false };
      }
      await insertTag(q, tag, null);
      return { tag: stored, created: true };
    });
  }

  async get(uid: string): Promise<TagRecord | null> {
    const row = await one<TagRow>(this.run.q, `SELECT ${TABLE.select} FROM tags WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<TagFilter, TagOrder>): Promise<ListResult<TagRecord>> {
    return listRecords(this.run.q, TABLE, query, filterClauses(query.filter, POSTGRES_DIALECT), toRecord);
  }

  async delete(uid: string): Promise<void> {
    const { rowCount } = await this.run.q.query("DELETE FROM tags WHERE uid = $1", [uid]);
    if (!rowCount) throw new NotFoundError("tag", uid);
  }

  putFromRegistry(tag: TagRecord, sourceTimeUs: number): Promise<{ tag: TagRecord; created: boolean } | null> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [tag.repoUid]))) throw new NotFoundError("repo", tag.repoUid);
      const deleted = await one<{ time_us: number | string }>(
        q,
        "SELECT time_us FROM registry_deleted_digests WHERE repo_uid = ? AND digest = ?",
        [tag.repoUid, tag.digest],
      );
      if (deleted && Number(deleted.time_us) >= sourceTimeUs) return null;
      const existing = await one<SourcedTagRow>(q, `${SOURCED} WHERE parent_uid = ? AND name = ? FOR UPDATE`, [tag.repoUid, tag.name]);
      if (existing) {
        if (!supersedes(sourceTimeUs, tag.digest, Number(existing.source_time), existing.digest)) return null;
        if (existing.digest === tag.digest) {
          await updateRow(q, "tags", existing.uid, { source_time_us: sourceTimeUs });
          return null;
        }
        await updateRow(q, "tags", existing.uid, { digest: tag.digest, update_time: tag.updateTime, source_time_us: sourceTimeUs });
        return { tag: { ...toRecord(existing), digest: tag.digest, updateTime: tag.updateTime }, created: false };
      }
      await insertTag(q, tag, sourceTimeUs);
      return { tag, created: true };
    });
  }

  deleteFromRegistry(repoUid: string, which: { digest: string } | { name: string }, sourceTimeUs: number): Promise<TagRecord[]> {
    return this.run.atomically(async (q) => {
      const [column, value] = "digest" in which ? ["digest", which.digest] : ["name", which.name];
      const { rows } = await q.query<SourcedTagRow>(
        `DELETE FROM tags WHERE parent_uid = $1 AND ${column} = $2 AND ${SOURCE_TIME_SQL} < $3 RETURNING ${TABLE.select}`,
        [repoUid, value, sourceTimeUs],
      );
      if ("digest" in which && (await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [repoUid]))) {
        await q.query("DELETE FROM registry_deleted_digests WHERE time_us < $1", [sourceTimeUs - DELETED_DIGEST_RETENTION_US]);
        await q.query(REMEMBER_DELETED, [repoUid, which.digest, sourceTimeUs]);
      }
      return rows.map(toRecord).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    });
  }

  async registrySourceTimes(afterUid: string, limit: number): Promise<TagSourceTime[]> {
    const { rows } = await this.run.q.query<{ uid: string; source_time_us: string }>(
      "SELECT uid, source_time_us FROM tags WHERE uid > $1 AND source_time_us IS NOT NULL ORDER BY uid LIMIT $2",
      [afterUid, limit],
    );
    return rows.map((r) => ({ tagUid: r.uid, timeUs: Number(r.source_time_us) }));
  }

  async deletedDigests(after: { repoUid: string; digest: string } | null, limit: number): Promise<DeletedDigest[]> {
    const { rows } = await this.run.q.query<{ repo_uid: string; digest: string; time_us: string }>(
      `SELECT repo_uid, digest, time_us FROM registry_deleted_digests WHERE (repo_uid, digest) > ($1, $2)
       ORDER BY repo_uid, digest LIMIT $3`,
      [after?.repoUid ?? "", after?.digest ?? "", limit],
    );
    return rows.map((r) => ({ repoUid: r.repo_uid, digest: r.digest, timeUs: Number(r.time_us) }));
  }

  restoreRegistryMemory(memory: { sourceTimes: readonly TagSourceTime[]; deletedDigests: readonly DeletedDigest[] }): Promise<void> {
    return this.run.atomically(async (q) => {
      for (const { tagUid, timeUs } of memory.sourceTimes) {
        const { rowCount } = await q.query("UPDATE tags SET source_time_us = $1 WHERE uid = $2", [timeUs, tagUid]);
        if (!rowCount) throw new NotFoundError("tag", tagUid);
      }
      for (const { repoUid, digest, timeUs } of memory.deletedDigests) {
        if (!(await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [repoUid]))) throw new NotFoundError("repo", repoUid);
        await q.query(REMEMBER_DELETED, [repoUid, digest, timeUs]);
      }
    });
  }
}
