import type { Database, Statement } from "better-sqlite3";
import type { KeyStore } from "../store.js";

/** KeyStore over the secrets table. */
export class SqliteKeyStore implements KeyStore {
  private readonly getStmt: Statement;
  private readonly insertStmt: Statement;

  constructor(private readonly db: Database) {
    this.getStmt = db.prepare("SELECT value FROM secrets WHERE name = ?");
    this.insertStmt = db.prepare("INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)");
  }

  secret(name: string, make: () => Buffer): Buffer {
    return this.db.transaction(() => {
      const row = this.getStmt.get(name) as { value: Buffer } | undefined;
      if (row) return row.value;
      this.insertStmt.run(name, make());
      return (this.getStmt.get(name) as { value: Buffer }).value;
    })();
  }
}
