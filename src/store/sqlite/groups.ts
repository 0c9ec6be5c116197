import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type GroupChildKind } from "../sql/groups.js";
import type { GroupChanges, GroupFilter, GroupOrder, GroupRecord, ListQuery, ListResult, SyncGroupStore } from "../store.js";
import { exact, type ListRunner } from "./list.js";

/** GroupStore over SQLite; children of every kind are checked before a delete. */
export class SqliteGroupStore implements SyncGroupStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly rootsCreatedByStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly childChecks: { label: string; stmt: Statement }[];

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
    childKinds: readonly GroupChildKind[],
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO groups (uid, parent_uid, name, description, verified, resource_limits, create_time, update_time, creator_uid)
       VALUES (@uid, @parentUid, @name, @description, @verified, @resourceLimits, @createTime, @updateTime, @creatorUid)`,
    );
    this.rootsCreatedByStmt = db.prepare("SELECT count(*) FROM groups WHERE creator_uid = ?").pluck();
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM groups WHERE uid = ?`);
    this.updateStmt = db.prepare("UPDATE groups SET name = @name, description = @description, update_time = @updateTime WHERE uid = @uid");
    this.deleteStmt = db.prepare("DELETE FROM groups WHERE uid = ?");
    this.childChecks = [
      { label: "child groups", stmt: db.prepare("SELECT 1 FROM groups WHERE parent_uid = ? LIMIT 1") },
      ...childKinds.map((k) => ({ label: k.label, stmt: db.prepare(k.existsSql) })),
    ];
  }

  create(group: GroupRecord): void {
    this.insert(group, null);
  }

  createRoot(group: GroupRecord, creatorUid: string): void {
    this.insert(group, creatorUid);
  }

  private insert(group: GroupRecord, creatorUid: string | null): void {
    if (group.parentUid !== null && !this.getStmt.get(group.parentUid)) {
      throw new NotFoundError("group", group.parentUid);
    }
    if (this.getStmt.get(group.uid)) throw new AlreadyExistsError("group", group.uid);
    this.insertStmt.run({
      ...group,
      verified: group.verified ? 1 : 0,
      resourceLimits: JSON.stringify(group.resourceLimits),
      creatorUid,
    });
  }

  rootsCreatedBy(identityUid: string): number {
    return this.rootsCreatedByStmt.get(identityUid) as number;
  }

  get(uid: string): GroupRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<GroupFilter, GroupOrder>): ListResult<GroupRecord> {
    return this.lists.records(TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: GroupChanges, updateTime: number): GroupRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("group", uid);
        const next = { ...current, ...changes, updateTime };
        this.updateStmt.run({ uid, name: next.name, description: next.description, updateTime });
        return next;
      })
      .immediate();
  }

  delete(uid: string): void {
    this.db
      .transaction(() => {
        if (!this.getStmt.get(uid)) throw new NotFoundError("group", uid);
        for (const check of this.childChecks) {
          if (check.stmt.get(uid)) {
            throw new FailedPreconditionError([
              {
                type: "RESOURCE_NOT_EMPTY",
                subject: uid,
                description: `the group still has ${check.label}; delete them first`,
              },
            ]);
          }
        }
        this.deleteStmt.run(uid);
      })
      .immediate();
  }
}
