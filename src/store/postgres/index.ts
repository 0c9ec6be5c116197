import { channel } from "node:diagnostics_channel";
import pg from "pg";
import { UnavailableError } from "../../domain/errors.js";
import { describeSystemError, StartupError, systemErrorCode } from "../../startup-error.js";
import { decorateParts } from "../decorators/decorate.js";
import type { MigrationLog } from "../migration-log.js";
import { GROUP_CHILD_KINDS, makeParts, ownParts, type PartName } from "../parts.js";
import { splitSignal, throwIfCancelled } from "../signal.js";
import type { Store, StoreParts } from "../store.js";
import { VERSIONED_TABLES, zeroVersions, type TableVersions, type VersionedTable } from "../versions.js";
import { PgAccountAssociationStore } from "./account-associations.js";
import { PgAdvisoryStore } from "./advisories.js";
import { eventsCarryingRunner, PgEventStore } from "./events.js";
import { PgGroupInviteStore } from "./group-invites.js";
import { PgGroupStore } from "./groups.js";
import { PgIdentityStore } from "./identities.js";
import { PgIdentityProviderStore } from "./identity-providers.js";
import { PgKeyStore } from "./keys.js";
import { migratePostgres } from "./migrations.js";
import { PgRepoStore } from "./repos.js";
import { PgRoleBindingStore } from "./role-bindings.js";
import { PgRoleStore } from "./roles.js";
import { PgRefreshTokenStore, PgSignInFlowStore } from "./sign-in.js";
import { PgDeliveryStore, PgSubscriptionStore } from "./subscriptions.js";
import { PgTagStore } from "./tags.js";
import {
  connectionFailure,
  poolRunner,
  REACHABILITY_CHANNEL,
  serializable,
  serializableThenRead,
  txRunner,
  type ClientSource,
  type ConnectionFailure,
  type PoolClient,
  type ReachabilityReport,
  type Runner,
} from "./tx.js";
import { redactedUrl } from "./url.js";

/** Each table's version: the sum of its column over the buckets (one read of 64 short rows). */
const READ_VERSIONS = `SELECT ${VERSIONED_TABLES.map((t) => `sum(${t}) AS ${t}`).join(", ")} FROM version_buckets`;
type VersionRow = Record<VersionedTable, string | number | null>;

/** The versions of READ_VERSIONS' one row. */
function versionsOf(rows: readonly VersionRow[]): TableVersions {
  const out = zeroVersions();
  const row = rows[0];
  if (row) for (const t of VERSIONED_TABLES) out[t] = Number(row[t] ?? 0);
  return out;
}

/** Options for opening the PostgreSQL store. */
export interface PostgresStoreOptions {
  /** postgres://user:password@host:port/database (PLATFORM_DATABASE_URL). */
  url: string;
  /** Connections this process keeps at most (default 10); keep processes × this below max_connections. */
  maxConnections?: number;
  /**
   * Only a database a server has already set up (the schema migrated): every command but `serve` refuses a
   * fresh one with StartupError rather than creating the schema and a signing key no server uses.
   */
  existing?: boolean;
  /** Told of each schema migration step applied while opening. */
  migrationLog?: MigrationLog;
}

/**
 * Errors that mean the database cannot be used at all (unreachable, refused login, no such database, not
 * allowed, a standby): the operator's to fix, as one line. SQLSTATE classes 08 (connection), 28 (authorization),
 * 3D (catalog name), 42501 (insufficient privilege), 25006 (read-only: a standby).
 */
function unusable(err: unknown, url: string): StartupError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  const system = systemErrorCode(err);
  const sqlState = typeof code === "string" && (/^(08|28|3D)/.test(code) || code === "42501" || code === "25006");
  const lost = err instanceof Error && /connection (timeout|terminated)|timeout expired/i.test(err.message);
  if (system === undefined && !sqlState && !lost) return undefined;
  const reason = system !== undefined ? describeSystemError(err) : err instanceof Error ? err.message : String(code);
  return new StartupError(`cannot use PostgreSQL at ${redactedUrl(url)}: ${reason}`);
}

/** int8 (bigint) columns hold milliseconds and counters, well inside a double's exact range. */
const types = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === pg.types.builtins.INT8
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/** How often an unreachable database is probed, to report ready again as soon as it answers. */
const PROBE_INTERVAL_MS = 1_000;

/**
 * Whether the database answers: a connection failure marks it down (the
 * store reports not ready, calls get UNAVAILABLE) and starts a probe that
 * marks it up again. Each outage is reported once on REACHABILITY_CHANNEL,
 * as soon as its cause is known: at once when a new connection failed
 * (refused, authentication failed, no such database, too many connections,
 * TLS); when an open connection broke, by the probe's first attempt, which
 * tells a database gone from a blip. Its end is reported once too.
 */
