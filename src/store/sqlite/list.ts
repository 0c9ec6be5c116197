import type { Database, Statement } from "better-sqlite3";
import { listSql } from "../sql/list-sql.js";
import { exact, type Clause, type ListDialect, type TableSpec } from "../sql/table.js";
import type { ListQuery, ListResult } from "../store.js";

export { exact, type Clause };

/**
 * SQLite's list SQL: lists of values travel as one JSON parameter (read
 * with json_each), so the SQL text depends only on which filters are
 * present; booleans are 0 and 1.
 */
export const SQLITE_DIALECT: ListDialect = {
  always: "1",
  never: "0",
  listParam: (values) => JSON.stringify(values),
  inList: (expr) => `${expr} IN (SELECT value FROM json_each(?))`,
  // One range scan of the primary key per top; CROSS JOIN keeps the tops the outer loop.
  topsJoin: (table) => `json_each(?) AS v CROSS JOIN ${table} AS t ON t.uid >= v.value AND t.uid < v.value || '0'`,
  isFalse: (column) => `${column} = 0`,
  // LIKE ignores the case of ASCII letters.
  caselessLike: "LIKE",
  jsonArray: (column, alias) => {
    const rows = `json_each(${column}) AS ${alias}`;
    const field = (name: string) => `json_extract(${alias}.value, '$.${name}')`;
    return { texts: rows, text: `${alias}.value`, objects: rows, ordered: rows, position: `${alias}.key`, field, number: field };
  },
  // Each row travels as one JSON array: better-sqlite3 spends ~0.4 µs on every
  // value it hands to JavaScript, JSON.parse a fraction of that.
  pageColumns: (columns) => `json_array(${columns.join(", ")})`,
  countColumn: "count(*)",
  placeholders: (sql) => sql,
};

/**
 * Runs keyset-paged lists, counts and reads by uid against one connection.
 * Statements are prepared once per query shape. Nothing is cached here:
 * CachingStore does that for every engine.
 */
export class ListRunner {
  private readonly statements = new Map<string, Statement>();

  constructor(private readonly db: Database) {}

  /** The record with this uid, or null: `stmt` selects the table's select list by uid. */
  one<TRow, TRecord>(stmt: Statement, uid: string, toRecord: (row: TRow) => TRecord): TRecord | null {
    const row = stmt.get(uid) as TRow | undefined;
    return row === undefined ? null : toRecord(row);
  }

  /**
   * One page of records, whether more follow, and the total count
   * (query.knownTotal when given), as listSql builds them.
   */
  records<TOrder extends string, TRow, TRecord>(
    spec: TableSpec<TOrder>,
    query: ListQuery<unknown, TOrder>,
    filters: Clause[],
    toRecord: (row: TRow) => TRecord,
  ): ListResult<TRecord> {
    const { count, page, columns } = listSql(SQLITE_DIALECT, spec, query, filters);
    const totalCount = query.knownTotal ?? (this.prepare(count.sql).get(...count.params) as number);
    const texts = this.prepare(page.sql).all(...page.params) as string[];
    const hasMore = texts.length > query.limit;
    if (hasMore) texts.length = query.limit;
    const items = texts.map((text) => {
      const values = JSON.parse(text) as unknown[];
      const row: Record<string, unknown> = {};
      for (let i = 0; i < columns.length; i++) row[columns[i]!] = values[i];
      return toRecord(row as TRow);
    });
    return { items, hasMore, totalCount };
  }

  private prepare(sql: string): Statement {
    let stmt = this.statements.get(sql);
    if (!stmt) {
      stmt = this.db.prepare(sql).pluck(true);
      this.statements.set(sql, stmt);
    }
    return stmt;
  }
}
