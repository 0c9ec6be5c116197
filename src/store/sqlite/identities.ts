import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { TABLE, toRecord } from "../sql/identities.js";
import type {
  IdentityChanges,
  IdentityFilter,
  IdentityOrder,
  IdentityRecord,
  IdentityRelationship,
  ListQuery,
  ListResult,
  SyncIdentityStore,
} from "../store.js";
import { exact, type ListRunner } from "./list.js";

/** The relationship as its two columns: the kind, and that kind's object as JSON. */
function relationshipColumns(r: IdentityRelationship): { relationshipKind: string; relationship: string } {
  const body = r.kind === "claimMatch" ? r.claimMatch : r.staticKeys;
  return { relationshipKind: r.kind, relationship: JSON.stringify(body) };
}

/** IdentityStore over SQLite; an identity's role bindings go with it (FK cascade). */
export class SqliteIdentityStore implements SyncIdentityStore {
  private readonly insertStmt: Statement;
  private readonly getStmt: Statement;
  private readonly groupExistsStmt: Statement;
  private readonly updateStmt: Statement;
  private readonly touchStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly deleteBindingsStmt: Statement;

  constructor(
    private readonly db: Database,
    private readonly lists: ListRunner,
  ) {
    this.insertStmt = db.prepare(
      `INSERT INTO identities (uid, parent_uid, name, description, email, email_unverified, company,
         relationship_kind, relationship, last_seen_time, create_time, update_time)
       VALUES (@uid, @parentUid, @name, @description, @email, @emailUnverified, @company,
         @relationshipKind, @relationship, @lastSeenTime, @createTime, @updateTime)`,
    );
    this.getStmt = db.prepare(`SELECT ${TABLE.select} FROM identities WHERE uid = ?`);
    this.groupExistsStmt = db.prepare("SELECT 1 FROM groups WHERE uid = ?");
    this.updateStmt = db.prepare(
      `UPDATE identities SET name = @name, description = @description, company = @company,
         relationship_kind = @relationshipKind, relationship = @relationship, update_time = @updateTime
       WHERE uid = @uid`,
    );
    this.touchStmt = db.prepare("UPDATE identities SET last_seen_time = ? WHERE uid = ?");
    this.deleteStmt = db.prepare("DELETE FROM identities WHERE uid = ?");
    this.deleteBindingsStmt = db.prepare("DELETE FROM role_bindings WHERE identity_uid = ?");
  }

  create(identity: IdentityRecord): void {
    if (identity.parentUid !== null && !this.groupExistsStmt.get(identity.parentUid)) {
      throw new NotFoundError("group", identity.parentUid);
    }
    if (this.getStmt.get(identity.uid)) throw new AlreadyExistsError("identity", identity.uid);
    const { relationship, ...fields } = identity;
    this.insertStmt.run({ ...fields, ...relationshipColumns(relationship) });
  }

  get(uid: string): IdentityRecord | null {
    return this.lists.one(this.getStmt, uid, toRecord);
  }

  list(query: ListQuery<IdentityFilter, IdentityOrder>): ListResult<IdentityRecord> {
    const { name, relationshipKind } = query.filter;
    return this.lists.records(TABLE, query, exact({ "t.name": name, "t.relationship_kind": relationshipKind }), toRecord);
  }

  update(uid: string, changes: IdentityChanges, updateTime: number): IdentityRecord {
    return this.db
      .transaction(() => {
        const current = this.get(uid);
        if (!current) throw new NotFoundError("identity", uid);
        const next: IdentityRecord = { ...current, ...changes, updateTime };
        this.updateStmt.run({
          uid,
          name: next.name,
          description: next.description,
          company: next.company,
          ...relationshipColumns(next.relationship),
          updateTime,
        });
        return next;
      })
      .immediate();
  }

  /**
   * Only last_seen_time changes: no list order, filter or count depends on it,
   * and authorization does not either, so neither the list counts nor the
   * authorization version move (sign-ins would otherwise flush every cache).
   */
  touchLastSeen(uid: string, time: number): void {
    this.touchStmt.run(time, uid);
  }

  delete(uid: string): void {
    this.db
      .transaction(() => {
        if (!this.getStmt.get(uid)) throw new NotFoundError("identity", uid);
        this.deleteStmt.run(uid);
        // No foreign key does this since bindings may name a person before sign-up.
        this.deleteBindingsStmt.run(uid);
      })
      .immediate();
  }
}
