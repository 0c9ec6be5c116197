import { AlreadyExistsError, NotFoundError } from "../../domain/errors.js";
import { newestKeyRetireRefused, SELECT, toRecord, type SigningKeyRow } from "../sql/signing-keys.js";
import type { KeyStore, RetireOutcome, SigningKeyRecord } from "../store.js";
import { one } from "./list.js";
import { sqlState, type Runner } from "./tx.js";

/**
 * Retires $1 at $2 unless it is the newest key, in one statement (atomic on
 * its own and inside a transaction), and tells what it found: whether the
 * key exists, whether it was retired already, and which key is the newest.
 */
const RETIRE = `
  WITH target AS (SELECT kid, retire_time FROM signing_keys WHERE kid = $1),
  newest AS (SELECT kid FROM signing_keys ORDER BY create_time DESC, seq DESC LIMIT 1),
  retired AS (
    UPDATE signing_keys SET retire_time = $2, private_jwk = ''
     WHERE kid = $1 AND retire_time IS NULL AND kid <> (SELECT kid FROM newest)
    RETURNING kid)
  SELECT (SELECT count(*) FROM target)::int AS found,
         (SELECT retire_time FROM target) AS retire_time,
         (SELECT kid FROM newest) AS newest`;

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
    const { rows } = await this.run.q.query<SigningKeyRow>(`SELECT ${SELECT} FROM signing_keys ORDER BY create_time, seq`);
    return rows.map(toRecord);
  }

  /** Throws AlreadyExistsError when the kid is taken: a kid names one key forever. */
  async addSigningKey(key: SigningKeyRecord): Promise<void> {
    try {
      await this.run.q.query(
        "INSERT INTO signing_keys (kid, private_jwk, public_jwk, create_time, retire_time) VALUES ($1, $2, $3, $4, $5)",
        [key.kid, key.privateJwk, key.publicJwk, key.createTime, key.retireTime ?? null],
      );
    } catch (err) {
      if (sqlState(err) === "23505") throw new AlreadyExistsError("signing key", key.kid);
      throw err;
    }
  }

  async retireSigningKey(kid: string, now: number): Promise<RetireOutcome> {
    const { rows } = await this.run.q.query<{ found: number; retire_time: number | null; newest: string | null }>(RETIRE, [kid, now]);
    const { found, retire_time, newest } = rows[0]!;
    if (found === 0) throw new NotFoundError("signing key", kid);
    if (retire_time !== null) return "already-retired";
    if (newest === kid) throw newestKeyRetireRefused(kid);
    return "retired";
  }
}
