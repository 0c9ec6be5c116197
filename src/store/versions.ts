/**
 * Table versions: a counter per table that moves in every transaction that
 * writes the table, cascades included, on every engine and from every
 * process (PostgreSQL: a statement trigger per table; SQLite: the store
 * itself, once per group commit, from the tables STORE_PARTS says each
 * part's writes change). Caches key what they keep with the versions
 * of the tables it was read from, read before the data: an entry is never
 * served once a newer write is known, and nothing is time-based.
 */

import { PART_NAMES, STORE_PARTS } from "./parts.js";
import type { TableVersions, VersionedTable } from "./store.js";

export type { TableVersions, VersionedTable };

/**
 * The tables the first version-trigger migrations cover (SQLite's 7th,
 * PostgreSQL's 1st). Frozen with them: a table versioned later gets its
 * row (and on PostgreSQL its column and trigger) in a migration of its own,
 * and joins VERSIONED_TABLES by its part's STORE_PARTS row.
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
] as const satisfies readonly VersionedTable[];

/**
 * The tables caches are checked against: every part's `table` in STORE_PARTS
 * (parts.ts), in its order (the first eleven are FIRST_VERSIONED_TABLES, then
 * subscriptions). PartTables (store.ts) is the same list as a type.
 */
export const VERSIONED_TABLES: readonly VersionedTable[] = PART_NAMES.flatMap((name) => STORE_PARTS[name].table ?? []);

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
