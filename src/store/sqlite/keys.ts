import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { newestKeyRetireRefused, SELECT, toRecord, type SigningKeyRow } from "../sql/signing-keys.js";
import type { RetireOutcome, SigningKeyRecord, SyncKeyStore } from "../store.js";

/** KeyStore over the secrets and signing_keys tables. */
export class SqliteKeyStore implements SyncKeyStore {
  private readonly getStmt: Statement;
  private readonly insertStmt: Statement;
  private readonly signingKeysStmt: Statement;
  private readonly retireTimeStmt: Statement;
  private readonly newestKidStmt: Statement;
  private readonly insertSigningKeyStmt: Statement;
  private readonly retireStmt: Statement;

  constructor(private readonly db: Database) {
    this.getStmt = db.prepare("SELECT value FROM secrets WHERE name = ?");
    this.insertStmt = db.prepare("INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)");
    // rowid breaks ties between keys created in the same millisecond: insertion order.
    this.signingKeysStmt = db.prepare(`SELECT ${SELECT} FROM signing_keys ORDER BY create_time, rowid`);
    this.retireTimeStmt = db.prepare("SELECT retire_time FROM signing_keys WHERE kid = ?");
    this.newestKidStmt = db.prepare("SELECT kid FROM signing_keys ORDER BY create_time DESC, rowid DESC LIMIT 1").pluck();
    this.insertSigningKeyStmt = db.prepare(
      "INSERT INTO signing_keys (kid, private_jwk, public_jwk, create_time, retire_time) VALUES (@kid, @privateJwk, @publicJwk, @createTime, @retireTime)",
    );
    this.retireStmt = db.prepare("UPDATE signing_keys SET retire_time = ?, private_jwk = '' WHERE kid = ?");
  }

  secret(name: string, make: () => Buffer): Buffer {
    return this.db
      .transaction(() => {
        const row = this.getStmt.get(name) as { value: Buffer } | undefined;
        if (row) return row.value;
        this.insertStmt.run(name, make());
        return (this.getStmt.get(name) as { value: Buffer }).value;
      })
      .immediate();
  }

  signingKeys(): SigningKeyRecord[] {
    return (this.signingKeysStmt.all() as SigningKeyRow[]).map(toRecord);
  }

  /** Throws AlreadyExistsError when the kid is taken: a kid names one key forever. */
  addSigningKey(key: SigningKeyRecord): void {
    if (this.retireTimeStmt.get(key.kid)) throw new AlreadyExistsError("signing key", key.kid);
    this.insertSigningKeyStmt.run({ ...key, retireTime: key.retireTime ?? null });
  }

  retireSigningKey(kid: string, now: number): RetireOutcome {
    // Every write runs inside the group commit's transaction: the checks and the update are one step.
    const row = this.retireTimeStmt.get(kid) as { retire_time: number | null } | undefined;
    if (!row) throw new NotFoundError("signing key", kid);
    if (row.retire_time !== null) return "already-retired";
    if (this.newestKidStmt.get() === kid) throw newestKeyRetireRefused(kid);
    this.retireStmt.run(now, kid);
    return "retired";
  }
}
