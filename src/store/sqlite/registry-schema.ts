/**
 * Migration 4: the registry catalogue (repos and their tags). A repo RESTRICTs
 * its group's deletion and a tag its repo's (the stores check first, to name
 * the kind). A tag's is_referrer, is_dated and is_epoch flags are computed from
 * its name when it is written, so the List filters that leave those tag forms
 * out compare a column instead of matching a pattern on every row.
 */
export const REGISTRY_SCHEMA = `
CREATE TABLE repos (
  uid TEXT PRIMARY KEY,
  parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
  name TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  catalog_tier INTEGER NOT NULL DEFAULT 0,
  bundles TEXT NOT NULL DEFAULT '[]',
  aliases TEXT NOT NULL DEFAULT '[]',
  active_tags TEXT NOT NULL DEFAULT '[]',
  create_time INTEGER NOT NULL,
  update_time INTEGER NOT NULL,
  UNIQUE (parent_uid, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX repos_parent ON repos(parent_uid, uid);
CREATE INDEX repos_name ON repos(name, uid);
CREATE INDEX repos_create_time ON repos(create_time, uid);
CREATE INDEX repos_update_time ON repos(update_time, uid);

CREATE TABLE tags (
  uid TEXT PRIMARY KEY,
  parent_uid TEXT NOT NULL REFERENCES repos(uid) ON DELETE RESTRICT,
  name TEXT NOT NULL,
  digest TEXT NOT NULL,
  deprecated INTEGER NOT NULL DEFAULT 0,
  bundles TEXT NOT NULL DEFAULT '[]',
  update_time INTEGER NOT NULL,
  is_referrer INTEGER NOT NULL,
  is_dated INTEGER NOT NULL,
  is_epoch INTEGER NOT NULL,
  UNIQUE (parent_uid, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX tags_parent ON tags(parent_uid, uid);
CREATE INDEX tags_name ON tags(name, uid);
CREATE INDEX tags_update_time ON tags(update_time, uid);
CREATE INDEX tags_digest ON tags(digest);
`;
