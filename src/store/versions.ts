/**
 * Table versions: a counter per table that moves in every transaction that
 * writes the table, cascades included, on every engine and from every
 * process (PostgreSQL: a statement trigger per table; SQLite: the store
 * itself, once per group commit, from the tables STORE_PARTS says each
 * part's writes change). Caches key what they keep with the versions
 * of the tables it was read from, read before the data: an entry is never
 * served once a newer write is known, and nothing is time-based.
 */

/**
 * The tables the first version-trigger migrations cover (SQLite's 7th,
 * PostgreSQL's 1st). Frozen with them: a table versioned later gets its
 * row (and on PostgreSQL its trigger) in a migration of its own and joins
 * VERSIONED_TABLES.
 */
export const FIRST_VERSIONED_TABLES = [
  "groups",
  "identities",
  "roles",
  "role_bindings",
  "identity_providers",
  "account_associations",
  "group_invites",
  "repos",
  "tags",
  "advisories",
  "signing_keys",
] as const;

/** The tables caches are checked against. */
export const VERSIONED_TABLES = [...FIRST_VERSIONED_TABLES, "subscriptions"] as const;

export type VersionedTable = (typeof VERSIONED_TABLES)[number];

/** Each table's version at one moment. */
export type TableVersions = Readonly<Record<VersionedTable, number>>;

/** The tables authorization is derived from: a change to any of them changes who may do what. */
export const AUTHZ_TABLES: readonly VersionedTable[] = ["identities", "roles", "role_bindings"];

/** Every table at version 0. */
export function zeroVersions(): Record<VersionedTable, number> {
  return Object.fromEntries(VERSIONED_TABLES.map((t) => [t, 0])) as Record<VersionedTable, number>;
}

/**
 * Versions from rows of (name, version), ignoring names that are not
 * versioned tables; a table without a row is at 0.
 */
export function versionsFromRows(rows: readonly { name: string; version: number | string }[]): TableVersions {
  const out = zeroVersions();
  for (const row of rows) if (row.name in out) out[row.name as VersionedTable] = Number(row.version);
  return out;
}
