import { AbortedError } from "../../domain/errors.js";
import { throwIfCancelled } from "../signal.js";
import type { Queryable } from "./list.js";

/** SQLSTATEs after which a whole transaction may simply run again. */
const RETRYABLE = new Set([
  "40001", // serialization_failure
  "40P01", // deadlock_detected
]);
/** Attempts of one transaction before its serialization failure reaches the caller. */
export const MAX_ATTEMPTS = 20;

/** A pooled connection, as the pool hands it out. */
export interface PoolClient extends Queryable {
  release(destroy?: boolean | Error): void;
}

/** Where connections come from. */
export interface ClientSource extends Queryable {
  connect(): Promise<PoolClient>;
}

/**
 * True for errors that say the database cannot be reached or the connection
 * broke (not that the statement was wrong): connection exceptions (class 08),
 * an administrator or crash shutdown (57P01-57P03), too many connections,
 * and the driver's own socket errors.
 */
export function isConnectionError(err: unknown): boolean {
  const state = sqlState(err);
  if (state !== undefined) return state.startsWith("08") || ["57P01", "57P02", "57P03", "53300"].includes(state);
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : "";
  return (
    (typeof code === "string" &&
      ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH"].includes(code)) ||
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(
      message,
    )
  );
}

/** The SQLSTATE of a driver error, if it has one. */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * How a part runs statements: `q` for single statements, `atomically` for a
 * sequence that must see one snapshot and commit together. Bound to the pool,
 * atomically opens a SERIALIZABLE transaction (retried on serialization
 * failures); bound to an open transaction's client, it runs in that
 * transaction.
 */
export interface Runner {
  readonly q: Queryable;
  atomically<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
}

/**
 * Runs fn in a SERIALIZABLE transaction on one client of the pool, running
 * it again (up to MAX_ATTEMPTS) when PostgreSQL reports a serialization
 * failure or deadlock: fn must have no effects outside the transaction.
 * After the last attempt, AbortedError (ABORTED, HTTP 409: retry the call).
 */
export async function serializable<T>(pool: ClientSource, fn: (client: Queryable) => Promise<T>, signal?: AbortSignal): Promise<T> {
  return (await serializableThenRead(pool, fn, undefined, signal))[0];
}

/**
 * serializable(), and then, when `read` is given (a statement without
 * parameters), its rows as read right after the COMMIT, in a fresh snapshot:
 * sent with the COMMIT as one simple query, so the read costs no round trip
 * of its own. (Were the COMMIT refused, the read does not run.)
 */
export async function serializableThenRead<T, R = unknown>(
  pool: ClientSource,
  fn: (client: Queryable) => Promise<T>,
  read: string | undefined,
  signal?: AbortSignal,
): Promise<[T, R[]]> {
  for (let attempt = 1; ; attempt++) {
    throwIfCancelled(signal);
    const client = await pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN ISOLATION LEVEL SERIALIZABLE");
      const result = await fn(client);
      if (read === undefined) {
        await client.query("COMMIT");
        return [result, []];
      }
      // A simple query of several statements answers one result per statement.
      const answers = (await client.query(`COMMIT; ${read}`)) as unknown as { rows: R[] }[];
      return [result, answers[1]?.rows ?? []];
    } catch (err) {
      if (isConnectionError(err)) broken = err as Error;
      else {
        try {
          await client.query("ROLLBACK");
        } catch (rollbackErr) {
          broken = rollbackErr as Error;
        }
      }
      const state = sqlState(err);
      if (state === undefined || !RETRYABLE.has(state)) throw err;
      if (attempt >= MAX_ATTEMPTS) throw new AbortedError();
      // A short random pause lets the winner of the conflict commit first.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(100, 2 ** attempt)));
    } finally {
      client.release(broken);
    }
  }
}

/** The runner of statements outside any transaction. */
export function poolRunner(pool: ClientSource): Runner {
  return { q: pool, atomically: (fn) => serializable(pool, fn) };
}

/** The runner of statements inside an open transaction. */
export function txRunner(client: Queryable): Runner {
  return { q: client, atomically: (fn) => fn(client) };
}
