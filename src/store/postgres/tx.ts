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
 * Why the database cannot be used, as an outage's warn line says it: the
 * kind in an operator's words, the driver's own message after it, and the
 * SQLSTATE or system code. `lost` when a connection that was up broke (the
 * database may still take new ones); otherwise a new connection failed.
 */
export interface ConnectionFailure {
  /** "connection refused: connect ECONNREFUSED 127.0.0.1:5432" */
  cause: string;
  /** The SQLSTATE, the system error code or the TLS error code; "" when the driver gave none. */
  code: string;
  lost: boolean;
}

/** The kinds of SQLSTATE that say the database cannot be used now, and whether an established connection broke. */
const FAILING_STATES: readonly [RegExp, string, boolean][] = [
  [/^28/, "authentication failed", false], // invalid_authorization_specification, invalid_password
  [/^3D000$/, "database does not exist", false],
  [/^53300$/, "too many connections", false],
  [/^57P01$/, "the database server ended the connection (administrator command)", true],
  [/^57P02$/, "the database server ended the connection (crash)", true],
  [/^57P03$/, "the database server is starting up or shutting down", false],
  // A standby, or a primary being demoted, or one an operator made read-only: writes must wait for the primary.
  [/^25006$/, "the database is read-only (not the primary)", false],
  [/^08/, "connection failure", false],
];

/** The kinds of system error a socket to the database fails with. */
const FAILING_SYSTEM_CODES: Record<string, [string, boolean]> = {
  ECONNREFUSED: ["connection refused", false],
  ENOTFOUND: ["host not found", false],
  EAI_AGAIN: ["host not found", false],
  EHOSTUNREACH: ["host unreachable", false],
  ENETUNREACH: ["host unreachable", false],
  ETIMEDOUT: ["connection timed out", false],
  ECONNRESET: ["connection reset", true],
  EPIPE: ["connection reset", true],
};

/** The driver's words for a broken or failed connection, which carry no code. */
const FAILING_MESSAGES: readonly [RegExp, string, boolean][] = [
  [/Connection terminated|Client has encountered a connection error|Client was closed and is not queryable/i, "connection lost", true],
  [/connection timeout|timeout exceeded when trying to connect/i, "connection timed out", false],
  [/\bSSL\b|\bTLS\b|certificate/i, "TLS failure", false],
];

/** Node's TLS errors: a certificate refused, a handshake failed. */
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|UNABLE_TO_(GET|VERIFY)_)/;

/**
 * What kind of failure to reach the database err is, or undefined when it
 * says something else (a statement was wrong): connection refused, host not
 * found, authentication failed, database does not exist, too many
 * connections, the server shut down, a TLS failure, a broken connection.
 */
export function connectionFailure(err: unknown): ConnectionFailure | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : "";
  const failure = (kind: string, lost: boolean, withCode = typeof code === "string" ? code : "") => ({
    cause: message === "" ? kind : `${kind}: ${message}`,
    code: withCode,
    lost,
  });
  // First: EPIPE looks like a SQLSTATE (five capitals).
  const system = typeof code === "string" ? FAILING_SYSTEM_CODES[code] : undefined;
  if (system) return failure(system[0], system[1]);
  const state = sqlState(err);
  // A hot standby refuses SERIALIZABLE with feature_not_supported, which otherwise names a statement's mistake.
  if (state === "0A000" && /hot standby/i.test(message)) return failure("the database is a hot standby (not the primary)", false);
  if (state !== undefined) {
    const found = FAILING_STATES.find(([pattern]) => pattern.test(state));
    return found && failure(found[1], found[2]);
  }
  if (typeof code === "string" && TLS_CODE.test(code)) return failure("TLS failure", false);
  // Only the driver's plain errors: an error of ours (named) may say anything.
  const worded = (err as Error | null)?.name === "Error" ? FAILING_MESSAGES.find(([pattern]) => pattern.test(message)) : undefined;
  return worded && failure(worded[1], worded[2]);
}

/**
 * True for errors that say the database cannot be reached or used now (not
 * that the statement was wrong): see connectionFailure.
 */
export function isConnectionError(err: unknown): boolean {
  return connectionFailure(err) !== undefined;
}

/**
 * What a PostgreSQL store publishes on REACHABILITY_CHANNEL, once per
 * outage and once at its end: its database (location, the URL without its
 * password) became unusable and why, or answers again after downMs.
 */
export type ReachabilityReport =
  | { location: string; state: "unreachable"; failure: ConnectionFailure }
  | { location: string; state: "reachable"; downMs: number };

/**
 * The node:diagnostics_channel a PostgreSQL store reports its outages on:
 * the server that serves it logs them (observe/database-log.ts). A channel,
 * because the store is opened, wrapped and handed over before any server or
 * logger exists; publishing costs nothing while nobody listens.
 */
export const REACHABILITY_CHANNEL = "platform-api:database-reachability";

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
