import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type AccountAssociationRow } from "../sql/account-associations.js";
import type {
  AccountAssociationChanges,
  AccountAssociationFilter,
  AccountAssociationOrder,
  AccountAssociationRecord,
  AccountAssociationStore,
  ListQuery,
  ListResult,
} from "../store.js";
import { exact, exists, insertRow, listRecords, one, updateRow } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

// The association's uid is its group's: ordering by "group" is ordering by uid,
// and parent_uid (the group's parent) makes the hierarchy filters work as elsewhere.

/** AccountAssociationStore over PostgreSQL: at most one association per group, under the group's own uid. */
export class PgAccountAssociationStore implements AccountAssociationStore {
  constructor(private readonly run: Runner) {}

  create(association: AccountAssociationRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      const owner = await one<{ parent_uid: string | null }>(q, "SELECT parent_uid FROM groups WHERE uid = ?", [association.uid]);
      if (!owner) throw new NotFoundError("group", association.uid);
      if (await exists(q, "SELECT 1 FROM account_associations WHERE uid = ?", [association.uid])) {
        throw new AlreadyExistsError("account association", association.uid);
      }
      try {
        await insertRow(q, "account_associations", {
          uid: association.uid,
          parent_uid: owner.parent_uid,
          name: association.name,
          description: association.description,
          providers: JSON.stringify(association.providers),
          create_time: association.createTime,
          update_time: association.updateTime,
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("account association", association.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("group", association.uid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<AccountAssociationRecord | null> {
    const row = await one<AccountAssociationRow>(this.run.q, `SELECT ${TABLE.select} FROM account_associations WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<AccountAssociationFilter, AccountAssociationOrder>): Promise<ListResult<AccountAssociationRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: AccountAssociationChanges, updateTime: number): Promise<AccountAssociationRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<AccountAssociationRow>(q, `SELECT ${TABLE.select} FROM account_associations WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("account association", uid);
      const next: AccountAssociationRecord = { ...toRecord(row), ...changes, updateTime };
      await updateRow(q, "account_associations", uid, {
        name: next.name,
        description: next.description,
        providers: JSON.stringify(next.providers),
        update_time: updateTime,
      });
      return next;
    });
  }

  async delete(uid: string): Promise<boolean> {
    const { rowCount } = await this.run.q.query("DELETE FROM account_associations WHERE uid = $1", [uid]);
    return (rowCount ?? 0) > 0;
  }
}
