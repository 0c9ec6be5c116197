import type { Database } from "better-sqlite3";

/**
 * Schema migrations, applied in order at start-up. Entry i moves the schema
 * from user_version i to i+1. Never edit a released entry: append a new one.
 */
const MIGRATIONS: readonly string[] = [
  `
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
  // 2: IAM records and the token signing keys. Group-owned rows RESTRICT the
  // group's deletion (the store checks first, to name the kind); an identity's
  // role bindings go with it.
  `
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
];

/** Brings the database schema up to date inside one transaction per step. */
export function migrate(db: Database): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  if (current > MIGRATIONS.length) {
    throw new Error(
      `database schema version ${current} is newer than this server (${MIGRATIONS.length}); refusing to start`,
    );
  }
  for (let v = current; v < MIGRATIONS.length; v++) {
    db.transaction(() => {
      db.exec(MIGRATIONS[v]!);
      db.pragma(`user_version = ${v + 1}`);
    })();
  }
}
