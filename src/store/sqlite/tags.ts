import type { Database, Statement } from "better-sqlite3";
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
import type { DeletedDigest, ListQuery, ListResult, SyncTagStore, TagFilter, TagOrder, TagRecord, TagSourceTime } from "../store.js";
import { SQLITE_DIALECT, type ListRunner } from "./list.js";

// parent_uid is the tag's repo: the hierarchy filters work on it as on any table.

/**
 * TagStore over SQLite. put() creates or updates by (repo, name); the tag-form
 * flags the include filters use are computed from the name on insert (a tag
 * keeps its name, so they never go stale).
 */
export class SqliteTagStore implements SyncTagStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly byNameStmt: Statement;
  private readonly repoExistsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly sourcedByNameStmt: Statement;
  private readonly sourcedByDigestStmt: Statement;
  private readonly moveStmt: Statement;
  private readonly setSourceStmt: Statement;
  private readonly deletedAtStmt: Statement;
  private readonly rememberDeletedStmt: Statement;
  private readonly pruneDeletedStmt: Statement;
  private readonly sourceTimesStmt: Statement;
  private readonly deletedDigestsStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO tags (uid, parent_uid, name, digest, deprecated, bundles, update_time, is_referrer, is_dated, is_epoch, source_time_us)
       VALUES (@uid, @repoUid, @name, @digest, @deprecated, @bundles, @updateTime, @isReferrer, @isDated, @isEpoch, @sourceTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM tags WHERE uid = ?`);
    this.byNameStmt = db.prepare(`SELECT ${TABLE.select} FROM tags WHERE parent_uid = ? AND name = ?`);
    this.repoExistsStmt = db.prepare("SELECT 1 FROM repos WHERE uid = ?");
    this.updateStmt = db.prepare(
      // An API put is the tag's newest source: its update time counts (SOURCE_TIME_SQL).
      "UPDATE tags SET digest = @digest, deprecated = @deprecated, bundles = @bundles, update_time = @updateTime, source_time_us = NULL WHERE uid = @uid",
    );
    this.deleteStmt = db.prepare("DELETE FROM tags WHERE uid = ?");
    const sourced = `SELECT ${TABLE.select}, ${SOURCE_TIME_SQL} AS source_time FROM tags`;
    this.sourcedByNameStmt = db.prepare(`${sourced} WHERE parent_uid = ? AND name = ?`);
    this.sourcedByDigestStmt = db.prepare(`${sourced} WHERE parent_uid = ? AND digest = ? ORDER BY name`);
    this.moveStmt = db.prepare(
      "UPDATE tags SET digest = @digest, update_time = @updateTime, source_time_us = @sourceTime WHERE uid = @uid",
    );
    this.setSourceStmt = db.prepare("UPDATE tags SET source_time_us = ? WHERE uid = ?");
    this.deletedAtStmt = db.prepare("SELECT time_us FROM registry_deleted_digests WHERE repo_uid = ? AND digest = ?").pluck();
    this.rememberDeletedStmt = db.prepare(
      `INSERT INTO registry_deleted_digests (repo_uid, digest, time_us) VALUES (?, ?, ?)
       ON CONFLICT (repo_uid, digest) DO UPDATE SET time_us = MAX(time_us, excluded.time_us)`,
    );
    this.pruneDeletedStmt = db.prepare("DELETE FROM registry_deleted_digests WHERE time_us < ?");
    this.sourceTimesStmt = db.prepare(
      "SELECT uid, source_time_us FROM tags WHERE uid > ? AND source_time_us IS NOT NULL ORDER BY uid LIMIT ?",
    );
    this.deletedDigestsStmt = db.prepare(
      "SELECT repo_uid, digest, time_us FROM registry_deleted_digests WHERE (repo_uid, digest) > (?, ?) ORDER BY repo_uid, digest LIMIT ?",
    );
  }

  put(tag: TagRecord, opts: { mayUpdate?: boolean } = {}): { tag: TagRecord; created: boolean } {
    return this.db
      .transaction(() => {
        if (!this.repoExistsStmt.get(tag.repoUid)) throw new NotFoundError("repo", tag.repoUid);
        const existing = this.byNameStmt.get(tag.repoUid, tag.name) as TagRow | undefined;
        const stored: TagRecord = { ...tag, uid: existing?.uid ?? tag.uid };
        const params = { ...stored, deprecated: stored.deprecated ? 1 : 0, bundles: JSON.stringify(stored.bundles) };
        if (existing) {
          if (opts.mayUpdate === false) throw new PermissionDeniedError();
          this.updateStmt.run(params);
        } else {
          this.insert(tag, null);
        }
        return { tag: stored, created: !existing };
      })
      .immediate();
  }

  /**
   * Inserts a new tag (AlreadyExistsError for a uid taken). sourceTimeUs is the registry event that set it, or
   * null for an API put (its update time counts: SOURCE_TIME_SQL).
   */
  private insert(tag: TagRecord, sourceTimeUs: number | null): void {
    if (this.getStmt.get(tag.uid)) throw new AlreadyExistsError("tag", tag.uid);
    this.insertStmt.run({
      ...tag,
      deprecated: tag.deprecated ? 1 : 0,
      bundles: JSON.stringify(tag.bundles),
      isReferrer: isReferrerTag(tag.name) ? 1 : 0,
      isDated: isDatedTag(tag.name) ? 1 : 0,
      isEpoch: isEpochTag(tag.name) ? 1 : 0,
      sourceTime: sourceTimeUs,
    });
  }

  get(uid: string): TagRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<TagFilter, TagOrder>): ListResult<TagRecord> {
    return this.lists.records(TABLE, query, filterClauses(query.filter, SQLITE_DIALECT), toRecord);
  }

  delete(uid: string): void {
    const deleted = this.deleteStmt.run(uid).changes > 0;
    if (!deleted) throw new NotFoundError("tag", uid);
  }

  putFromRegistry(tag: TagRecord, sourceTimeUs: number): { tag: TagRecord; created: boolean } | null {
    return this.db
      .transaction(() => {
        if (!this.repoExistsStmt.get(tag.repoUid)) throw new NotFoundError("repo", tag.repoUid);
        const deletedAt = this.deletedAtStmt.get(tag.repoUid, tag.digest) as number | undefined;
        if (deletedAt !== undefined && deletedAt >= sourceTimeUs) return null;
        const existing = this.sourcedByNameStmt.get(tag.repoUid, tag.name) as SourcedTagRow | undefined;
        if (existing) {
          if (!supersedes(sourceTimeUs, tag.digest, Number(existing.source_time), existing.digest)) return null;
          if (existing.digest === tag.digest) {
            this.setSourceStmt.run(sourceTimeUs, existing.uid);
            return null;
          }
          this.moveStmt.run({ uid: existing.uid, digest: tag.digest, updateTime: tag.updateTime, sourceTime: sourceTimeUs });
          return { tag: { ...toRecord(existing), digest: tag.digest, updateTime: tag.updateTime }, created: false };
        }
        this.insert(tag, sourceTimeUs);
        return { tag, created: true };
      })
      .immediate();
  }

  deleteFromRegistry(repoUid: string, which: { digest: string } | { name: string }, sourceTimeUs: number): TagRecord[] {
    return this.db
      .transaction(() => {
        const rows = (
          "digest" in which
            ? this.sourcedByDigestStmt.all(repoUid, which.digest)
            : [this.sourcedByNameStmt.get(repoUid, which.name)].filter((r) => r !== undefined)
        ) as SourcedTagRow[];
        const older = rows.filter((r) => Number(r.source_time) < sourceTimeUs);
        for (const r of older) this.deleteStmt.run(r.uid);
        if ("digest" in which && this.repoExistsStmt.get(repoUid)) {
          this.pruneDeletedStmt.run(sourceTimeUs - DELETED_DIGEST_RETENTION_US);
          this.rememberDeletedStmt.run(repoUid, which.digest, sourceTimeUs);
        }
        return older.map(toRecord);
      })
      .immediate();
  }

  registrySourceTimes(afterUid: string, limit: number): TagSourceTime[] {
    return (this.sourceTimesStmt.all(afterUid, limit) as { uid: string; source_time_us: number }[]).map((r) => ({
      tagUid: r.uid,
      timeUs: r.source_time_us,
    }));
  }

  deletedDigests(after: { repoUid: string; digest: string } | null, limit: number): DeletedDigest[] {
    return (
      this.deletedDigestsStmt.all(after?.repoUid ?? "", after?.digest ?? "", limit) as {
        repo_uid: string;
        digest: string;
        time_us: number;
      }[]
    ).map((r) => ({ repoUid: r.repo_uid, digest: r.digest, timeUs: r.time_us }));
  }

  restoreRegistryMemory(memory: { sourceTimes: readonly TagSourceTime[]; deletedDigests: readonly DeletedDigest[] }): void {
    this.db
      .transaction(() => {
        for (const { tagUid, timeUs } of memory.sourceTimes) {
          if (this.setSourceStmt.run(timeUs, tagUid).changes === 0) throw new NotFoundError("tag", tagUid);
        }
        for (const { repoUid, digest, timeUs } of memory.deletedDigests) {
          if (!this.repoExistsStmt.get(repoUid)) throw new NotFoundError("repo", repoUid);
          this.rememberDeletedStmt.run(repoUid, digest, timeUs);
        }
      })
      .immediate();
  }
}
