import { listSql } from "../sql/list-sql.js";
import { exact, type Clause, type ListDialect, type TableSpec } from "../sql/table.js";
import type { ListQuery, ListResult } from "../store.js";

export { exact, type Clause };

/** What runs a statement: the pool, or the client of an open transaction. */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** Numbers the "?" placeholders of sql as $1, $2, … in order. */
export function numbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/**
 * PostgreSQL's list SQL: lists of values travel as one text[] parameter,
 * booleans are booleans, and every key is "C"-collated so the order is the
 * byte order SQLite uses too.
 */
export const POSTGRES_DIALECT: ListDialect = {
  always: "TRUE",
  never: "FALSE",
  listParam: (values) => values.map(String),
  inList: (expr) => `${expr} = ANY(?::text[])`,
  // A nested loop reading one range of the primary key per top. OFFSET 0 keeps the
  // lateral subquery a subquery: flattened, the planner may walk an order index
  // over the whole table and test every top per row.
  topsJoin: (table) =>
    `unnest(?::text[]) AS v(top) CROSS JOIN LATERAL (SELECT * FROM ${table} AS r WHERE r.uid >= v.top COLLATE "C" AND r.uid < (v.top || '0') COLLATE "C" OFFSET 0) AS t`,
  isFalse: (column) => `NOT ${column}`,
  // ILIKE ignores the case of ASCII letters only, as SQLite's LIKE, under the cluster's C ctype.
  caselessLike: "ILIKE",
  // The JSON columns hold the same text as SQLite's, read as jsonb.
  jsonArray: (column, alias) => ({
    texts: `jsonb_array_elements_text(${column}::jsonb) AS ${alias}(v)`,
    text: `${alias}.v`,
    objects: `jsonb_array_elements(${column}::jsonb) AS ${alias}(v)`,
    ordered: `jsonb_array_elements(${column}::jsonb) WITH ORDINALITY AS ${alias}(v, i)`,
    position: `${alias}.i`,
    field: (name) => `${alias}.v->>'${name}'`,
    number: (name) => `(${alias}.v->>'${name}')::bigint`,
  }),
  pageColumns: (columns) => columns.join(", "),
  countColumn: "count(*)::int AS n",
  placeholders: numbered,
};

/** The first row of a statement, or null. */
export async function one<R>(q: Queryable, sql: string, params: unknown[]): Promise<R | null> {
  const { rows } = await q.query<R>(numbered(sql), params);
  return rows[0] ?? null;
}

/**
 * One page of records, whether more follow, and the total count (skipped
 * when the caller knows it: query.knownTotal), as listSql builds them; the
 * page and the count run at once.
 */
export async function listRecords<TOrder extends string, TRow, TRecord>(
  q: Queryable,
  spec: TableSpec<TOrder>,
  query: ListQuery<unknown, TOrder>,
  filters: Clause[],
  toRecord: (row: TRow) => TRecord,
): Promise<ListResult<TRecord>> {
  const { count, page } = listSql(POSTGRES_DIALECT, spec, query, filters);
  const counted = async () => query.knownTotal ?? (await q.query<{ n: number }>(count.sql, count.params)).rows[0]!.n;
  const [rows, totalCount] = await Promise.all([q.query<TRow>(page.sql, page.params).then((r) => r.rows), counted()]);
  const hasMore = rows.length > query.limit;
  if (hasMore) rows.length = query.limit;
  return { items: rows.map(toRecord), hasMore, totalCount };
}

/** True when the statement returns a row. */
export async function exists(q: Queryable, sql: string, params: unknown[]): Promise<boolean> {
  return (await one(q, sql, params)) !== null;
}

/** Inserts one row: columns named by the object's keys (snake_case), values in order. */
export async function insertRow(q: Queryable, table: string, row: Record<string, unknown>): Promise<void> {
  const columns = Object.keys(row);
  await q.query(
    `INSERT INTO ${table} (${columns.join(", ")}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})`,
    Object.values(row),
  );
}

/** Sets the given columns of the row with this uid. */
export async function updateRow(q: Queryable, table: string, uid: string, row: Record<string, unknown>): Promise<void> {
  const columns = Object.keys(row);
  await q.query(`UPDATE ${table} SET ${columns.map((c, i) => `${c} = $${i + 2}`).join(", ")} WHERE uid = $1`, [uid, ...Object.values(row)]);
}
