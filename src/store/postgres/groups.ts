import { AlreadyExistsError, FailedPreconditionError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type GroupChildKind, type GroupRow } from "../sql/groups.js";
import type { GroupChanges, GroupFilter, GroupOrder, GroupRecord, GroupStore, ListQuery, ListResult } from "../store.js";
import { exact, listRecords, one } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

const SELECT_ONE = `SELECT ${TABLE.select} FROM groups WHERE uid = ?`;

/** GroupStore over PostgreSQL; children of every kind are checked before a delete, and the foreign keys hold regardless. */
export class PgGroupStore implements GroupStore {
  private readonly childChecks: readonly GroupChildKind[];

  constructor(
    private readonly run: Runner,
    childKinds: readonly GroupChildKind[],
  ) {
    this.childChecks = [{ label: "child groups", existsSql: "SELECT 1 FROM groups WHERE parent_uid = ? LIMIT 1" }, ...childKinds];
  }

  /**
   * One INSERT, its constraints deciding: no read for the parent or the uid,
   * so concurrent creates under one parent never conflict under SERIALIZABLE.
   */
  create(group: GroupRecord): Promise<void> {
    return this.insert(group, null);
  }

  createRoot(group: GroupRecord, creatorUid: string): Promise<void> {
    return this.insert(group, creatorUid);
  }

  private async insert(group: GroupRecord, creatorUid: string | null): Promise<void> {
    try {
      await this.run.q.query(
        `INSERT INTO groups (uid, parent_uid, name, description, verified, resource_limits, create_time, update_time, creator_uid)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        [
          group.uid,
          group.parentUid,
          group.name,
          group.description,
          group.verified,
          JSON.stringify(group.resourceLimits),
          group.createTime,
          group.updateTime,
          creatorUid,
        ],
      );
    } catch (err) {
      if (sqlState(err) === "23505") throw new AlreadyExistsError("group", group.uid);
      if (sqlState(err) === "23503" && group.parentUid !== null) throw new NotFoundError("group", group.parentUid);
      throw err;
    }
  }

  async rootsCreatedBy(identityUid: string): Promise<number> {
    const { rows } = await this.run.q.query<{ n: number }>("SELECT count(*)::int AS n FROM groups WHERE creator_uid = $1", [identityUid]);
    return rows[0]!.n;
  }

  async get(uid: string): Promise<GroupRecord | null> {
    const row = await one<GroupRow>(this.run.q, SELECT_ONE, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<GroupFilter, GroupOrder>): Promise<ListResult<GroupRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: GroupChanges, updateTime: number): Promise<GroupRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<GroupRow>(q, `${SELECT_ONE} FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("group", uid);
      const next = { ...toRecord(row), ...changes, updateTime };
      await q.query("UPDATE groups SET name = $2, description = $3, update_time = $4 WHERE uid = $1", [
        uid,
        next.name,
        next.description,
        updateTime,
      ]);
      return next;
    });
  }

  delete(uid: string): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await one(q, "SELECT 1 FROM groups WHERE uid = ?", [uid]))) throw new NotFoundError("group", uid);
      for (const check of this.childChecks) {
        if (await one(q, check.existsSql, [uid])) {
          throw new FailedPreconditionError([
            { type: "RESOURCE_NOT_EMPTY", subject: uid, description: `the group still has ${check.label}; delete them first` },
          ]);
        }
      }
      try {
        await q.query("DELETE FROM groups WHERE uid = $1", [uid]);
      } catch (err) {
        // A child committed between the checks and the delete: the foreign key refuses.
        if (sqlState(err) === "23503") {
          throw new FailedPreconditionError([
            { type: "RESOURCE_NOT_EMPTY", subject: uid, description: "the group still has records below it; delete them first" },
          ]);
        }
        throw err;
      }
    });
  }
}
