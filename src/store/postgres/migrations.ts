import type pg from "pg";
import { StartupError } from "../../startup-error.js";
import { newerSchemaError, type MigrationLog, type MigrationStep } from "../migration-log.js";
import { FIRST_VERSIONED_TABLES } from "../versions.js";

/** One step of the schema: what it changes, in a few words (for the log), and its SQL. */
interface Migration {
  name: string;
  sql: string;
}

/** The key of the advisory lock migrations run under: one process migrates, the others wait and find nothing to do. */
const MIGRATION_LOCK = 0x706c6174; // "plat"

/** Buckets of the version counters: connections beyond this many share one (correct, but their writes may conflict). */
export const VERSION_BUCKETS = 64;

/** The advisory-lock space (first key) of the version buckets. */
const BUCKET_LOCKS = 0x7665; // "ve"

/** The versioned tables when migration 10 moved the buckets into the transaction (each gets its new trigger function). */
const TRANSACTION_BUCKET_TABLES = [...FIRST_VERSIONED_TABLES, "subscriptions"] as const;

/**
 * The PostgreSQL schema, the same tables and columns as SQLite's after all
 * its migrations. Every uid, name and other ordered key is `text COLLATE "C"`,
 * so keyset order is byte order on both engines and a descendants range
 * (uid > p || '/' AND uid < p || '0') is an index range scan. Times are
 * bigint milliseconds; JSON columns hold the same text as SQLite's.
 * Entry i moves the schema from version i to i+1; never edit a released one's SQL.
 */
