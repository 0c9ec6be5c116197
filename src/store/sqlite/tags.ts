import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError, PermissionDeniedError } from "../../domain/errors.js";
import { isDatedTag, isEpochTag, isReferrerTag } from "../../domain/registry-names.js";
import { filterClauses, TABLE, toRecord, type TagRow } from "../rows/tags.js";
import type { ListQuery, ListResult, SyncTagStore, TagFilter, TagOrder, TagRecord } from "../store.js";
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

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO tags (uid, parent_uid, name, digest, deprecated, bundles, update_time, is_referrer, is_dated, is_epoch)
       VALUES (@uid, @repoUid, @name, @digest, @deprecated, @bundles, @updateTime, @isReferrer, @isDated, @isEpoch)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM tags WHERE uid = ?`);
    this.byNameStmt = db.prepare(`SELECT ${TABLE.select} FROM tags WHERE parent_uid = ? AND name = ?`);
    this.repoExistsStmt = db.prepare("SELECT 1 FROM repos WHERE uid = ?");
    this.updateStmt = db.prepare(
      "UPDATE tags SET digest = @digest, deprecated = @deprecated, bundles = @bundles, update_time = @updateTime WHERE uid = @uid",
    );
    this.deleteStmt = db.prepare("DELETE FROM tags WHERE uid = ?");
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
          if (this.getStmt.get(tag.uid)) throw new AlreadyExistsError("tag", tag.uid);
          this.insertStmt.run({
            ...params,
            isReferrer: isReferrerTag(tag.name) ? 1 : 0,
            isDated: isDatedTag(tag.name) ? 1 : 0,
            isEpoch: isEpochTag(tag.name) ? 1 : 0,
          });
        }
        return { tag: stored, created: !existing };
      })
      .immediate();
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
}
