import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type RepoRow } from "../sql/repos.js";
import type { ListQuery, ListResult, RepoChanges, RepoFilter, RepoOrder, RepoRecord, RepoStore } from "../store.js";
import { exact, exists, insertRow, listRecords, one, updateRow, type Queryable } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/** The changeable columns of a repo. */
function changeable(repo: RepoRecord) {
  return {
    name: repo.name,
    description: repo.description,
    catalog_tier: repo.catalogTier,
    bundles: JSON.stringify(repo.bundles),
    aliases: JSON.stringify(repo.aliases),
    active_tags: JSON.stringify(repo.activeTags),
    update_time: repo.updateTime,
  };
}

/** RepoStore over PostgreSQL; names are unique within a group (a constraint backs the check). */
export class PgRepoStore implements RepoStore {
  constructor(private readonly run: Runner) {}

  create(repo: RepoRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [repo.parentUid]))) throw new NotFoundError("group", repo.parentUid);
      if (await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [repo.uid])) throw new AlreadyExistsError("repo", repo.uid);
      await requireNameFree(q, repo.parentUid, repo.name, repo.uid);
      try {
        await insertRow(q, "repos", { uid: repo.uid, parent_uid: repo.parentUid, ...changeable(repo), create_time: repo.createTime });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("repo", repo.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("group", repo.parentUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<RepoRecord | null> {
    const row = await one<RepoRow>(this.run.q, `SELECT ${TABLE.select} FROM repos WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<RepoFilter, RepoOrder>): Promise<ListResult<RepoRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: RepoChanges, updateTime: number): Promise<RepoRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<RepoRow>(q, `SELECT ${TABLE.select} FROM repos WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("repo", uid);
      const current = toRecord(row);
      const next: RepoRecord = { ...current, ...changes, updateTime };
      if (next.name !== current.name) await requireNameFree(q, next.parentUid, next.name, uid);
      try {
        await updateRow(q, "repos", uid, changeable(next));
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("repo", uid);
        throw err;
      }
      return next;
    });
  }

  delete(uid: string): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM repos WHERE uid = ?", [uid]))) throw new NotFoundError("repo", uid);
      const notEmpty = () =>
        new FailedPreconditionError([
          { type: "RESOURCE_NOT_EMPTY", subject: uid, description: "the repo still has tags; delete them first" },
        ]);
      if (await exists(q, "SELECT 1 FROM tags WHERE parent_uid = ? LIMIT 1", [uid])) throw notEmpty();
      try {
        await q.query("DELETE FROM repos WHERE uid = $1", [uid]);
      } catch (err) {
        if (sqlState(err) === "23503") throw notEmpty();
        throw err;
      }
    });
  }
}

/** Throws AlreadyExistsError naming the other repo of group that holds name. */
async function requireNameFree(q: Queryable, group: string, name: string, uid: string): Promise<void> {
  const holder = await one<{ uid: string }>(q, "SELECT uid FROM repos WHERE parent_uid = ? AND name = ?", [group, name]);
  if (holder && holder.uid !== uid) throw new AlreadyExistsError("repo", holder.uid);
}
