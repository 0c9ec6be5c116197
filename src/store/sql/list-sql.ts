import { ancestorsOf } from "../../domain/uidp.js";
import type { HierarchyFilter, ListQuery } from "../store.js";
import { keysetClause, type Clause, type ListDialect, type TableSpec } from "./table.js";
import { pastCursor, planVisibility, topRange, type VisibilityPlan } from "./visibility.js";

/** The statements of one list page. */
export interface ListSql {
  /** The count of every visible match, the position ignored (not run when the query knows it: knownTotal). */
  count: Clause;
  /** The page: one row more than the limit, to tell whether more follow. */
  page: Clause;
  /** The columns of the select list, in order. */
  columns: readonly string[];
}

const COLUMNS = new Map<string, readonly string[]>();

/** The column names of a plain select list ("uid, parent_uid, ..."). */
function columnsOf(select: string): readonly string[] {
  let columns = COLUMNS.get(select);
  if (!columns) {
    columns = select.split(",").map((c) => c.trim());
    if (!columns.every((c) => /^[a-z_][a-z0-9_]*$/.test(c))) throw new Error(`select list must name plain columns: ${select}`);
    COLUMNS.set(select, columns);
  }
  return columns;
}

/**
 * The statements of one list page, on either engine: keyset paging on (order
 * column, uid), the count over every visible row, and the page, which in uid
 * order reads only the tops past its cursor. A narrowed query reads only the
 * index ranges of the caller's tops (planVisibility): its cost follows the
 * rows the caller may see, never the table's other rows, and its statement
 * text and parameter count are the same whatever the number of tops.
 */
export function listSql<TOrder extends string>(
  dialect: ListDialect,
  spec: TableSpec<TOrder>,
  query: ListQuery<unknown, TOrder>,
  filters: readonly Clause[],
): ListSql {
  const column = spec.orderColumns[query.order.field];
  const dir = query.order.desc ? "DESC" : "ASC";
  const plan = planVisibility(query.visibleWithin, query.hierarchy, spec.rootsVisible === true);
  const counted = visibleRows(dialect, spec.table, plan, query.hierarchy, filters);
  const paged =
    column === "uid" && query.after
      ? visibleRows(dialect, spec.table, pastCursor(plan, query.after, query.order.desc), query.hierarchy, filters)
      : counted;
  let where = paged.where;
  const params = [...paged.params];
  if (query.after) {
    const keyset = keysetClause(column, query.order.desc, query.after);
    where = `${paged.where} AND ${keyset.sql}`;
    params.push(...keyset.params);
  }
  params.push(query.limit + 1, query.offset);
  const order = column === "uid" ? `t.uid ${dir}` : `t.${column} ${dir}, t.uid ${dir}`;
  const columns = columnsOf(spec.select);
  const select = dialect.pageColumns(columns.map((c) => `t.${c}`));
  return {
    count: {
      sql: dialect.placeholders(`SELECT ${dialect.countColumn} FROM ${counted.from} WHERE ${counted.where}`),
      params: counted.params,
    },
    page: { sql: dialect.placeholders(`SELECT ${select} FROM ${paged.from} WHERE ${where} ORDER BY ${order} LIMIT ? OFFSET ?`), params },
    columns,
  };
}

/** The FROM and WHERE of a list's rows under a visibility plan, with their parameters in text order. */
function visibleRows(dialect: ListDialect, table: string, plan: VisibilityPlan, hierarchy: HierarchyFilter, filters: readonly Clause[]) {
  const { from, where } = rowSource(dialect, table, plan);
  where.push(...hierarchyClauses(dialect, hierarchy), ...filters);
  return {
    from: from.sql,
    where: where.map((c) => `(${c.sql})`).join(" AND ") || dialect.always,
    params: [...from.params, ...where.flatMap((c) => c.params)],
  };
}

/** The UIDPFilter over t.uid and t.parent_uid; descendants are an index range scan. */
function hierarchyClauses(dialect: ListDialect, h: HierarchyFilter): Clause[] {
  const out: Clause[] = [];
  // Every descendant of p sorts between p + "/" and p + "0" ("0" follows "/").
  if (h.descendantsOf !== undefined) out.push({ sql: "t.uid > ? AND t.uid < ?", params: [`${h.descendantsOf}/`, `${h.descendantsOf}0`] });
  if (h.childrenOf !== undefined) out.push({ sql: "t.parent_uid = ?", params: [h.childrenOf] });
  if (h.ancestorsOf !== undefined) out.push({ sql: dialect.inList("t.uid"), params: [dialect.listParam(ancestorsOf(h.ancestorsOf))] });
  if (h.inRoot) out.push({ sql: "t.parent_uid IS NULL", params: [] });
  if (h.ids !== undefined) out.push({ sql: dialect.inList("t.uid"), params: [dialect.listParam(h.ids)] });
  return out;
}

/**
 * The FROM of a list and the WHERE clauses visibility adds. Several tops
 * drive the query as one parameter (the dialect's topsJoin), so the
 * statement and its parameters are the same for 2 tops or 20,000 (never an
 * OR of parameters per top, which PostgreSQL planned in time quadratic in
 * the tops and refused past 65,535 parameters). One top is a plain range,
 * which lets the planner walk an order index and stop at the page's end.
 */
function rowSource(dialect: ListDialect, table: string, plan: VisibilityPlan): { from: Clause; where: Clause[] } {
  const plain = { from: { sql: `${table} AS t`, params: [] }, where: [] as Clause[] };
  if (plan.kind === "all") return plain;
  const { tops, roots } = plan;
  if (tops.length <= 1) return { ...plain, where: [singleTopClause(tops[0], roots, dialect.never)] };
  const joined = dialect.topsJoin(table);
  const params = [dialect.listParam(tops)];
  if (!roots) return { from: { sql: joined, params }, where: [] };
  // Root-level rows (built-in roles) are added to the tops' rows, each once.
  const sql = `(SELECT t.* FROM ${joined} WHERE t.parent_uid IS NOT NULL UNION ALL SELECT * FROM ${table} WHERE parent_uid IS NULL) AS t`;
  return { from: { sql, params }, where: [] };
}

/**
 * The WHERE clause of a plan with at most one top: a plain range on the uid,
 * or root-level rows too when roots; never is the engine's false.
 */
function singleTopClause(top: string | undefined, roots: boolean, never: string): Clause {
  const inTop = top === undefined ? null : { sql: "t.uid >= ? AND t.uid < ?", params: topRange(top) };
  if (roots) return { sql: `t.parent_uid IS NULL${inTop ? ` OR (${inTop.sql})` : ""}`, params: inTop?.params ?? [] };
  return inTop ?? { sql: never, params: [] };
}