const MIGRATIONS: readonly Migration[] = [
  {
    name: "groups, IAM, registry and advisories tables, table versions",
    sql: `
  CREATE TABLE groups (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" REFERENCES groups(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    verified boolean NOT NULL DEFAULT false,
    resource_limits text NOT NULL DEFAULT '{}',
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX groups_parent ON groups(parent_uid, uid);
  CREATE INDEX groups_name ON groups(name, uid);
  CREATE INDEX groups_create_time ON groups(create_time, uid);
  CREATE INDEX groups_update_time ON groups(update_time, uid);

  CREATE TABLE secrets (
    name text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
  );

  CREATE TABLE identities (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" REFERENCES groups(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    email text NOT NULL DEFAULT '',
    email_unverified text NOT NULL DEFAULT '',
    company text NOT NULL DEFAULT '',
    relationship_kind text COLLATE "C" NOT NULL CHECK (relationship_kind IN ('claimMatch', 'staticKeys')),
    relationship text NOT NULL,
    last_seen_time bigint NOT NULL DEFAULT 0,
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX identities_parent ON identities(parent_uid, uid);
  CREATE INDEX identities_name ON identities(name, uid);
  CREATE INDEX identities_create_time ON identities(create_time, uid);
  CREATE INDEX identities_update_time ON identities(update_time, uid);

  CREATE TABLE roles (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" REFERENCES groups(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    capabilities text NOT NULL DEFAULT '[]',
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX roles_parent ON roles(parent_uid, uid);
  CREATE INDEX roles_name ON roles(name, uid);
  CREATE INDEX roles_create_time ON roles(create_time, uid);
  CREATE INDEX roles_update_time ON roles(update_time, uid);

  -- identity_uid has no foreign key: a binding may name a person before their first sign-in.
  CREATE TABLE role_bindings (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    identity_uid text COLLATE "C" NOT NULL,
    role_uid text COLLATE "C" NOT NULL REFERENCES roles(uid) ON DELETE RESTRICT,
    create_time bigint NOT NULL
  );
  CREATE INDEX role_bindings_parent ON role_bindings(parent_uid, uid);
  CREATE INDEX role_bindings_identity ON role_bindings(identity_uid);
  CREATE INDEX role_bindings_role ON role_bindings(role_uid);
  CREATE INDEX role_bindings_create_time ON role_bindings(create_time, uid);

  -- seq keeps insertion order among keys created in the same millisecond (SQLite's rowid).
  CREATE TABLE signing_keys (
    kid text COLLATE "C" PRIMARY KEY,
    private_jwk text NOT NULL,
    public_jwk text NOT NULL,
    create_time bigint NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY
  );

  CREATE TABLE identity_providers (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    default_role text COLLATE "C" NOT NULL REFERENCES roles(uid) ON DELETE RESTRICT,
    oidc text NOT NULL,
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX identity_providers_parent ON identity_providers(parent_uid, uid);
  CREATE INDEX identity_providers_name ON identity_providers(name, uid);
  CREATE INDEX identity_providers_create_time ON identity_providers(create_time, uid);
  CREATE INDEX identity_providers_update_time ON identity_providers(update_time, uid);
  CREATE INDEX identity_providers_default_role ON identity_providers(default_role);

  CREATE TABLE account_associations (
    uid text COLLATE "C" PRIMARY KEY REFERENCES groups(uid) ON DELETE RESTRICT,
    parent_uid text COLLATE "C",
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    providers text NOT NULL DEFAULT '{}',
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX account_associations_parent ON account_associations(parent_uid, uid);
  CREATE INDEX account_associations_name ON account_associations(name, uid);
  CREATE INDEX account_associations_create_time ON account_associations(create_time, uid);
  CREATE INDEX account_associations_update_time ON account_associations(update_time, uid);

  CREATE TABLE group_invites (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    role_uid text COLLATE "C" NOT NULL REFERENCES roles(uid) ON DELETE CASCADE,
    email text NOT NULL DEFAULT '',
    expiration_time bigint NOT NULL,
    single_use boolean NOT NULL DEFAULT false,
    key_id text COLLATE "C" NOT NULL UNIQUE,
    code_hash text NOT NULL,
    create_time bigint NOT NULL
  );
  CREATE INDEX group_invites_parent ON group_invites(parent_uid, uid);
  CREATE INDEX group_invites_role ON group_invites(role_uid);
  CREATE INDEX group_invites_create_time ON group_invites(create_time, uid);
  CREATE INDEX group_invites_expiration_time ON group_invites(expiration_time, uid);

  CREATE TABLE repos (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    description text NOT NULL DEFAULT '',
    catalog_tier integer NOT NULL DEFAULT 0,
    bundles text NOT NULL DEFAULT '[]',
    aliases text NOT NULL DEFAULT '[]',
    active_tags text NOT NULL DEFAULT '[]',
    create_time bigint NOT NULL,
    update_time bigint NOT NULL,
    UNIQUE (parent_uid, name)
  );
  CREATE INDEX repos_parent ON repos(parent_uid, uid);
  CREATE INDEX repos_name ON repos(name, uid);
  CREATE INDEX repos_create_time ON repos(create_time, uid);
  CREATE INDEX repos_update_time ON repos(update_time, uid);

  CREATE TABLE tags (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES repos(uid) ON DELETE RESTRICT,
    name text COLLATE "C" NOT NULL,
    digest text COLLATE "C" NOT NULL,
    deprecated boolean NOT NULL DEFAULT false,
    bundles text NOT NULL DEFAULT '[]',
    update_time bigint NOT NULL,
    is_referrer boolean NOT NULL,
    is_dated boolean NOT NULL,
    is_epoch boolean NOT NULL,
    UNIQUE (parent_uid, name)
  );
  CREATE INDEX tags_parent ON tags(parent_uid, uid);
  CREATE INDEX tags_name ON tags(name, uid);
  CREATE INDEX tags_update_time ON tags(update_time, uid);
  CREATE INDEX tags_digest ON tags(digest);

  CREATE TABLE advisories (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    advisory_id text COLLATE "C" NOT NULL,
    legacy_advisory_id text NOT NULL DEFAULT '',
    author text NOT NULL DEFAULT '',
    artifact_name text NOT NULL DEFAULT '',
    artifact_type text NOT NULL DEFAULT '',
    artifact_architecture text NOT NULL DEFAULT '',
    component_name text NOT NULL DEFAULT '',
    component_location text NOT NULL DEFAULT '',
    component_type text NOT NULL DEFAULT '',
    origin text NOT NULL DEFAULT '',
    aliases text NOT NULL DEFAULT '[]',
    severities text NOT NULL DEFAULT '[]',
    events text NOT NULL DEFAULT '[]',
    create_time bigint NOT NULL,
    update_time bigint NOT NULL,
    delete_time bigint
  );
  CREATE INDEX advisories_parent ON advisories(parent_uid, uid);
  CREATE INDEX advisories_advisory_id ON advisories(advisory_id, uid);
  CREATE INDEX advisories_create_time ON advisories(create_time, uid);
  CREATE INDEX advisories_update_time ON advisories(update_time, uid);
  CREATE INDEX advisories_artifact_name ON advisories(artifact_name);
  CREATE INDEX advisories_component_name ON advisories(component_name);
  CREATE INDEX advisories_origin ON advisories(origin);

  -- Table versions caches are checked against: a statement trigger moves a
  -- table's count in the writing transaction (cascades too). Each connection
  -- writes its own bucket (backend pid mod 16), so concurrent SERIALIZABLE
  -- writers rarely touch the same row; a table's version is its buckets' sum.
  CREATE TABLE table_versions (
    name text COLLATE "C" NOT NULL,
    bucket integer NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (name, bucket)
  );
  -- Once per table per transaction: a bulk write (an import, a copy) must not
  -- update one row thousands of times in one transaction (each update of a row
  -- already updated in the same transaction walks a longer version chain).
  -- The transaction-local setting is undone with the transaction or savepoint.
  CREATE FUNCTION bump_table_version() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF current_setting('platform_versions.' || TG_TABLE_NAME, true) IS DISTINCT FROM 'bumped' THEN
      UPDATE table_versions SET version = version + 1 WHERE name = TG_TABLE_NAME AND bucket = pg_backend_pid() % 16;
      PERFORM set_config('platform_versions.' || TG_TABLE_NAME, 'bumped', true);
    END IF;
    RETURN NULL;
  END $$;
  ${versionTriggers(FIRST_VERSIONED_TABLES)}
  `,
  },
  // 2: one row per bucket with a column per table, each bucket held by one
  // connection at a time (an advisory lock claimed when it connects), so two
  // SERIALIZABLE writers never update the same version row and never fail
  // each other; a version is a column's sum over 64 rows, one cheap read.
  {
    name: "version buckets per connection",
    sql: `
  ${FIRST_VERSIONED_TABLES.map((t) => `DROP TRIGGER ${t}_version ON ${t};`).join("\n  ")}
  DROP FUNCTION bump_table_version();
  CREATE TABLE version_buckets (
    bucket integer PRIMARY KEY,
    ${FIRST_VERSIONED_TABLES.map((t) => `${t} bigint NOT NULL DEFAULT 0`).join(",\n    ")}
  );
  INSERT INTO version_buckets (bucket) SELECT b FROM generate_series(0, ${VERSION_BUCKETS - 1}) AS b;
  -- Versions never move backwards: bucket 0 starts at each table's old version.
  UPDATE version_buckets SET ${FIRST_VERSIONED_TABLES.map((t) => `${t} = (SELECT coalesce(sum(version), 0) FROM table_versions WHERE name = '${t}')`).join(", ")}
   WHERE bucket = 0;
  DROP TABLE table_versions;
  -- The bucket this connection claimed, or (none free) one its pid picks.
  CREATE FUNCTION version_bucket() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('platform_versions.bucket', true), '')::integer, pg_backend_pid() % ${VERSION_BUCKETS})
  $$;
  ${FIRST_VERSIONED_TABLES.map(sessionBucketTrigger).join("\n  ")}
  `,
  },
  // 3: a signing key's retirement (ms; NULL while it may verify): the
  // signing_keys trigger moves its version, so every process notices.
  {
    name: "signing key retirement",
    sql: `
  ALTER TABLE signing_keys ADD COLUMN retire_time bigint;
  `,
  },
  // 4: who created each root organization (NULL for folders and the
  // administrator's), counted for PLATFORM_MAX_ORGS_PER_IDENTITY.
  {
    name: "organization creators",
    sql: `
  ALTER TABLE groups ADD COLUMN creator_uid text COLLATE "C";
  CREATE INDEX groups_creator ON groups(creator_uid) WHERE creator_uid IS NOT NULL;
  `,
  },
  // 5: the event outbox and change feed (docs/events.md). The feed is read in
  // (txid, seq) order and only below the oldest transaction still running, so
  // an event committed late with a smaller seq is never skipped. root is the
  // subject's root uid: a tenant's reads scan its own roots' events only.
  // event_feed remembers the newest position pruned.
  {
    name: "event outbox and change feed",
    sql: `
  CREATE TABLE events (
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq bigserial NOT NULL,
    id text NOT NULL,
    kind text NOT NULL,
    type text NOT NULL,
    subject text COLLATE "C" NOT NULL,
    root text COLLATE "C" NOT NULL,
    group_uid text COLLATE "C" NOT NULL,
    time bigint NOT NULL,
    data text NOT NULL,
    PRIMARY KEY (txid, seq)
  );
  CREATE INDEX events_root ON events (root, txid, seq);
  CREATE INDEX events_time ON events (time);
  CREATE TABLE event_feed (
    id integer PRIMARY KEY CHECK (id = 1),
    pruned_txid xid8 NOT NULL,
    pruned_seq bigint NOT NULL
  );
  INSERT INTO event_feed (id, pruned_txid, pruned_seq) VALUES (1, '0', 0);
  `,
  },
  // 6: event subscriptions (src/delivery/), as SQLite's 11th migration: the
  // subscription RESTRICTs its group's deletion; its delivery state (cursor,
  // retry, lease) and log go with it; events_id finds an event by its id.
  {
    name: "event subscriptions and deliveries",
    sql: `
  CREATE TABLE subscriptions (
    uid text COLLATE "C" PRIMARY KEY,
    parent_uid text COLLATE "C" NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    sink text NOT NULL,
    types text NOT NULL DEFAULT '[]',
    state text NOT NULL DEFAULT 'active',
    last_error text NOT NULL DEFAULT '',
    secret text NOT NULL,
    creator_uid text COLLATE "C" NOT NULL,
    creator_admin boolean NOT NULL DEFAULT false,
    create_time bigint NOT NULL,
    update_time bigint NOT NULL
  );
  CREATE INDEX subscriptions_parent ON subscriptions(parent_uid, uid);
  CREATE INDEX subscriptions_create_time ON subscriptions(create_time, uid);
  CREATE INDEX subscriptions_update_time ON subscriptions(update_time, uid);
  ALTER TABLE version_buckets ADD COLUMN subscriptions bigint NOT NULL DEFAULT 0;
  ${sessionBucketTrigger("subscriptions")}
  CREATE TABLE subscription_deliveries (
    subscription_uid text COLLATE "C" PRIMARY KEY REFERENCES subscriptions(uid) ON DELETE CASCADE,
    start_time bigint NOT NULL,
    cursor text,
    retry_event_id text,
    retry_attempts integer NOT NULL DEFAULT 0,
    retry_first_at bigint,
    next_attempt_at bigint NOT NULL DEFAULT 0,
    lease_owner text,
    lease_until bigint NOT NULL DEFAULT 0,
    log_seq bigint NOT NULL DEFAULT 0
  );
  CREATE TABLE delivery_attempts (
    subscription_uid text COLLATE "C" NOT NULL REFERENCES subscriptions(uid) ON DELETE CASCADE,
    seq bigint NOT NULL,
    time bigint NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    status integer NOT NULL,
    latency_ms integer NOT NULL,
    outcome text NOT NULL,
    error text NOT NULL,
    attempt integer NOT NULL,
    PRIMARY KEY (subscription_uid, seq)
  );
  CREATE INDEX events_id ON events (id);
  `,
  },
  // 7: tag source times and deleted digests, as SQLite's 12th migration: the
  // time (microseconds) of the registry event that last set a tag (NULL when
  // an API call set it), and when a manifest was deleted from a repo.
  {
    name: "tag source times and deleted digests",
    sql: `
  ALTER TABLE tags ADD COLUMN source_time_us bigint;
  CREATE TABLE registry_deleted_digests (
    repo_uid text COLLATE "C" NOT NULL REFERENCES repos(uid) ON DELETE CASCADE,
    digest text COLLATE "C" NOT NULL,
    time_us bigint NOT NULL,
    PRIMARY KEY (repo_uid, digest)
  );
  CREATE INDEX registry_deleted_digests_time ON registry_deleted_digests (time_us, repo_uid, digest);
  `,
  },
  // 8: a write of the deleted digests moves the tags' version, as every write
  // of the tags part does on SQLite: the digests are read through the tags
  // part, whose cached reads are keyed by the tags' version (a copy restores
  // deleted digests alone, writing no tag).
  {
    name: "deleted digests move the tags' version",
    sql: `
  CREATE TRIGGER registry_deleted_digests_version AFTER INSERT OR UPDATE OR DELETE ON registry_deleted_digests
    FOR EACH STATEMENT EXECUTE FUNCTION bump_tags_version();
  `,
  },
  // 9: people's sign-in, as SQLite's 14th: pending sign-in flows and refresh tokens (hashes only), unversioned;
  // a token goes with its identity (ON DELETE CASCADE).
  {
    name: "sign-in flows and refresh tokens",
    sql: `
  CREATE TABLE sign_in_flows (
    id text COLLATE "C" PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('authorize', 'device', 'web')),
    client_id text NOT NULL,
    redirect_uri text NOT NULL,
    client_state text NOT NULL,
    code_challenge text NOT NULL,
    device_code_hash text COLLATE "C" NOT NULL,
    user_code_hash text COLLATE "C" NOT NULL,
    poll_interval bigint NOT NULL,
    last_poll_time bigint NOT NULL,
    scope_idp text NOT NULL,
    scope_org text NOT NULL,
    scope_provider text NOT NULL,
    client_address text COLLATE "C" NOT NULL,
    upstream_provider text NOT NULL,
    upstream_state_hash text COLLATE "C" NOT NULL,
    upstream_nonce text NOT NULL,
    upstream_verifier text NOT NULL,
    browser_binding_hash text NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'signed-in', 'approved', 'denied', 'consumed')),
    identity_uid text COLLATE "C" NOT NULL,
    code_hash text COLLATE "C" NOT NULL,
    create_time bigint NOT NULL,
    expire_time bigint NOT NULL
  );
  CREATE UNIQUE INDEX sign_in_flows_upstream_state ON sign_in_flows(upstream_state_hash) WHERE upstream_state_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_device_code ON sign_in_flows(device_code_hash) WHERE device_code_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_user_code ON sign_in_flows(user_code_hash) WHERE user_code_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_code ON sign_in_flows(code_hash) WHERE code_hash <> '';
  CREATE INDEX sign_in_flows_address ON sign_in_flows(client_address, expire_time);
  CREATE INDEX sign_in_flows_expire_time ON sign_in_flows(expire_time);

  CREATE TABLE refresh_tokens (
    hash text COLLATE "C" PRIMARY KEY,
    family_id text COLLATE "C" NOT NULL,
    identity_uid text COLLATE "C" NOT NULL REFERENCES identities(uid) ON DELETE CASCADE,
    client_id text NOT NULL,
    key_id text COLLATE "C" NOT NULL,
    family_start_time bigint NOT NULL,
    issue_time bigint NOT NULL,
    used_time bigint NOT NULL DEFAULT 0
  );
  CREATE INDEX refresh_tokens_family ON refresh_tokens(family_id, used_time);
  CREATE INDEX refresh_tokens_identity ON refresh_tokens(identity_uid, family_start_time);
  CREATE INDEX refresh_tokens_key ON refresh_tokens(key_id);
  CREATE INDEX refresh_tokens_issue_time ON refresh_tokens(issue_time);
  CREATE INDEX refresh_tokens_family_start_time ON refresh_tokens(family_start_time);
  `,
  },
  // 10: a version bucket per transaction instead of per connection: a
  // transaction that writes a versioned table claims a free bucket with a
  // transaction-level advisory lock, and the lock goes with the COMMIT.
  // Nothing the server's correctness needs stays on the connection, so it
  // works behind a transaction-pooling PgBouncer (where a session lock and a
  // session setting stay on a server connection other clients share) and
  // needs nothing re-established after a failover. The backend remembers the
  // bucket it took last (a session setting that is only a hint: through a
  // pooler it stays with the backend, which is what the bucket's row is
  // about) and tries it first, so backends settle on buckets of their own:
  // a bucket taken by a transaction whose snapshot predates its previous
  // user's commit would fail with a serialization error (and be retried).
  {
    name: "version buckets per transaction",
    sql: `
  CREATE OR REPLACE FUNCTION version_bucket() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
  DECLARE
    claimed integer := nullif(current_setting('platform_versions.tx_bucket', true), '')::integer;
    home integer;
  BEGIN
    IF claimed IS NULL THEN
      home := coalesce(nullif(current_setting('platform_versions.home_bucket', true), '')::integer, pg_backend_pid() % ${VERSION_BUCKETS});
      -- The first free bucket from home on (series order, so the filter stops at the first lock taken).
      SELECT b INTO claimed FROM (SELECT (home + i) % ${VERSION_BUCKETS} AS b FROM generate_series(0, ${VERSION_BUCKETS - 1}) AS i) AS c
       WHERE pg_try_advisory_xact_lock(${BUCKET_LOCKS}, b) LIMIT 1;
      IF claimed IS NULL THEN
        -- Every bucket taken: share home (a concurrent writer of it fails with a serialization error, and is retried).
        claimed := home;
      ELSIF claimed <> home THEN
        PERFORM set_config('platform_versions.home_bucket', claimed::text, false);
      END IF;
      PERFORM set_config('platform_versions.tx_bucket', claimed::text, true);
    END IF;
    RETURN claimed;
  END $$;
  ${TRANSACTION_BUCKET_TABLES.map(bucketFunction).join("\n  ")}
  `,
  },
];

