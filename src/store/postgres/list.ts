import { ancestorsOf } from "../../domain/uidp.js";
import { exact, type Clause } from "../rows/table.js";
import type { HierarchyFilter, ListQuery, ListResult } from "../store.js";
import { listStatements, singleTopClause, type VisibilityPlan } from "../visibility.js";

export { exact, type Clause };

/** What runs a statement: the pool, or the client of an open transaction. */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** How a table is listed: its select list and the column behind each order field. */
export interface PgTable<TOrder extends string> {
  table: string;
  select: string;
  orderColumns: Record<TOrder, string>;
  /** Root-level rows (parent_uid NULL) are visible to every narrowed query that names at least one group. */
  rootsVisible?: boolean;
}

/** Numbers the "?" placeholders of sql as $1, $2, … in order. */
export function numbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

/** The first row of a statement, or null. */
export async function one<R>(q: Queryable, sql: string, params: unknown[]): Promise<R | null> {
  const { rows } = await q.query<R>(numbered(sql), params);
  return rows[0] ?? null;
}

/**
 * One page of records, whether more follow, and the total count: keyset
 * paging on (order column, uid), every key "C"-collated so the order is the
 * byte order SQLite uses too. The count is skipped when the caller knows it
 * (query.knownTotal). A narrowed query reads only the index ranges of the
 * caller's tops (see planVisibility): its cost follows the rows the caller
 * may see, and its statement and parameter count are the same whatever the
 * number of tops.
 */
export async function listRecords<TOrder extends string, TRow, TRecord>(
  q: Queryable,
  spec: PgTable<TOrder>,
  query: ListQuery<unknown, TOrder>,
  filters: Clause[],
  toRecord: (row: TRow) => TRecord,
): Promise<ListResult<TRecord>> {
  const { counted, page: paged, order } = listStatements(spec, query, filters, visibleRows);
  const select = spec.select
    .split(",")
    .map((c) => `t.${c.trim()}`)
    .join(", ");
  const count = async () =>
    query.knownTotal ??
    (await q.query<{ n: number }>(numbered(`SELECT count(*)::int AS n FROM ${counted.from} WHERE ${counted.where}`), counted.params))
      .rows[0]!.n;
  const [page, totalCount] = await Promise.all([
    q.query<TRow>(numbered(`SELECT ${select} FROM ${paged.from} WHERE ${paged.where} ORDER BY ${order} LIMIT ? OFFSET ?`), paged.params),
    count(),
  ]);
  const rows = page.rows;
  const hasMore = rows.length > query.limit;
  if (hasMore) rows.length = query.limit;
  return { items: rows.map(toRecord), hasMore, totalCount };
}

/** The FROM and WHERE of a list's rows under a visibility plan, with their parameters in text order. */
function visibleRows(table: string, plan: VisibilityPlan, query: ListQuery<unknown, string>, filters: Clause[]) {
  const { from, where } = rowSource(table, plan);
  where.push(...hierarchyClauses(query.hierarchy), ...filters);
  return {
    from: from.sql,
    where: where.map((c) => `(${c.sql})`).join(" AND ") || "TRUE",
    params: [...from.params, ...where.flatMap((c) => c.params)],
  };
}

/** The UIDPFilter over t.uid and t.parent_uid; descendants are an index range scan. */
function hierarchyClauses(h: HierarchyFilter): Clause[] {
  const out: Clause[] = [];
  // Every descendant of p sorts between p + "/" and p + "0" ("0" follows "/").
  if (h.descendantsOf !== undefined) out.push({ sql: "t.uid > ? AND t.uid < ?", params: [`${h.descendantsOf}/`, `${h.descendantsOf}0`] });
  if (h.childrenOf !== undefined) out.push({ sql: "t.parent_uid = ?", params: [h.childrenOf] });
  if (h.ancestorsOf !== undefined) out.push({ sql: "t.uid = ANY(?::text[])", params: [ancestorsOf(h.ancestorsOf)] });
  if (h.inRoot) out.push({ sql: "t.parent_uid IS NULL", params: [] });
  if (h.ids !== undefined) out.push({ sql: "t.uid = ANY(?::text[])", params: [[...h.ids]] });
  return out;
}

/**
 * The FROM of a list and the WHERE clauses visibility adds. Several tops
 * drive the query as one array parameter: a nested loop reading one range
 * of the primary key per top (never an OR of 3 parameters per top, which
 * planned in time quadratic in the tops and passed PostgreSQL's 65,535
 * parameters at ~21,800 of them). One top is a plain range, which lets the
 * planner walk an order index and stop at the page's end.
 */
function rowSource(table: string, plan: VisibilityPlan): { from: Clause; where: Clause[] } {
  const plain = { from: { sql: `${table} AS t`, params: [] }, where: [] as Clause[] };
  if (plan.kind === "all") return plain;
  const { tops, roots } = plan;
  if (tops.length <= 1) return { ...plain, where: [singleTopClause(tops[0], roots, "FALSE")] };
  // OFFSET 0 keeps the lateral subquery a subquery: flattened, the planner may
  // walk an order index over the whole table and test every top per row.
  const range = `r.uid >= v.top COLLATE "C" AND r.uid < (v.top || '0') COLLATE "C"`;
  const joined = `unnest(?::text[]) AS v(top) CROSS JOIN LATERAL (SELECT * FROM ${table} AS r WHERE ${range} OFFSET 0) AS t`;
  if (!roots) return { from: { sql: joined, params: [tops] }, where: [] };
  // Root-level rows (built-in roles) are added to the tops' rows, each once.
  const sql = `(SELECT t.* FROM ${joined} WHERE t.parent_uid IS NOT NULL UNION ALL SELECT * FROM ${table} WHERE parent_uid IS NULL) AS t`;
  return { from: { sql, params: [tops] }, where: [] };
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
