import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord, type IdentityProviderRow } from "../sql/identity-providers.js";
import type {
  IdentityProviderChanges,
  IdentityProviderFilter,
  IdentityProviderOrder,
  IdentityProviderRecord,
  IdentityProviderStore,
  ListQuery,
  ListResult,
} from "../store.js";
import { exact, exists, insertRow, listRecords, one, updateRow } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/** IdentityProviderStore over PostgreSQL; the OIDC settings, client secret included, are one JSON column. */
export class PgIdentityProviderStore implements IdentityProviderStore {
  constructor(private readonly run: Runner) {}

  create(provider: IdentityProviderRecord): Promise<void> {
    return this.run.atomically(async (q) => {
      if (!(await exists(q, "SELECT 1 FROM groups WHERE uid = ?", [provider.parentUid])))
        throw new NotFoundError("group", provider.parentUid);
      if (!(await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [provider.defaultRole])))
        throw new NotFoundError("role", provider.defaultRole);
      if (await exists(q, "SELECT 1 FROM identity_providers WHERE uid = ?", [provider.uid]))
        throw new AlreadyExistsError("identity provider", provider.uid);
      try {
        await insertRow(q, "identity_providers", {
          uid: provider.uid,
          parent_uid: provider.parentUid,
          name: provider.name,
          description: provider.description,
          default_role: provider.defaultRole,
          oidc: JSON.stringify(provider.oidc),
          create_time: provider.createTime,
          update_time: provider.updateTime,
        });
      } catch (err) {
        if (sqlState(err) === "23505") throw new AlreadyExistsError("identity provider", provider.uid);
        if (sqlState(err) === "23503") throw new NotFoundError("group", provider.parentUid);
        throw err;
      }
    });
  }

  async get(uid: string): Promise<IdentityProviderRecord | null> {
    const row = await one<IdentityProviderRow>(this.run.q, `SELECT ${TABLE.select} FROM identity_providers WHERE uid = ?`, [uid]);
    return row && toRecord(row);
  }

  list(query: ListQuery<IdentityProviderFilter, IdentityProviderOrder>): Promise<ListResult<IdentityProviderRecord>> {
    return listRecords(this.run.q, TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: IdentityProviderChanges, updateTime: number): Promise<IdentityProviderRecord> {
    return this.run.atomically(async (q) => {
      const row = await one<IdentityProviderRow>(q, `SELECT ${TABLE.select} FROM identity_providers WHERE uid = ? FOR UPDATE`, [uid]);
      if (!row) throw new NotFoundError("identity provider", uid);
      const next: IdentityProviderRecord = { ...toRecord(row), ...changes, updateTime };
      if (!(await exists(q, "SELECT 1 FROM roles WHERE uid = ?", [next.defaultRole]))) throw new NotFoundError("role", next.defaultRole);
      await updateRow(q, "identity_providers", uid, {
        name: next.name,
        description: next.description,
        default_role: next.defaultRole,
        oidc: JSON.stringify(next.oidc),
        update_time: updateTime,
      });
      return next;
    });
  }

  async delete(uid: string): Promise<void> {
    const { rowCount } = await this.run.q.query("DELETE FROM identity_providers WHERE uid = $1", [uid]);
    if (!rowCount) throw new NotFoundError("identity provider", uid);
  }
}
