import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord } from "../sql/repos.js";
import type { ListQuery, ListResult, RepoChanges, RepoFilter, RepoOrder, RepoRecord, SyncRepoStore } from "../store.js";
import { exact, type ListRunner } from "./list.js";

/** The statement parameters of a record: list fields travel as JSON text. */
function toParams(repo: RepoRecord) {
  return {
    ...repo,
    bundles: JSON.stringify(repo.bundles),
    aliases: JSON.stringify(repo.aliases),
    activeTags: JSON.stringify(repo.activeTags),
  };
}

/**
 * RepoStore over SQLite. Names are unique within a group; a clash is checked
 * before the write so it is reported as AlreadyExistsError naming the repo
 * that holds the name. A repo with tags cannot be deleted.
 */
export class SqliteRepoStore implements SyncRepoStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly byNameStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly hasTagsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO repos (uid, parent_uid, name, description, catalog_tier, bundles, aliases, active_tags, create_time, update_time)
       VALUES (@uid, @parentUid, @name, @description, @catalogTier, @bundles, @aliases, @activeTags, @createTime, @updateTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM repos WHERE uid = ?`);
    this.byNameStmt = db.prepare("SELECT uid FROM repos WHERE parent_uid = ? AND name = ?");
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.hasTagsStmt = db.prepare("SELECT 1 FROM tags WHERE parent_uid = ? LIMIT 1");
    this.updateStmt = db.prepare(
      `UPDATE repos SET name = @name, description = @description, catalog_tier = @catalogTier, bundles = @bundles,
         aliases = @aliases, active_tags = @activeTags, update_time = @updateTime WHERE uid = @uid`,
    );
    this.deleteStmt = db.prepare("DELETE FROM repos WHERE uid = ?");
  }

  create(repo: RepoRecord): void {
    this.db
      .transaction(() => {
        if (!this.groupExistsStmt.get(repo.parentUid)) throw new NotFoundError("group", repo.parentUid);
        if (this.getStmt.get(repo.uid)) throw new AlreadyExistsError("repo", repo.uid);
        this.requireNameFree(repo.parentUid, repo.name, repo.uid);
        this.insertStmt.run(toParams(repo));
      })
      .immediate();
  }

  get(uid: string): RepoRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<RepoFilter, RepoOrder>): ListResult<RepoRecord> {
    return this.lists.records(TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: RepoChanges, updateTime: number): RepoRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("repo", uid);
        const next: RepoRecord = { ...current, ...changes, updateTime };
        if (next.name !== current.name) this.requireNameFree(next.parentUid, next.name, uid);
        this.updateStmt.run(toParams(next));
        return next;
      })
      .immediate();
  }

  delete(uid: string): void {
    this.db
      .transaction(() => {
        if (!this.getStmt.get(uid)) throw new NotFoundError("repo", uid);
        if (this.hasTagsStmt.get(uid)) {
          throw new FailedPreconditionError([
            { type: "RESOURCE_NOT_EMPTY", subject: uid, description: "the repo still has tags; delete them first" },
          ]);
        }
        this.deleteStmt.run(uid);
      })
      .immediate();
  }

  /** Throws AlreadyExistsError naming the other repo of group that holds name. */
  private requireNameFree(group: string, name: string, uid: string): void {
    const holder = this.byNameStmt.get(group, name) as { uid: string } | undefined;
    if (holder && holder.uid !== uid) throw new AlreadyExistsError("repo", holder.uid);
  }
}
