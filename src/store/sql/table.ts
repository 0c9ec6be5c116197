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

/**
 * What differs between the engines' SQL for a list, and nothing else: every
 * list statement of either engine is built by listSql (list-sql.ts) from
 * one of these, and each table's filters (rows/) with it.
 * Fragments take "?" placeholders, in text order.
 */
export interface ListDialect {
  /** The WHERE of a query without conditions. */
  readonly always: string;
  /** A condition no row meets (a narrowed query that sees nothing). */
  readonly never: string;
  /** A list of values as the one parameter inList and topsJoin take. */
  listParam(values: readonly unknown[]): unknown;
  /** expr equals one of the values of one listParam parameter. */
  inList(expr: string): string;
  /**
   * The FROM of the rows (named t) at or below any of the tops of one
   * listParam parameter: a loop over the tops, one primary-key range each.
   */
  topsJoin(table: string): string;
  /** A boolean column is false. */
  isFalse(column: string): string;
  /** The LIKE that ignores the case of ASCII letters. */
  readonly caselessLike: string;
  /** A JSON array column's elements as rows, for subqueries. */
  jsonArray(column: string, alias: string): JsonArrayRows;
  /** The select list of a page over these (t.-qualified) columns. */
  pageColumns(columns: readonly string[]): string;
  /** The select list of a count. */
  readonly countColumn: string;
  /** The statement text as the driver takes it, from text with "?" placeholders. */
  placeholders(sql: string): string;
}

/** The elements of a JSON array column as rows of a subquery's FROM, named by an alias. */
export interface JsonArrayRows {
  /** The FROM item of an array of strings; `text` is an element. */
  texts: string;
  text: string;
  /** The FROM item of an array of objects; `ordered` numbers them too, `position` being an element's index. */
  objects: string;
  ordered: string;
  position: string;
  /** A field of an element object, as text. */
  field(name: string): string;
  /** A field of an element object, as a number. */
  number(name: string): string;
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