class Reachability {
  up = true;
  /** Outages so far: a query begun before the current one started proves nothing by succeeding. */
  private outages = 0;
  /** Connections that broke (while idle in the pool too, where no query saw it and no outage began). */
  private breaks = 0;
  private downSince = 0;
  /** The current outage's cause has been reported. */
  private reported = false;
  /** The broken connection that began the current outage, until a failed connection names a better cause. */
  private lost: ConnectionFailure | undefined;
  private probe: NodeJS.Timeout | undefined;
  private readonly reports = channel(REACHABILITY_CHANNEL);

  constructor(
    private readonly pool: pg.Pool,
    private readonly location: string,
  ) {}

  /** What a query begun now passes to ok() when it succeeds. */
  get epoch(): number {
    return this.outages;
  }

  /** Connections lost or refused so far: outages, and connections the database or a proxy closed. */
  get losses(): number {
    return this.outages + this.breaks;
  }

  /** A connection of the pool broke, idle or lent out (a failover, a proxy's shutdown-sessions, a restart). */
  connectionBroke(): void {
    this.breaks++;
  }

  /** Passes a result through; a query begun during the outage that succeeded ends it. */
  ok<T>(value: T, epoch: number): T {
    if (!this.up && epoch === this.outages) this.recovered();
    return value;
  }

  /** Turns a connection failure into UnavailableError (and starts probing); other errors pass unchanged. */
  fail(err: unknown): never {
    const failure = connectionFailure(err);
    if (failure === undefined) throw err;
    this.down(failure);
    throw new UnavailableError();
  }

  private down(failure: ConnectionFailure): void {
    if (this.up) {
      this.up = false;
      this.outages++;
      this.downSince = Date.now();
      this.reported = false;
      this.lost = undefined;
      this.startProbe();
    }
    if (this.reported) return;
    if (failure.lost) this.lost ??= failure;
    else this.report(failure);
  }

  private startProbe(): void {
    const attempt = () => {
      const epoch = this.epoch;
      this.pool.query("SELECT 1").then(
        () => this.ok(undefined, epoch),
        (err: unknown) => {
          if (this.up || this.reported || epoch !== this.outages) return;
          this.report(connectionFailure(err) ?? { cause: String(err), code: "", lost: false });
        },
      );
    };
    this.probe = setInterval(attempt, PROBE_INTERVAL_MS);
    this.probe.unref();
    // At once: what a new connection meets now is the outage's cause.
    attempt();
  }

  private recovered(): void {
    // A blip (a broken connection, and the next one worked) is an outage too: calls were refused.
    if (!this.reported) this.report(this.lost!);
    this.up = true;
    this.stop();
    this.publish({ location: this.location, state: "reachable", downMs: Date.now() - this.downSince });
  }

  private report(failure: ConnectionFailure): void {
    this.reported = true;
    this.publish({ location: this.location, state: "unreachable", failure });
  }

  private publish(report: ReachabilityReport): void {
    if (this.reports.hasSubscribers) this.reports.publish(report);
  }

  stop(): void {
    clearInterval(this.probe);
    this.probe = undefined;
  }
}

/** The pool as the parts see it: every failure to reach the database becomes UnavailableError (HTTP 503). */
function guardedSource(pool: pg.Pool, reach: Reachability): ClientSource {
  const guard = <R>(q: { query(text: string, params?: unknown[]): Promise<R> }) => ({
    query: (text: string, params?: unknown[]) => {
      const epoch = reach.epoch;
      return q.query(text, params).then(
        (r) => reach.ok(r, epoch),
        (err: unknown) => reach.fail(err),
      );
    },
  });
  return {
    ...(guard(pool) as ClientSource),
    async connect(): Promise<PoolClient> {
      const epoch = reach.epoch;
      const client = await pool.connect().then(
        (c) => reach.ok(c, epoch),
        (err: unknown) => reach.fail(err),
      );
      return { ...(guard(client) as PoolClient), release: (destroy) => client.release(destroy) };
    },
  };
}

/**
 * The parts over the pool: a call whose signal aborted is refused before it
 * runs a statement. (Inside a transaction the transaction holds the signal.)
 */
function cancellableParts(run: Runner): StoreParts {
  return decorateParts(partsOver(run), (_part, _method, original) => async (...call) => {
    const { signal, args } = splitSignal(call);
    throwIfCancelled(signal);
    return original(...args);
  });
}

/** The parts over one runner (the pool, or an open transaction's client), each made when first used. */
function partsOver(run: Runner): StoreParts {
  return makeParts((name) => PART_MAKERS[name](run));
}

