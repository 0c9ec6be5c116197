/** A platform-api version that changed a schema, and the schema version it migrates each engine to. */
export interface SchemaRelease {
  version: string;
  /** SQLite's user_version. */
  sqlite: number;
  /** PostgreSQL's max(schema_migrations.version). */
  postgres: number;
}

/**
 * Every version that changed either engine's schema, oldest first: the first version with a schema number is the
 * first row that reaches it. Every schema change moves the version to the next minor, so no two builds that say
 * the same version migrate to different schemas, and a database refused as newer was migrated by a version after
 * this one's minor. test/store/schema-releases.test.ts holds the last row to the migrations and to package.json, and
 * every row to CHANGELOG.md's "Schema:" lines.
 */
export const SCHEMA_RELEASES: readonly SchemaRelease[] = [
  { version: "0.1.0", sqlite: 11, postgres: 6 },
  { version: "0.2.0", sqlite: 12, postgres: 7 },
  { version: "0.3.0", sqlite: 13, postgres: 8 },
  { version: "0.4.0", sqlite: 14, postgres: 9 },
  { version: "0.5.0", sqlite: 14, postgres: 10 },
];

/** The schema versions this code migrates to (the last row). */
export const CURRENT_SCHEMA: SchemaRelease = SCHEMA_RELEASES[SCHEMA_RELEASES.length - 1]!;

/** The first version that can have migrated a schema newer than `version`'s: its next minor (1.4.2 → 1.5.0). */
export function nextSchemaVersion(version: string): string {
  const [major, minor] = version.split(".").map(Number);
  return `${major}.${minor! + 1}.0`;
}
