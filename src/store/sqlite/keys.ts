import type { Database, Statement } from "better-sqlite3";
import { AlreadyExistsError } from "../../domain/errors.js";
import type { SigningKeyRecord, SyncKeyStore } from "../store.js";

interface SigningKeyRow {
  kid: string;
  private_jwk: string;
  public_jwk: string;
  create_time: number;
}

/** KeyStore over the secrets and signing_keys tables. */
export class SqliteKeyStore implements SyncKeyStore {
  private readonly getStmt: Statement;
  private readonly insertStmt: Statement;
  private readonly signingKeysStmt: Statement;
  private readonly signingKeyExistsStmt: Statement;
  private readonly insertSigningKeyStmt: Statement;

  constructor(private readonly db: Database) {
    this.getStmt = db.prepare("SELECT value FROM secrets WHERE name = ?");
    this.insertStmt = db.prepare("INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)");
    // rowid breaks ties between keys created in the same millisecond: insertion order.
    this.signingKeysStmt = db.prepare("SELECT kid, private_jwk, public_jwk, create_time FROM signing_keys ORDER BY create_time, rowid");
    this.signingKeyExistsStmt = db.prepare("SELECT 1 FROM signing_keys WHERE kid = ?");
    this.insertSigningKeyStmt = db.prepare(
      "INSERT INTO signing_keys (kid, private_jwk, public_jwk, create_time) VALUES (@kid, @privateJwk, @publicJwk, @createTime)",
    );
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
    return (this.signingKeysStmt.all() as SigningKeyRow[]).map((row) => ({
      kid: row.kid,
      privateJwk: row.private_jwk,
      publicJwk: row.public_jwk,
      createTime: row.create_time,
    }));
  }

  /** Throws AlreadyExistsError when the kid is taken: a kid names one key forever. */
  addSigningKey(key: SigningKeyRecord): void {
    if (this.signingKeyExistsStmt.get(key.kid)) throw new AlreadyExistsError("signing key", key.kid);
    this.insertSigningKeyStmt.run(key);
  }
}