/**
 * Migrations 2 and 6's statement trigger (frozen with them): moves its
 * column of the bucket the connection claimed (migration 10 replaced it).
 */
function sessionBucketTrigger(t: string): string {
  return `CREATE FUNCTION bump_${t}_version() RETURNS trigger LANGUAGE plpgsql SET enable_seqscan = off AS $$
  BEGIN
    IF current_setting('platform_versions.${t}', true) IS DISTINCT FROM 'bumped' THEN
      UPDATE version_buckets SET ${t} = ${t} + 1 WHERE bucket = version_bucket();
      PERFORM set_config('platform_versions.${t}', 'bumped', true);
    END IF;
    RETURN NULL;
  END $$;
  CREATE TRIGGER ${t}_version AFTER INSERT OR UPDATE OR DELETE ON ${t} FOR EACH STATEMENT EXECUTE FUNCTION bump_${t}_version();`;
}

/**
 * A table's statement trigger function (created, or replaced under its
 * trigger): moves its column of the transaction's bucket (version_bucket()
 * claims one on the first write), once per transaction (the
 * transaction-local setting goes with the transaction or savepoint), so a
 * bulk write updates the row once. The bucket is computed once, before the
 * UPDATE (the function takes a lock: it is volatile), and its row found
 * through the primary key, never by a scan of the table: under SERIALIZABLE
 * a scan would lock the whole table for reading, and every two concurrent
 * writers would conflict through it.
 */
