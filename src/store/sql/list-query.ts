import type { HierarchyFilter } from "../../domain/hierarchy-filter.js";

/** A keyset position: the order column's value and the uid of the last item returned. */
export interface Cursor {
  key: string | number;
  uid: string;
}

/** One page request against a store list. */
export interface ListQuery<TFilter, TOrder extends string> {
  hierarchy: HierarchyFilter;
  filter: TFilter;
  order: { field: TOrder; desc: boolean };
  /** Exclusive keyset position; null starts at the beginning. */
  after: Cursor | null;
  /** Items to skip after the position, before the page. */
  offset: number;
  /** Maximum items on the page. */
  limit: number;
  /**
   * Authorization narrowing: only records at or below one of these uids.
   * null means no narrowing (an administrator).
   */
  visibleWithin: readonly string[] | null;
  /**
   * The total count of this query's matches (its hierarchy, filter and
   * visibility), when the caller knows it for the current data: the engine
   * returns it as totalCount instead of counting again.
   */
  knownTotal?: number;
}

/** One page of a store list. */
export interface ListResult<T> {
  items: T[];
  /** True when at least one more item follows the page. */
  hasMore: boolean;
  /** Every record matching the filters and visibility, ignoring position, offset and limit. */
  totalCount: number;
}
