import { AlreadyExistsError, NotFoundError, PermissionDeniedError } from "../../domain/errors.js";
import { isDatedTag, isEpochTag, isReferrerTag } from "../../domain/registry-names.js";
import { filterClauses, TABLE, toRecord, type TagRow } from "../rows/tags.js";
import type { ListQuery, ListResult, TagFilter, TagOrder, TagRecord, TagStore } from "../store.js";
import { exists, insertRow, listRecords, one, POSTGRES_DIALECT, updateRow } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

// parent_uid is the tag's repo: the hierarchy filters work on it as on any table.

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
      };
      if (existing) {
        if (opts.mayUpdate === false) throw new PermissionDeniedError();
        await updateRow(q, "tags", existing.uid, columns);
        return { tag: stored, created: false };
      }
      if (await exists(q, "SELECT 1 FROM tags WHERE uid = ?", [tag.uid])) throw new AlreadyExistsError("tag", tag.uid);
      try {
        await insertRow(q, "tags", {
          uid: tag.uid,
          parent_uid: tag.repoUid,
          name: tag.name,
          ...columns,
          is_referrer: isReferrerTag(tag.name),
          is_dated: isDatedTag(tag.name),
          is_epoch: isEpochTag(tag.name),
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("tag", tag.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("repo", tag.repoUid);
        throw err;
      }
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
}