/** How each part is made over a runner (a record the compiler holds complete). */
const PART_MAKERS: { readonly [P in PartName]: (run: Runner) => StoreParts[P] } = {
  groups: (run) => new PgGroupStore(run, GROUP_CHILD_KINDS),
  identities: (run) => new PgIdentityStore(run),
  roles: (run) => new PgRoleStore(run),
  roleBindings: (run) => new PgRoleBindingStore(run),
  identityProviders: (run) => new PgIdentityProviderStore(run),
  accountAssociations: (run) => new PgAccountAssociationStore(run),
  groupInvites: (run) => new PgGroupInviteStore(run),
  repos: (run) => new PgRepoStore(run),
  tags: (run) => new PgTagStore(run),
  advisories: (run) => new PgAdvisoryStore(run),
  keys: (run) => new PgKeyStore(run),
  events: (run) => new PgEventStore(run),
  subscriptions: (run) => new PgSubscriptionStore(run),
  deliveries: (run) => new PgDeliveryStore(run),
  signInFlows: (run) => new PgSignInFlowStore(run),
  refreshTokens: (run) => new PgRefreshTokenStore(run),
};

/**
 * The error a connection to a standby fails with: SQLSTATE 25006
 * (read_only_sql_transaction), which connectionFailure takes for the
 * database being unusable now, not for a mistake.
 */
function standbyError(): Error {
  return Object.assign(new Error("connected to a standby (pg_is_in_recovery), not the primary"), { code: "25006" });
}

/** True when a server has migrated this database (it has our schema_migrations table). */
async function hasSchema(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ found: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS found");
  return rows[0]?.found === true;
}

/**
 * Opens the PostgreSQL store: a pool, the schema migrated (under an advisory
 * lock, so several processes may start at once). Every write transaction is
 * SERIALIZABLE and retried on serialization failures; invariants are also
 * held by the schema (foreign keys, unique constraints), so no interleaving
 * of processes can orphan a row or redeem an invite twice.
 */
export async function openPostgresStore(opts: PostgresStoreOptions): Promise<Store> {
  const max = opts.maxConnections ?? 10;
  const pool = new pg.Pool({
    connectionString: opts.url,
    max,
    application_name: "platform-api",
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    types,
    // A new connection must reach the primary: through a proxy that follows a failover (HAProxy on Patroni's
    // /primary), a connection made before the proxy noticed may land on the demoted node, now a standby whose
    // reads may lag writes acknowledged on the new primary. Refused, it is one more UNAVAILABLE to retry.
    onConnect: async (client) => {
      // A connection that breaks emits 'error' on its client, also while lent out (when the pool has taken its own
      // listener off): without a listener of ours that would end the process. A query running on it fails too, and
      // that failure is what the caller sees (UNAVAILABLE); the break is counted, so caches start over.
      client.on("error", () => reach.connectionBroke());
      const { rows } = await client.query<{ standby: boolean }>("SELECT pg_is_in_recovery() AS standby");
      if (rows[0]?.standby === true) throw standbyError();
    },
  });
  const reach = new Reachability(pool, redactedUrl(opts.url));
  // The pool passes on an idle client's 'error' (counted by the client's own listener above): it must not end the process.
  pool.on("error", () => {});
  try {
    if (opts.existing && !(await hasSchema(pool))) {
      throw new StartupError(
        `no platform-api schema in the PostgreSQL database at ${redactedUrl(opts.url)}; start the server first, or set PLATFORM_DATABASE_URL to the server's database`,
      );
    }
    await migratePostgres(pool, undefined, opts.migrationLog);
  } catch (err) {
    reach.stop();
    await pool.end();
    throw unusable(err, opts.url) ?? err;
  }
  const source = guardedSource(pool, reach);
  const parts = cancellableParts(poolRunner(source));
  let open = true;
  let calls = 0;
  return {
    ...ownParts(parts),
    // One indexed read of 16 rows a table: a write committed by any process is
    // seen by the next request of every process.
    async readVersions() {
      const { rows } = await source.query<VersionRow>(READ_VERSIONS);
      return versionsOf(rows);
    },
    version: () => ++calls,
    refresh: async () => {},
    transaction: (fn, signal) => serializable(source, (client) => fn(partsOver(txRunner(client))), signal),
    // The versions ride with the COMMIT: a write costs no extra round trip to learn what it moved.
    async transactionThenVersions<T>(fn: (tx: StoreParts) => Promise<T>, signal?: AbortSignal): Promise<[T, TableVersions]> {
      const [result, rows] = await serializableThenRead<T, VersionRow>(
        source,
        (client) => fn(partsOver(txRunner(client))),
        READ_VERSIONS,
        signal,
      );
      return [result, versionsOf(rows)];
    },
    // The events ride in the INSERT's own statement: one round trip in autocommit.
    insertWithEvents: (write, events, signal) => {
      throwIfCancelled(signal);
      return write(partsOver(eventsCarryingRunner(source, events)));
    },
    // totalCount counts connections being opened too: they are lent out as soon as they are up.
    connectionLosses: () => reach.losses,
    poolStats: () => ({ inUse: pool.totalCount - pool.idleCount, idle: pool.idleCount, waiting: pool.waitingCount, max }),
    ready: () => open && reach.up,
    describe: () => ({ backend: "postgresql", location: redactedUrl(opts.url) }),
    async close() {
      if (!open) return;
      open = false;
      reach.stop();
      await pool.end();
    },
  };
}
