import { invalidField } from "../../domain/errors.js";
import type { Cursor, HierarchyFilter, ListQuery, ListResult } from "../../store/store.js";
import { PageTokenSealer } from "./page-token.js";

const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 200;

/** The paging fields every List request carries (AIP-158 plus skip). */
export interface PageRequest {
  pageSize: number;
  pageToken: string;
  orderBy: string;
  skip: number;
}

/** How one List orders and pages, declared by its service. */
export interface PagingSpec<TOrder extends string> {
  /** order_by field names the List accepts. */
  orderFields: readonly TOrder[];
  /** The order when order_by is empty, e.g. "uid" or "created_at desc". */
  defaultOrder: string;
}

/** A validated page request, ready for the store. */
export interface PagePlan<TOrder extends string> {
  order: { field: TOrder; desc: boolean };
  after: Cursor | null;
  offset: number;
  limit: number;
  /** skipped to report: accumulated from the token plus this request's skip. */
  skipped: number;
  /** This request's skip parameter, remembered in the next token. */
  requestSkip: number;
  queryHash: string;
}

/** The paging fields of every List response. */
export interface PageEnvelope {
  nextPageToken: string;
  totalCount: bigint;
  skipped: number;
}

/** Parses "field" or "field asc|desc"; throws INVALID_ARGUMENT on anything else. */
function parseOrderBy<TOrder extends string>(orderBy: string, spec: PagingSpec<TOrder>): { field: TOrder; desc: boolean } {
  const text = orderBy.trim() === "" ? spec.defaultOrder : orderBy.trim();
  const parts = text.split(/\s+/);
  const field = parts[0] as TOrder;
  const dir = (parts[1] ?? "asc").toLowerCase();
  if (parts.length > 2 || !spec.orderFields.includes(field) || (dir !== "asc" && dir !== "desc")) {
    throw invalidField("order_by", `must be one of ${spec.orderFields.join(", ")}, optionally followed by " asc" or " desc"`);
  }
  return { field, desc: dir === "desc" };
}

/**
 * Validates page size, skip, order and token. A token older than three days
 * restarts the query silently; a tampered token, or one from another query,
 * is INVALID_ARGUMENT.
 */
export function planPage<TOrder extends string>(
  req: PageRequest,
  spec: PagingSpec<TOrder>,
  sealer: PageTokenSealer,
  queryKey: unknown,
): PagePlan<TOrder> {
  if (req.pageSize < 0) throw invalidField("page_size", "must not be negative");
  if (req.skip < 0) throw invalidField("skip", "must not be negative");
  const order = parseOrderBy(req.orderBy, spec);
  const limit = req.pageSize === 0 ? DEFAULT_PAGE_SIZE : Math.min(req.pageSize, MAX_PAGE_SIZE);
  const queryHash = PageTokenSealer.queryHash([queryKey, order.field, order.desc]);
  let after: Cursor | null = null;
  let skippedBefore = 0;
  let offset = req.skip;
  if (req.pageToken !== "") {
    const opened = sealer.open(req.pageToken, queryHash);
    if (opened.ok) {
      after = opened.state.after;
      skippedBefore = opened.state.skipped;
      // The spec has clients repeat every other parameter with the
      // token: a repeated skip was already applied, so it must not skip again.
      // A different skip jumps that far from the cursor (random access).
      if (req.skip === opened.state.lastSkip) offset = 0;
    } else if (opened.reason === "mismatch") {
      throw invalidField("page_token", "belongs to a different query; repeat the same filters and order_by");
    } else if (opened.reason === "invalid") {
      throw invalidField("page_token", "is not a token this server issued");
    }
  }
  return { order, after, offset, limit, skipped: skippedBefore + offset, requestSkip: req.skip, queryHash };
}

/** Builds the response envelope: a sealed token for the next page, the count, and skipped. */
export function pageEnvelope<T, TOrder extends string>(
  plan: PagePlan<TOrder>,
  result: ListResult<T>,
  cursorOf: (item: T, field: TOrder) => Cursor,
  sealer: PageTokenSealer,
): PageEnvelope {
  const last = result.items[result.items.length - 1];
  const nextPageToken =
    result.hasMore && last !== undefined
      ? sealer.seal(cursorOf(last, plan.order.field), plan.skipped, plan.requestSkip, plan.queryHash)
      : "";
  return { nextPageToken, totalCount: BigInt(result.totalCount), skipped: plan.skipped };
}

/** The most items one v1 list returns; v1 lists have no paging. */
const V1_LIST_LIMIT = 10_000;

/**
 * The store query of a v1 list (no paging, uid order, at most V1_LIST_LIMIT):
 * the hierarchy filter, narrowed to one uid when the v1 `id` filter is given.
 */
export function v1ListQuery<TFilter>(
  hierarchy: HierarchyFilter,
  id: string | null,
  filter: TFilter,
  visibleWithin: readonly string[] | null,
): ListQuery<TFilter, "uid"> {
  return {
    hierarchy: id === null ? hierarchy : { ...hierarchy, ids: [id] },
    filter,
    order: { field: "uid", desc: false },
    after: null,
    offset: 0,
    limit: V1_LIST_LIMIT,
    visibleWithin,
  };
}
