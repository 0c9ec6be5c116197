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
