import type { Cursor } from "../store.js";

/**
 * What both store engines share about a table: how it is listed (its
 * select list, the column behind each order field) and how a row becomes a
 * record. The engines keep only their SQL.
 */
export interface TableSpec<TOrder extends string> {
  table: string;
  select: string;
  orderColumns: Record<TOrder, string>;
  /**
   * Root-level rows (parent_uid NULL) are visible to every narrowed query that
   * names at least one group, as built-in roles are. An empty visibleWithin
   * still sees nothing.
   */
  rootsVisible?: boolean;
}

/** A boolean column as either engine returns it: SQLite's 0/1, PostgreSQL's boolean. */
export function isTrue(value: number | boolean): boolean {
  return value === true || value === 1;
}

/** A WHERE fragment with its parameters, each marked "?" (the PostgreSQL engine numbers them). */
export interface Clause {
  sql: string;
  params: unknown[];
}

/** Exact-match clauses for the filter values that are set, e.g. exact({ "t.name": filter.name }). */
export function exact(columns: Record<string, string | undefined>): Clause[] {
  return Object.entries(columns).flatMap(([column, value]) => (value === undefined ? [] : [{ sql: `${column} = ?`, params: [value] }]));
}

/** The keyset condition: strictly after (or before, descending) the cursor in (column, uid) order. */
export function keysetClause(column: string, desc: boolean, after: Cursor): Clause {
  const op = desc ? "<" : ">";
  if (column === "uid") return { sql: `t.uid ${op} ?`, params: [after.uid] };
  return { sql: `(t.${column}, t.uid) ${op} (?, ?)`, params: [after.key, after.uid] };
}
