import type { Database } from "better-sqlite3";
import { newerSchemaError, type MigrationLog, type MigrationStep } from "../migration-log.js";
import { FIRST_VERSIONED_TABLES } from "../versions.js";
import { ADVISORIES_SCHEMA } from "./advisories-schema.js";
import { REGISTRY_SCHEMA } from "./registry-schema.js";

/** One step of the schema: what it changes, in a few words (for the log), and its SQL. */
interface Migration {
  name: string;
  sql: string;
}

/**
 * Schema migrations, applied in order at start-up. Entry i moves the schema
 * from user_version i to i+1. Never edit a released entry's SQL: append a new one.
 */
const MIGRATIONS: readonly Migration[] = [
  {
    name: "groups and the server's secrets",
    sql: `
  CREATE TABLE groups (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT REFERENCES groups(uid) ON DELETE RESTRICT,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    verified INTEGER NOT NULL DEFAULT 0,
    resource_limits TEXT NOT NULL DEFAULT '{}',
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX groups_parent ON groups(parent_uid, uid);
  CREATE INDEX groups_name ON groups(name, uid);
  CREATE INDEX groups_create_time ON groups(create_time, uid);
  CREATE INDEX groups_update_time ON groups(update_time, uid);

  CREATE TABLE secrets (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
  ) STRICT, WITHOUT ROWID;
  `,
  },
  // 2: IAM records and the token signing keys. Group-owned rows RESTRICT the
  // group's deletion (the store checks first, to name the kind); an identity's
  // role bindings go with it.
  {
    name: "IAM records and signing keys",
    sql: `
  CREATE TABLE identities (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT REFERENCES groups(uid) ON DELETE RESTRICT,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    email TEXT NOT NULL DEFAULT '',
    email_unverified TEXT NOT NULL DEFAULT '',
    company TEXT NOT NULL DEFAULT '',
    relationship_kind TEXT NOT NULL CHECK (relationship_kind IN ('claimMatch', 'staticKeys')),
    relationship TEXT NOT NULL,
    last_seen_time INTEGER NOT NULL DEFAULT 0,
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX identities_parent ON identities(parent_uid, uid);
  CREATE INDEX identities_name ON identities(name, uid);
  CREATE INDEX identities_create_time ON identities(create_time, uid);
  CREATE INDEX identities_update_time ON identities(update_time, uid);

  CREATE TABLE roles (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT REFERENCES groups(uid) ON DELETE RESTRICT,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    capabilities TEXT NOT NULL DEFAULT '[]',
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX roles_parent ON roles(parent_uid, uid);
  CREATE INDEX roles_name ON roles(name, uid);
  CREATE INDEX roles_create_time ON roles(create_time, uid);
  CREATE INDEX roles_update_time ON roles(update_time, uid);

  CREATE TABLE role_bindings (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    identity_uid TEXT NOT NULL REFERENCES identities(uid) ON DELETE CASCADE,
    role_uid TEXT NOT NULL REFERENCES roles(uid) ON DELETE RESTRICT,
    create_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX role_bindings_parent ON role_bindings(parent_uid, uid);
  CREATE INDEX role_bindings_identity ON role_bindings(identity_uid);
  CREATE INDEX role_bindings_role ON role_bindings(role_uid);
  CREATE INDEX role_bindings_create_time ON role_bindings(create_time, uid);

  -- A rowid table: the rowid keeps insertion order among keys created in the same millisecond.
  CREATE TABLE signing_keys (
    kid TEXT PRIMARY KEY,
    private_jwk TEXT NOT NULL,
    public_jwk TEXT NOT NULL,
    create_time INTEGER NOT NULL
  ) STRICT;
  `,
  },
  // 3: identity providers, account associations and group invites. A role
  // that is an identity provider's default cannot go (RESTRICT, checked first
  // to name the kind); an invite whose role goes disappears with it.
  {
    name: "identity providers, account associations and group invites",
    sql: `
  CREATE TABLE identity_providers (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    default_role TEXT NOT NULL REFERENCES roles(uid) ON DELETE RESTRICT,
    oidc TEXT NOT NULL,
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX identity_providers_parent ON identity_providers(parent_uid, uid);
  CREATE INDEX identity_providers_name ON identity_providers(name, uid);
  CREATE INDEX identity_providers_create_time ON identity_providers(create_time, uid);
  CREATE INDEX identity_providers_update_time ON identity_providers(update_time, uid);
  CREATE INDEX identity_providers_default_role ON identity_providers(default_role);

  -- The association's uid is its group's uid (one per group). parent_uid copies
  -- the group's parent (NULL for an organization) so the hierarchy filters work
  -- as on every other table; groups never move, so the copy cannot go stale.
  CREATE TABLE account_associations (
    uid TEXT PRIMARY KEY REFERENCES groups(uid) ON DELETE RESTRICT,
    parent_uid TEXT,
    name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    providers TEXT NOT NULL DEFAULT '{}',
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX account_associations_parent ON account_associations(parent_uid, uid);
  CREATE INDEX account_associations_name ON account_associations(name, uid);
  CREATE INDEX account_associations_create_time ON account_associations(create_time, uid);
  CREATE INDEX account_associations_update_time ON account_associations(update_time, uid);

  CREATE TABLE group_invites (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    role_uid TEXT NOT NULL REFERENCES roles(uid) ON DELETE CASCADE,
    email TEXT NOT NULL DEFAULT '',
    expiration_time INTEGER NOT NULL,
    single_use INTEGER NOT NULL DEFAULT 0,
    key_id TEXT NOT NULL UNIQUE,
    code_hash TEXT NOT NULL,
    create_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX group_invites_parent ON group_invites(parent_uid, uid);
  CREATE INDEX group_invites_role ON group_invites(role_uid);
  CREATE INDEX group_invites_create_time ON group_invites(create_time, uid);
  CREATE INDEX group_invites_expiration_time ON group_invites(expiration_time, uid);
  `,
  },
  { name: "registry repos and tags", sql: REGISTRY_SCHEMA },
  { name: "advisories", sql: ADVISORIES_SCHEMA },
  // 6: a binding may name a person (a root-level uid from LookupIdentity)
  // before their first sign-in, so identity_uid loses its foreign key;
  // deleting an identity deletes its bindings in the same transaction instead.
  // Nothing references role_bindings, so the table is rebuilt in place.
  {
    name: "role bindings of people before their first sign-in",
    sql: `
  CREATE TABLE role_bindings_v6 (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    identity_uid TEXT NOT NULL,
    role_uid TEXT NOT NULL REFERENCES roles(uid) ON DELETE RESTRICT,
    create_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  INSERT INTO role_bindings_v6 (uid, parent_uid, identity_uid, role_uid, create_time)
    SELECT uid, parent_uid, identity_uid, role_uid, create_time FROM role_bindings;
  DROP TABLE role_bindings;
  ALTER TABLE role_bindings_v6 RENAME TO role_bindings;
  CREATE INDEX role_bindings_parent ON role_bindings(parent_uid, uid);
  CREATE INDEX role_bindings_identity ON role_bindings(identity_uid);
  CREATE INDEX role_bindings_role ON role_bindings(role_uid);
  CREATE INDEX role_bindings_create_time ON role_bindings(create_time, uid);
  `,
  },
  // 7: table versions, moved by triggers in the writing transaction, so
  // caches in every process sharing the file see each commit (cascades too).
  { name: "table versions for the caches", sql: versionTriggers(FIRST_VERSIONED_TABLES) },
  // 8: a signing key's retirement (ms; NULL while it may verify): the
  // signing_keys triggers move its version, so every process notices.
  {
    name: "signing key retirement",
    sql: `
  ALTER TABLE signing_keys ADD COLUMN retire_time INTEGER;
  `,
  },
  // 9: who created each root organization (NULL for folders and the
  // administrator's), counted for PLATFORM_MAX_ORGS_PER_IDENTITY.
  {
    name: "organization creators",
    sql: `
  ALTER TABLE groups ADD COLUMN creator_uid TEXT;
  CREATE INDEX groups_creator ON groups(creator_uid) WHERE creator_uid IS NOT NULL;
  `,
  },
  // 10: the event outbox and change feed (docs/events.md). One writer at a
  // time, so seq is commit order; root is the subject's root uid, so a
  // tenant's reads scan its own roots' events only. event_feed remembers the
  // newest position pruned.
  {
    name: "event outbox and change feed",
    sql: `
  CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    type TEXT NOT NULL,
    subject TEXT NOT NULL,
    root TEXT NOT NULL,
    group_uid TEXT NOT NULL,
    time INTEGER NOT NULL,
    data TEXT NOT NULL
  ) STRICT;
  CREATE INDEX events_root ON events(root, seq);
  CREATE INDEX events_time ON events(time);
  CREATE TABLE event_feed (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_seq INTEGER NOT NULL
  ) STRICT;
  INSERT INTO event_feed (id, pruned_seq) VALUES (1, 0);
  `,
  },
  // 11: event subscriptions (src/delivery/). A subscription RESTRICTs its
  // group's deletion like every group-owned record; its delivery state (the
  // cursor, the event being retried, the lease of the process delivering it)
  // and its log go with it. The secret is stored as it is used: it signs every
  // delivery. events_id finds an event to redeliver by its id.
  {
    name: "event subscriptions and deliveries",
    sql: `
  CREATE TABLE subscriptions (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    sink TEXT NOT NULL,
    types TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL DEFAULT 'active',
    last_error TEXT NOT NULL DEFAULT '',
    secret TEXT NOT NULL,
    creator_uid TEXT NOT NULL,
    creator_admin INTEGER NOT NULL DEFAULT 0,
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX subscriptions_parent ON subscriptions(parent_uid, uid);
  CREATE INDEX subscriptions_create_time ON subscriptions(create_time, uid);
  CREATE INDEX subscriptions_update_time ON subscriptions(update_time, uid);
  INSERT INTO table_versions (name, version) VALUES ('subscriptions', 0);
  ${versionTriggerStatements("subscriptions")}
  CREATE TABLE subscription_deliveries (
    subscription_uid TEXT PRIMARY KEY REFERENCES subscriptions(uid) ON DELETE CASCADE,
    start_time INTEGER NOT NULL,
    cursor TEXT,
    retry_event_id TEXT,
    retry_attempts INTEGER NOT NULL DEFAULT 0,
    retry_first_at INTEGER,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until INTEGER NOT NULL DEFAULT 0,
    log_seq INTEGER NOT NULL DEFAULT 0
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE delivery_attempts (
    subscription_uid TEXT NOT NULL REFERENCES subscriptions(uid) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    time INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    status INTEGER NOT NULL,
    latency_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    PRIMARY KEY (subscription_uid, seq)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX events_id ON events(id);
  `,
  },
  // 12: the time (microseconds) of the registry event that last set a tag
  // (src/registry/notifications-catalogue.ts): a late redelivery of an older
  // push or delete never regresses the tag. NULL for a tag an API call set:
  // its update time counts instead. registry_deleted_digests remembers when
  // a manifest was deleted from a repo, so a push older than the delete,
  // delivered after it, does not bring its tag back; kept for
  // DELETED_DIGEST_RETENTION_US (src/store/sql/tags.ts). (IF NOT EXISTS: the
  // older-schema tests rebuild tags and repos beside a table they keep.)
  {
    name: "tag source times and deleted digests",
    sql: `
  ALTER TABLE tags ADD COLUMN source_time_us INTEGER;
  CREATE TABLE IF NOT EXISTS registry_deleted_digests (
    repo_uid TEXT NOT NULL REFERENCES repos(uid) ON DELETE CASCADE,
    digest TEXT NOT NULL,
    time_us INTEGER NOT NULL,
    PRIMARY KEY (repo_uid, digest)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS registry_deleted_digests_time ON registry_deleted_digests(time_us, repo_uid, digest);
  `,
  },
  // 13: table versions moved by the store (sqlite/table-versions.ts), once
  // per table per group commit, instead of by a trigger per row: a statement
  // on a table with a trigger keeps a statement journal SQLite does not
  // truncate until the transaction ends, so group commits spilled page
  // copies to temporary files. Every version moves once here, so a cache
  // filled before the upgrade is not trusted after it. A later migration
  // that writes a versioned table moves its version itself.
  {
    name: "table versions moved by the store",
    sql: `
  ${[...FIRST_VERSIONED_TABLES, "subscriptions"].flatMap((t) => ["insert", "update", "delete"].map((op) => `DROP TRIGGER IF EXISTS ${t}_version_${op};`)).join("\n  ")}
  UPDATE table_versions SET version = version + 1;
  `,
  },
  // 14: people's sign-in (issue 32): pending sign-in flows, shared by every process, and refresh tokens in
  // families, stored only as hashes. Neither is versioned (nothing caches them). A token goes with its identity
  // (ON DELETE CASCADE), so deleting a person revokes their sessions in the same statement.
  {
    name: "sign-in flows and refresh tokens",
    sql: `
  CREATE TABLE sign_in_flows (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('authorize', 'device', 'web')),
    client_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    client_state TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    device_code_hash TEXT NOT NULL,
    user_code_hash TEXT NOT NULL,
    poll_interval INTEGER NOT NULL,
    last_poll_time INTEGER NOT NULL,
    scope_idp TEXT NOT NULL,
    scope_org TEXT NOT NULL,
    scope_provider TEXT NOT NULL,
    client_address TEXT NOT NULL,
    upstream_provider TEXT NOT NULL,
    upstream_state_hash TEXT NOT NULL,
    upstream_nonce TEXT NOT NULL,
    upstream_verifier TEXT NOT NULL,
    browser_binding_hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'signed-in', 'approved', 'denied', 'consumed')),
    identity_uid TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    create_time INTEGER NOT NULL,
    expire_time INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE UNIQUE INDEX sign_in_flows_upstream_state ON sign_in_flows(upstream_state_hash) WHERE upstream_state_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_device_code ON sign_in_flows(device_code_hash) WHERE device_code_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_user_code ON sign_in_flows(user_code_hash) WHERE user_code_hash <> '';
  CREATE UNIQUE INDEX sign_in_flows_code ON sign_in_flows(code_hash) WHERE code_hash <> '';
  CREATE INDEX sign_in_flows_address ON sign_in_flows(client_address, expire_time);
  CREATE INDEX sign_in_flows_expire_time ON sign_in_flows(expire_time);

  CREATE TABLE refresh_tokens (
    hash TEXT PRIMARY KEY,
    family_id TEXT NOT NULL,
    identity_uid TEXT NOT NULL REFERENCES identities(uid) ON DELETE CASCADE,
    client_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    family_start_time INTEGER NOT NULL,
    issue_time INTEGER NOT NULL,
    used_time INTEGER NOT NULL DEFAULT 0
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX refresh_tokens_family ON refresh_tokens(family_id, used_time);
  CREATE INDEX refresh_tokens_identity ON refresh_tokens(identity_uid, family_start_time);
  CREATE INDEX refresh_tokens_key ON refresh_tokens(key_id);
  CREATE INDEX refresh_tokens_issue_time ON refresh_tokens(issue_time);
  CREATE INDEX refresh_tokens_family_start_time ON refresh_tokens(family_start_time);
  `,
  },
];

