import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord } from "../sql/identity-providers.js";
import type {
  IdentityProviderChanges,
  IdentityProviderFilter,
  IdentityProviderOrder,
  IdentityProviderRecord,
  ListQuery,
  ListResult,
  SyncIdentityProviderStore,
} from "../store.js";
import { exact, type ListRunner } from "./list.js";

/**
 * IdentityProviderStore over SQLite. The OIDC settings, client secret
 * included, are one JSON column: the API hides the secret, the store keeps it.
 */
export class SqliteIdentityProviderStore implements SyncIdentityProviderStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly roleExistsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly deleteStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO identity_providers (uid, parent_uid, name, description, default_role, oidc, create_time, update_time)
       VALUES (@uid, @parentUid, @name, @description, @defaultRole, @oidc, @createTime, @updateTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM identity_providers WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.roleExistsStmt = db.prepare("SELECT 1 FROM roles WHERE uid = ?");
    this.updateStmt = db.prepare(
      `UPDATE identity_providers SET name = @name, description = @description, default_role = @defaultRole,
         oidc = @oidc, update_time = @updateTime WHERE uid = @uid`,
    );
    this.deleteStmt = db.prepare("DELETE FROM identity_providers WHERE uid = ?");
  }

  create(provider: IdentityProviderRecord): void {
    if (!this.groupExistsStmt.get(provider.parentUid)) throw new NotFoundError("group", provider.parentUid);
    this.requireRole(provider.defaultRole);
    if (this.getStmt.get(provider.uid)) throw new AlreadyExistsError("identity provider", provider.uid);
    this.insertStmt.run({ ...provider, oidc: JSON.stringify(provider.oidc) });
  }

  get(uid: string): IdentityProviderRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<IdentityProviderFilter, IdentityProviderOrder>): ListResult<IdentityProviderRecord> {
    return this.lists.records(TABLE, query, exact({ "t.name": query.filter.name }), toRecord);
  }

  update(uid: string, changes: IdentityProviderChanges, updateTime: number): IdentityProviderRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("identity provider", uid);
        const next: IdentityProviderRecord = { ...current, ...changes, updateTime };
        this.requireRole(next.defaultRole);
        this.updateStmt.run({
          uid,
          name: next.name,
          description: next.description,
          defaultRole: next.defaultRole,
          oidc: JSON.stringify(next.oidc),
          updateTime,
        });
        return next;
      })
      .immediate();
  }

  delete(uid: string): void {
    this.db
      .transaction(() => {
        if (!this.getStmt.get(uid)) throw new NotFoundError("identity provider", uid);
        this.deleteStmt.run(uid);
      })
      .immediate();
  }

  private requireRole(uid: string): void {
    if (!this.roleExistsStmt.get(uid)) throw new NotFoundError("role", uid);
  }
}