function bucketFunction(t: string): string {
  return `CREATE OR REPLACE FUNCTION bump_${t}_version() RETURNS trigger LANGUAGE plpgsql SET enable_seqscan = off AS $$
  DECLARE
    claimed integer;
  BEGIN
    IF current_setting('platform_versions.${t}', true) IS DISTINCT FROM 'bumped' THEN
      claimed := version_bucket();
      UPDATE version_buckets SET ${t} = ${t} + 1 WHERE bucket = claimed;
      PERFORM set_config('platform_versions.${t}', 'bumped', true);
    END IF;
    RETURN NULL;
  END $$;`;
}

/** A table versioned from now on: its trigger function and its statement trigger (its column is added beside). */
export function bucketTrigger(t: string): string {
  return `${bucketFunction(t)}
  CREATE TRIGGER ${t}_version AFTER INSERT OR UPDATE OR DELETE ON ${t} FOR EACH STATEMENT EXECUTE FUNCTION bump_${t}_version();`;
}

/** Version rows (every bucket at 0) and the statement trigger of each table. */
function versionTriggers(tables: readonly string[]): string {
  return tables
    .map(
      (t) => `INSERT INTO table_versions (name, bucket, version) SELECT '${t}', b, 0 FROM generate_series(0, 15) AS b;
  CREATE TRIGGER ${t}_version AFTER INSERT OR UPDATE OR DELETE ON ${t} FOR EACH STATEMENT EXECUTE FUNCTION bump_table_version();`,
    )
    .join("\n  ");
}