/** The table_versions table and, for each table, triggers that move its row on every insert, update and delete. */
function versionTriggers(tables: readonly string[]): string {
  const rows = tables.map((t) => `('${t}', 0)`).join(", ");
  const triggers = tables.flatMap((t) =>
    ["INSERT", "UPDATE", "DELETE"].map(
      (op) => `CREATE TRIGGER ${t}_version_${op.toLowerCase()} AFTER ${op} ON ${t} BEGIN
    UPDATE table_versions SET version = version + 1 WHERE name = '${t}';
  END;`,
    ),
  );
  return `
  CREATE TABLE table_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT, WITHOUT ROWID;
  INSERT INTO table_versions (name, version) VALUES ${rows};
  ${triggers.join("\n  ")}
  `;
}

/** One table's three version triggers, as versionTriggers writes them (for a table versioned after the 7th migration). */
function versionTriggerStatements(t: string): string {
  return ["INSERT", "UPDATE", "DELETE"]
    .map(
      (op) => `CREATE TRIGGER ${t}_version_${op.toLowerCase()} AFTER ${op} ON ${t} BEGIN
    UPDATE table_versions SET version = version + 1 WHERE name = '${t}';
  END;`,
    )
    .join("\n  ");
}

/** The schema version this code migrates to (SQLite's user_version). */
export const SQLITE_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Brings the database schema up to date inside one transaction per step, telling `log` of each step applied.
 * Refuses (StartupError) a database whose schema is newer than this code: a rollback to an older binary.
 */
export function migrate(db: Database, log: MigrationLog | undefined): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  if (current > MIGRATIONS.length) throw newerSchemaError("sqlite", current, MIGRATIONS.length);
  for (let v = current; v < MIGRATIONS.length; v++) {
    const started = performance.now();
    // IMMEDIATE takes the write lock first; the version is read again under
    // it, so processes starting at once apply each step exactly once.
    const applied = db
      .transaction(() => {
        if ((db.pragma("user_version", { simple: true }) as number) !== v) return false;
        db.exec(MIGRATIONS[v]!.sql);
        db.pragma(`user_version = ${v + 1}`);
        return true;
      })
      .immediate();
    if (applied) log?.(stepOf(v, started));
  }
}

/** The log entry of the step from version v, begun at `started` (performance.now()). */
function stepOf(v: number, started: number): MigrationStep {
  const durationMs = Math.round((performance.now() - started) * 100) / 100;
  return { engine: "sqlite", migration: v + 1, name: MIGRATIONS[v]!.name, fromVersion: v, toVersion: v + 1, durationMs };
}
