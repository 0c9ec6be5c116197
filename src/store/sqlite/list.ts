import type { Database, Statement } from "better-sqlite3";
import { ancestorsOf } from "../../domain/uidp.js";
import type { HierarchyFilter, ListQuery, ListResult } from "../store.js";
import { QueryCache } from "../query-cache.js";
import { exact, keysetClause, type Clause } from "../rows/table.js";

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
  /**
   * Other processes write this table (the CLI's advisory importer): lists check
   * SQLite's data_version first, which costs a read transaction of its own.
   */
  writtenElsewhere?: boolean;
}

/** Cached counts, by number of queries. */
const COUNT_CACHE_ENTRIES = 2048;
/** Cached pages, by bytes of row text (records take a small multiple of it). */
const PAGE_CACHE_BYTES = 8 * 1024 * 1024;
/** Cached single records, by bytes of their text columns. */
const RECORD_CACHE_BYTES = 8 * 1024 * 1024;

/**
 * Runs keyset-paged lists, counts and reads by uid against one connection. Statements are
 * prepared once per query shape (list-valued parameters travel as JSON, so
 * the SQL text depends only on which filters are present). Counts, pages and
 * records by uid are cached until the next write to their table: a page or a
 * resource polled by many callers costs one query per change, not one per
 * call. Every store write calls touched() for each table it changes
 * (cascades included); tables another process writes also check data_version.
 */
export class ListRunner {
  private readonly statements = new Map<string, Statement>();
  private readonly counts = new QueryCache<number>(COUNT_CACHE_ENTRIES);
  /** Pages as ListResults of frozen records, shared by every caller that asks the same query. */
  readonly pages = new QueryCache<ListResult<unknown>>(PAGE_CACHE_BYTES);
  /** Single records by uid (null for none), frozen like pages. */
  readonly byUid = new QueryCache<{ record: unknown }>(RECORD_CACHE_BYTES);
  private readonly versions = new Map<string, number>();
  private readonly columns = new Map<string, readonly string[]>();
  private readonly dataVersion: Statement;
  private seenDataVersion = -1;
  /** Moves on every commit of another connection seen by a list of a table written elsewhere. */
  private externalVersion = 0;

  constructor(private readonly db: Database) {
    this.dataVersion = db.prepare("PRAGMA data_version").pluck();
  }

  /** Marks a table as written, so cached counts, pages and records of it are not reused. */
  touched(table: string): void {
    this.versions.set(table, (this.versions.get(table) ?? 0) + 1);
  }

  /**
   * The record with this uid, or null: `stmt` selects spec.select by uid.
   * Cached, and frozen, like pages until the table is written.
   */
  one<TRow, TRecord>(spec: ListableTable<string>, stmt: Statement, uid: string, toRecord: (row: TRow) => TRecord): TRecord | null {
    if (spec.writtenElsewhere) this.noticeOtherConnections();
    const key = `${this.versionOf(spec.table)}\u0000${spec.table}\u0000${uid}`;
    const cached = this.byUid.get(key);
    if (cached) return cached.record as TRecord | null;
    const row = stmt.get(uid) as TRow | undefined;
    const record = row === undefined ? null : Object.freeze(toRecord(row));
    if (!this.db.inTransaction) {
      let bytes = key.length;
      for (const value of Object.values(row ?? {})) if (typeof value === "string") bytes += value.length;
      this.byUid.set(key, { record }, bytes);
    }
    return record;
  }

  /**
   * One page of records, whether more follow, and the total count. Records
   * are frozen: a cached page is shared by every caller that asks for it.
   */
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

    if (spec.writtenElsewhere) this.noticeOtherConnections();
    const key = this.cacheKey(spec.table, sql, pageParams);
    const cached = this.pages.get(key);
    if (cached) return cached as ListResult<TRecord>;

    const totalCount = this.count(spec.table, base, baseParams);
    const texts = this.prepare(sql, true).all(...pageParams) as string[];
    const hasMore = texts.length > query.limit;
    if (hasMore) texts.length = query.limit;
    const columns = this.columnsOf(spec.select);
    let bytes = 0;
    const items = texts.map((text) => {
      bytes += text.length;
      const values = JSON.parse(text) as unknown[];
      const row: Record<string, unknown> = {};
      for (let i = 0; i < columns.length; i++) row[columns[i]!] = values[i];
      return Object.freeze(toRecord(row as TRow));
    });
    const result: ListResult<TRecord> = Object.freeze({ items: Object.freeze(items) as TRecord[], hasMore, totalCount });
    // A result read inside an open transaction may include writes that roll back.
    if (!this.db.inTransaction) this.pages.set(key, result, bytes + key.length);
    return result;
  }

  /** Where a table's data stands: cache keys carry it, so a write makes every older entry unreachable. */
  private versionOf(table: string): string {
    return `${this.externalVersion}.${this.versions.get(table) ?? 0}`;
  }

  private cacheKey(table: string, sql: string, params: unknown[]): string {
    return `${this.versionOf(table)}\u0000${sql}\u0000${JSON.stringify(params)}`;
  }

  /**
   * Notices commits by other connections (other worker processes, the CLI),
   * which no touched() call announces: every cached entry is dropped when
   * there was one. Returns whether there was.
   */
  noticeOtherConnections(): boolean {
    const version = this.dataVersion.get() as number;
    if (version === this.seenDataVersion) return false;
    const first = this.seenDataVersion === -1;
    this.seenDataVersion = version;
    if (first) return false;
    this.externalVersion++;
    return true;
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

  private count(table: string, where: string, params: unknown[]): number {
    const sql = `SELECT count(*) AS n FROM ${table} AS t WHERE ${where}`;
    const key = this.cacheKey(table, sql, params);
    const cached = this.counts.get(key);
    if (cached !== undefined) return cached;
    const n = (this.prepare(sql).get(...params) as { n: number }).n;
    // A count taken inside an open transaction may include writes that roll back.
    if (!this.db.inTransaction) this.counts.set(key, n);
    return n;
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
  const atOrBelow =
    "EXISTS (SELECT 1 FROM json_each(?) AS v WHERE t.uid = v.value OR (t.uid > v.value || '/' AND t.uid < v.value || '0'))";
  const sql = rootsVisible && within.length > 0 ? `t.parent_uid IS NULL OR ${atOrBelow}` : atOrBelow;
  return { sql, params: [JSON.stringify(within)] };
}

