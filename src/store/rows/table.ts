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
