import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord } from "../sql/account-associations.js";
import type {
  AccountAssociationChanges,
  AccountAssociationFilter,
  AccountAssociationOrder,
  AccountAssociationRecord,
  ListQuery,
  ListResult,
  SyncAccountAssociationStore,
} from "../store.js";
import { exact, type ListRunner } from "./list.js";

// The association's uid is its group's: ordering by "group" is ordering by uid,
// and parent_uid (the group's parent) makes the hierarchy filters work as elsewhere.

/** AccountAssociationStore over SQLite: at most one association per group, keyed by the group's uid. */
export class SqliteAccountAssociationStore implements SyncAccountAssociationStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupParentStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO account_associations (uid, parent_uid, name, description, providers, create_time, update_time)
       VALUES (@uid, @parentUid, @name, @description, @providers, @createTime, @updateTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM account_associations WHERE uid = ?`);
    this.groupParentStmt = db.prepare("SELECT parent_uid FROM groups WHERE uid = ?");
    this.updateStmt = db.prepare(
      `UPDATE account_associations SET name = @name, description = @description, providers = @providers,
         update_time = @updateTime WHERE uid = @uid`,
    );
    this.deleteStmt = db.prepare("DELETE FROM account_associations WHERE uid = ?");
  }

  create(association: AccountAssociationRecord): void {
    const owner = this.groupParentStmt.get(association.uid) as { parent_uid: string | null } | undefined;
    if (!owner) throw new NotFoundError("group", association.uid);
    if (this.getStmt.get(association.uid)) throw new AlreadyExistsError("account association", association.uid);
    this.insertStmt.run({
      ...association,
      parentUid: owner.parent_uid,
      providers: JSON.stringify(association.providers),
    });
  }

  get(uid: string): AccountAssociationRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<AccountAssociationFilter, AccountAssociationOrder>): ListResult<AccountAssociationRecord> {
    return this.lists.records(TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: AccountAssociationChanges, updateTime: number): AccountAssociationRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("account association", uid);
        const next: AccountAssociationRecord = { ...current, ...changes, updateTime };
        this.updateStmt.run({
          uid,
          name: next.name,
          description: next.description,
          providers: JSON.stringify(next.providers),
          updateTime,
        });
        return next;
      })
      .immediate();
  }

  delete(uid: string): boolean {
    return this.deleteStmt.run(uid).changes > 0;
  }
}