/** The schema version this code expects. */
export const POSTGRES_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Brings the schema up to date, each step in its own transaction, which
 * first takes a transaction-level advisory lock: processes starting at once
 * wait for one another, and each step is applied exactly once; `log` is told
 * of each step applied. No session state (a session lock would stay on a
 * pooled server connection behind a transaction-pooling PgBouncer). Refuses
 * (StartupError) a database whose schema is newer than this code: a
 * rollback to an older binary. (target: a schema version before the newest,
 * for tests of a migration.)
 */
export async function migratePostgres(pool: pg.Pool, target = MIGRATIONS.length, log?: MigrationLog): Promise<void> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    for (;;) {
      const started = performance.now();
      await client.query("BEGIN");
      try {
        await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]);
        await client.query(
          "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        );
        const { rows } = await client.query<{ v: number | null }>("SELECT max(version) AS v FROM schema_migrations");
        const v = rows[0]?.v ?? 0;
        if (v > MIGRATIONS.length) throw newerSchemaError("postgres", v, MIGRATIONS.length);
        if (v >= target) {
          await client.query("COMMIT");
          break;
        }
        await client.query(MIGRATIONS[v]!.sql);
        await client.query("INSERT INTO schema_migrations (version) VALUES ($1)", [v + 1]);
        await client.query("COMMIT");
        log?.(stepOf(v, started));
      } catch (err) {
        await client.query("ROLLBACK").catch((rollbackErr: Error) => (broken = rollbackErr));
        throw err;
      }
    }
    await refuseTransactionIdsBehind(client);
  } finally {
    client.release(broken);
  }
}

