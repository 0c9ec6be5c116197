/**
 * Migration 5: vulnerability advisories. An advisory lives directly below its
 * group and RESTRICTs the group's deletion (the store checks first, to name
 * the kind). Aliases, severities and events are JSON arrays: they are read
 * whole with the advisory and filtered with json_each, never joined.
 */
export const ADVISORIES_SCHEMA = `
  CREATE TABLE advisories (
    uid TEXT PRIMARY KEY,
    parent_uid TEXT NOT NULL REFERENCES groups(uid) ON DELETE RESTRICT,
    advisory_id TEXT NOT NULL,
    legacy_advisory_id TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    artifact_name TEXT NOT NULL DEFAULT '',
    artifact_type TEXT NOT NULL DEFAULT '',
    artifact_architecture TEXT NOT NULL DEFAULT '',
    component_name TEXT NOT NULL DEFAULT '',
    component_location TEXT NOT NULL DEFAULT '',
    component_type TEXT NOT NULL DEFAULT '',
    origin TEXT NOT NULL DEFAULT '',
    aliases TEXT NOT NULL DEFAULT '[]',
    severities TEXT NOT NULL DEFAULT '[]',
    events TEXT NOT NULL DEFAULT '[]',
    create_time INTEGER NOT NULL,
    update_time INTEGER NOT NULL,
    delete_time INTEGER
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX advisories_parent ON advisories(parent_uid, uid);
  CREATE INDEX advisories_advisory_id ON advisories(advisory_id, uid);
  CREATE INDEX advisories_create_time ON advisories(create_time, uid);
  CREATE INDEX advisories_update_time ON advisories(update_time, uid);
  CREATE INDEX advisories_artifact_name ON advisories(artifact_name);
  CREATE INDEX advisories_component_name ON advisories(component_name);
  CREATE INDEX advisories_origin ON advisories(origin);
`;
