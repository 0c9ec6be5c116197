import type { Database, Statement } from "better-sqlite3";
import { ancestorsOf } from "../../domain/uidp.js";
import { exact, type Clause } from "../rows/table.js";
import type { HierarchyFilter, ListQuery, ListResult } from "../store.js";
import { listStatements, singleTopClause, type VisibilityPlan } from "../visibility.js";

export { exact, type Clause };

/** How a table is listed: its select list and the column behind each order field. */
export interface ListableTable<TOrder extends string> {
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

/**
 * Runs keyset-paged lists, counts and reads by uid against one connection.
 * Statements are prepared once per query shape (list-valued parameters
 * travel as JSON, so the SQL text depends only on which filters are
 * present). Nothing is cached here: CachingStore does that for every engine.
 */
export class ListRunner {
  private readonly statements = new Map<string, Statement>();
  private readonly columns = new Map<string, readonly string[]>();

  constructor(private readonly db: Database) {}

  /** The record with this uid, or null: `stmt` selects the table's select list by uid. */
  one<TRow, TRecord>(stmt: Statement, uid: string, toRecord: (row: TRow) => TRecord): TRecord | null {
    const row = stmt.get(uid) as TRow | undefined;
    return row === undefined ? null : toRecord(row);
  }

  /**
   * One page of records, whether more follow, and the total count
   * (query.knownTotal when given). A narrowed query reads only the index
   * ranges of the caller's tops (see planVisibility): its cost follows the
   * rows the caller may see, never the table's other rows, and its
   * statement is the same whatever the number of tops.
   */
  records<TOrder extends string, TRow, TRecord>(
    spec: ListableTable<TOrder>,
    query: ListQuery<unknown, TOrder>,
    filters: Clause[],
    toRecord: (row: TRow) => TRecord,
  ): ListResult<TRecord> {
    const { counted, page, order } = listStatements(spec, query, filters, visibleRows);
    // Each row travels as one JSON array: better-sqlite3 spends ~0.4 µs on every
    // value it hands to JavaScript, JSON.parse a fraction of that.
    const select = this.columnsOf(spec.select)
      .map((c) => `t.${c}`)
      .join(", ");
    const sql = `SELECT json_array(${select}) FROM ${page.from} WHERE ${page.where} ORDER BY ${order} LIMIT ? OFFSET ?`;

    const totalCount =
      query.knownTotal ?? (this.run(`SELECT count(*) FROM ${counted.from} WHERE ${counted.where}`, counted.params, "get") as number);
    const texts = this.run(sql, page.params, "all") as string[];
    const hasMore = texts.length > query.limit;
    if (hasMore) texts.length = query.limit;
    const columns = this.columnsOf(spec.select);
    const items = texts.map((text) => {
      const values = JSON.parse(text) as unknown[];
      const row: Record<string, unknown> = {};
      for (let i = 0; i < columns.length; i++) row[columns[i]!] = values[i];
      return toRecord(row as TRow);
    });
    return { items, hasMore, totalCount };
  }

  private run(sql: string, params: unknown[], mode: "get" | "all"): unknown {
    const stmt = this.prepare(sql, true);
    return mode === "get" ? stmt.get(...params) : stmt.all(...params);
  }

  /** The column names of a plain select list ("uid, parent_uid, ..."). */
  private columnsOf(select: string): readonly string[] {
    let columns = this.columns.get(select);
    if (!columns) {
      columns = select.split(",").map((c) => c.trim());
      if (!columns.every((c) => /^[a-z_][a-z0-9_]*$/.test(c))) throw new Error(`select list must name plain columns: ${select}`);
      this.columns.set(select, columns);
    }
    return columns;
  }

  private prepare(sql: string, pluck = false): Statement {
    let stmt = this.statements.get(sql);
    if (!stmt) {
      stmt = this.db.prepare(sql).pluck(pluck);
      this.statements.set(sql, stmt);
    }
    return stmt;
  }
}

/** The FROM and WHERE of a list's rows under a visibility plan, with their parameters in text order. */
function visibleRows(table: string, plan: VisibilityPlan, query: ListQuery<unknown, string>, filters: Clause[]) {
  const { from, where } = rowSource(table, plan);
  where.push(...hierarchyClauses(query.hierarchy), ...filters);
  return {
    from: from.sql,
    where: where.map((c) => `(${c.sql})`).join(" AND ") || "1",
    params: [...from.params, ...where.flatMap((c) => c.params)],
  };
}

/** The UIDPFilter as SQL over t.uid and t.parent_uid; descendants are an index range scan. */
function hierarchyClauses(h: HierarchyFilter): Clause[] {
  const out: Clause[] = [];
  if (h.descendantsOf !== undefined) {
    // Every descendant of p sorts between p + "/" and p + "0" ("0" follows "/").
    out.push({ sql: "t.uid > ? AND t.uid < ?", params: [`${h.descendantsOf}/`, `${h.descendantsOf}0`] });
  }
  if (h.childrenOf !== undefined) out.push({ sql: "t.parent_uid = ?", params: [h.childrenOf] });
  if (h.ancestorsOf !== undefined) {
    out.push({
      sql: "t.uid IN (SELECT value FROM json_each(?))",
      params: [JSON.stringify(ancestorsOf(h.ancestorsOf))],
    });
  }
  if (h.inRoot) out.push({ sql: "t.parent_uid IS NULL", params: [] });
  if (h.ids !== undefined) out.push({ sql: "t.uid IN (SELECT value FROM json_each(?))", params: [JSON.stringify(h.ids)] });
  return out;
}

/**
 * The FROM of a list and the WHERE clauses visibility adds. Several tops
 * drive the query: one range scan of the primary key per top, the tops
 * passed as one JSON parameter (CROSS JOIN keeps them the outer loop), so
 * the statement and its parameters are the same for 2 tops or 20,000. One
 * top is a plain range, which lets the planner walk an order index and stop
 * at the page's end.
 */
function rowSource(table: string, plan: VisibilityPlan): { from: Clause; where: Clause[] } {
  const plain = { from: { sql: `${table} AS t`, params: [] }, where: [] as Clause[] };
  if (plan.kind === "all") return plain;
  const { tops, roots } = plan;
  if (tops.length <= 1) return { ...plain, where: [singleTopClause(tops[0], roots, "0")] };
  const joined = `json_each(?) AS v CROSS JOIN ${table} AS t ON t.uid >= v.value AND t.uid < v.value || '0'`;
  const params = [JSON.stringify(tops)];
  if (!roots) return { from: { sql: joined, params }, where: [] };
  // Root-level rows (built-in roles) are added to the tops' rows, each once.
  const sql = `(SELECT t.* FROM ${joined} WHERE t.parent_uid IS NOT NULL UNION ALL SELECT * FROM ${table} WHERE parent_uid IS NULL) AS t`;
  return { from: { sql, params }, where: [] };
}