/** The log entry of the step from version v, begun at `started` (performance.now()). */
function stepOf(v: number, started: number): MigrationStep {
  const durationMs = Math.round((performance.now() - started) * 100) / 100;
  return { engine: "postgres", migration: v + 1, name: MIGRATIONS[v]!.name, fromVersion: v, toVersion: v + 1, durationMs };
}

/**
 * Refuses (StartupError) a database whose events carry transaction ids this cluster has not reached: a dump
 * restored into another cluster (pg_dump and pg_restore keep the events' txid column, not the cluster's
 * transaction counter). The feed orders events by transaction id and shows only those below the oldest one
 * still running, so such a server would hide the restored events and put new ones before them.
 */
async function refuseTransactionIdsBehind(client: pg.PoolClient): Promise<void> {
  // A separate statement: one naming the events table does not parse before the migration that makes it.
  const exists = await client.query<{ found: boolean }>("SELECT to_regclass('events') IS NOT NULL AS found");
  if (exists.rows[0]?.found !== true) return;
  const { rows } = await client.query<{ newest: string | null; next: string }>(
    "SELECT (SELECT max(txid) FROM events)::text AS newest, pg_snapshot_xmax(pg_current_snapshot())::text AS next",
  );
  const newest = rows[0]?.newest ?? null;
  const next = BigInt(rows[0]?.next ?? "0");
  if (newest === null || BigInt(newest) < next) return;
  throw new StartupError(
    `the PostgreSQL database's events were written up to transaction id ${newest}, but this cluster's next is ${next}: ` +
      `it was restored from a dump into another cluster, and the event feed orders events by transaction id; ` +
      `advance this cluster's transaction ids past ${newest} first (docs/operations.md: Backups, restore and upgrades)`,
  );
}
