import { ancestorsOf } from "../../domain/uidp.js";
import { exact, keysetClause, type Clause } from "../rows/table.js";
import type { HierarchyFilter, ListQuery, ListResult } from "../store.js";

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
 * (query.knownTotal).
 */
export async function listRecords<TOrder extends string, TRow, TRecord>(
  q: Queryable,
  spec: PgTable<TOrder>,
  query: ListQuery<unknown, TOrder>,
  filters: Clause[],
  toRecord: (row: TRow) => TRecord,
): Promise<ListResult<TRecord>> {
  const where = [...hierarchyClauses(query.hierarchy), ...filters];
  if (query.visibleWithin !== null) where.push(visibilityClause(query.visibleWithin, spec.rootsVisible === true));
  const column = spec.orderColumns[query.order.field];
  const dir = query.order.desc ? "DESC" : "ASC";
  const base = where.map((c) => `(${c.sql})`).join(" AND ") || "TRUE";
  const baseParams = where.flatMap((c) => c.params);
  let pageWhere = base;
  const pageParams = [...baseParams];
  if (query.after) {
    const keyset = keysetClause(column, query.order.desc, query.after);
    pageWhere = `${base} AND ${keyset.sql}`;
    pageParams.push(...keyset.params);
  }
  pageParams.push(query.limit + 1, query.offset);
  const order = column === "uid" ? `t.uid ${dir}` : `t.${column} ${dir}, t.uid ${dir}`;
  const count = async () =>
    query.knownTotal ??
    (await q.query<{ n: number }>(numbered(`SELECT count(*)::int AS n FROM ${spec.table} AS t WHERE ${base}`), baseParams)).rows[0]!.n;
  const [page, totalCount] = await Promise.all([
    q.query<TRow>(
      numbered(`SELECT ${spec.select} FROM ${spec.table} AS t WHERE ${pageWhere} ORDER BY ${order} LIMIT ? OFFSET ?`),
      pageParams,
    ),
    count(),
  ]);
  const rows = page.rows;
  const hasMore = rows.length > query.limit;
  if (hasMore) rows.length = query.limit;
  return { items: rows.map(toRecord), hasMore, totalCount };
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
 * At or below one of the uids, written out per uid (each an equality or a
 * range on the primary key), so the planner combines index scans rather
 * than scanning the table: the list is the caller's top grants, a handful.
 */
function visibilityClause(within: readonly string[], rootsVisible: boolean): Clause {
  if (within.length === 0) return { sql: "FALSE", params: [] };
  const atOrBelow = within.map(() => "t.uid = ? OR (t.uid > ? AND t.uid < ?)").join(" OR ");
  const params = within.flatMap((u) => [u, `${u}/`, `${u}0`]);
  return rootsVisible ? { sql: `t.parent_uid IS NULL OR ${atOrBelow}`, params } : { sql: atOrBelow, params };
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
