import type { Database, Statement } from "better-sqlite3";
import { ancestorsOf } from "../../domain/uidp.js";
import { exact, keysetClause, type Clause } from "../rows/table.js";
import type { HierarchyFilter, ListQuery, ListResult } from "../store.js";

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

  /** One page of records, whether more follow, and the total count (query.knownTotal when given). */
  records<TOrder extends string, TRow, TRecord>(
    spec: ListableTable<TOrder>,
    query: ListQuery<unknown, TOrder>,
    filters: Clause[],
    toRecord: (row: TRow) => TRecord,
  ): ListResult<TRecord> {
    const where = [...hierarchyClauses(query.hierarchy), ...filters];
    if (query.visibleWithin !== null) where.push(visibilityClause(query.visibleWithin, spec.rootsVisible === true));
    const column = spec.orderColumns[query.order.field];
    const dir = query.order.desc ? "DESC" : "ASC";

    const base = where.map((c) => `(${c.sql})`).join(" AND ") || "1";
    const baseParams = where.flatMap((c) => c.params);
    let pageWhere = base;
    const pageParams = [...baseParams];
    if (query.after) {
      const keyset = keysetClause(column, query.order.desc, query.after);
      pageWhere = `${base} AND ${keyset.sql}`;
      pageParams.push(...keyset.params);
    }
    pageParams.push(query.limit + 1, query.offset);
    const order = column === "uid" ? `uid ${dir}` : `${column} ${dir}, uid ${dir}`;
    // Each row travels as one JSON array: better-sqlite3 spends ~0.4 µs on every
    // value it hands to JavaScript, JSON.parse a fraction of that.
    const sql = `SELECT json_array(${spec.select}) FROM ${spec.table} AS t WHERE ${pageWhere} ORDER BY ${order} LIMIT ? OFFSET ?`;

    const totalCount =
      query.knownTotal ?? (this.prepare(`SELECT count(*) FROM ${spec.table} AS t WHERE ${base}`, true).get(...baseParams) as number);
    const texts = this.prepare(sql, true).all(...pageParams) as string[];
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

function visibilityClause(within: readonly string[], rootsVisible: boolean): Clause {
  const atOrBelow = "EXISTS (SELECT 1 FROM json_each(?) AS v WHERE t.uid = v.value OR (t.uid > v.value || '/' AND t.uid < v.value || '0'))";
  const sql = rootsVisible && within.length > 0 ? `t.parent_uid IS NULL OR ${atOrBelow}` : atOrBelow;
  return { sql, params: [JSON.stringify(within)] };
}
