import { AlreadyExistsError } from "../../domain/errors.js";
import type { KeyStore, SigningKeyRecord } from "../store.js";
import { one } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

interface SigningKeyRow {
  kid: string;
  private_jwk: string;
  public_jwk: string;
  create_time: number;
}

/** KeyStore over the secrets and signing_keys tables: every process of a deployment shares them. */
export class PgKeyStore implements KeyStore {
  constructor(private readonly run: Runner) {}

  async secret(name: string, make: () => Buffer): Promise<Buffer> {
    const stored = await one<{ value: Buffer }>(this.run.q, "SELECT value FROM secrets WHERE name = ?", [name]);
    if (stored) return stored.value;
    // Concurrent first uses (several processes starting at once) agree on the first value stored.
    await this.run.q.query("INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", [name, make()]);
    const row = await one<{ value: Buffer }>(this.run.q, "SELECT value FROM secrets WHERE name = ?", [name]);
    return row!.value;
  }

  async signingKeys(): Promise<SigningKeyRecord[]> {
    const { rows } = await this.run.q.query<SigningKeyRow>(
      "SELECT kid, private_jwk, public_jwk, create_time FROM signing_keys ORDER BY create_time, seq",
    );
    return rows.map((row) => ({ kid: row.kid, privateJwk: row.private_jwk, publicJwk: row.public_jwk, createTime: row.create_time }));
  }

  /** Throws AlreadyExistsError when the kid is taken: a kid names one key forever. */
  async addSigningKey(key: SigningKeyRecord): Promise<void> {
    try {
      await this.run.q.query("INSERT INTO signing_keys (kid, private_jwk, public_jwk, create_time) VALUES ($1, $2, $3, $4)", [
        key.kid,
        key.privateJwk,
        key.publicJwk,
        key.createTime,
      ]);
    } catch (err) {
      if (sqlState(err) === "23505") throw new AlreadyExistsError("signing key", key.kid);
      throw err;
    }
  }
}
