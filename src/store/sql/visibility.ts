import { topsOf } from "../../domain/uid-tops.js";
import { ancestorsOf, isAncestor, isAtOrBelow, parentOf } from "../../domain/uidp.js";
import type { Cursor, HierarchyFilter } from "../store.js";

/**
 * How a narrowed list finds the rows a caller may see, decided before any
 * SQL so its cost never depends on rows outside the caller's reach:
 * - "all": the hierarchy filter already lies inside one of the caller's
 *   tops, so there is nothing to narrow (the query runs as an
 *   administrator's would);
 * - "tops": rows at or below one of `tops` (sorted, none below another),
 *   and root-level rows too when `roots`. Each engine reads one index range
 *   per top (a join driven by the tops, one parameter however many there
 *   are), never the table's other rows;
 * - an empty `tops` without `roots` sees nothing.
 */
export type VisibilityPlan = { kind: "all" } | { kind: "tops"; tops: readonly string[]; roots: boolean };

/**
 * The visibility of a list: `within` (the caller's grants, in any form)
 * reduced to its tops and then to the tops that can hold a row matching the
 * hierarchy filter and lying past the uid cursor. Linear in `within` after
 * one sort; null `within` (an administrator) is "all".
 */
export function planVisibility(within: readonly string[] | null, hierarchy: HierarchyFilter, rootsVisible: boolean): VisibilityPlan {
  if (within === null) return { kind: "all" };
  // Root-level rows (built-in roles) are visible to a caller with any grant at all.
  const roots = rootsVisible && within.length > 0;
  let tops = topsOf(within);
  const { descendantsOf, childrenOf, ancestorsOf: ancestorsFilter, ids, inRoot } = hierarchy;
  // A filter inside one top needs no narrowing at all.
  if (descendantsOf !== undefined && tops.some((t) => isAtOrBelow(t, descendantsOf))) return { kind: "all" };
  if (childrenOf !== undefined && tops.some((t) => isAtOrBelow(t, childrenOf))) return { kind: "all" };
  // Otherwise only the tops inside the filter's reach can hold a matching row.
  if (descendantsOf !== undefined) tops = tops.filter((t) => isAncestor(descendantsOf, t));
  if (childrenOf !== undefined) tops = tops.filter((t) => parentOf(t) === childrenOf);
  if (ancestorsFilter !== undefined) {
    const chain = new Set(ancestorsOf(ancestorsFilter));
    tops = tops.filter((t) => chain.has(t));
  }
  if (ids !== undefined) {
    const kept = new Set(tops);
    const reached = new Set<string>();
    for (const id of ids) for (const u of [id, ...ancestorsOf(id)]) if (kept.has(u)) reached.add(u);
    tops = tops.filter((t) => reached.has(t));
  }
  if (inRoot) tops = tops.filter((t) => parentOf(t) === null);
  return { kind: "tops", tops, roots };
}

/**
 * The plan of a page in uid order past a cursor: a top wholly before the
 * cursor (after it, descending) holds no row of the page. Tops are sorted,
 * so the cut is one binary search.
 */
export function pastCursor(plan: VisibilityPlan, after: Cursor, desc: boolean): VisibilityPlan {
  if (plan.kind === "all") return plan;
  const { tops } = plan;
  // False then true along the sorted tops: ascending, the tops that reach past the
  // cursor (kept); descending, the tops that start at or after it (dropped).
  const split = (t: string) => (desc ? t >= after.uid : `${t}0` > after.uid);
  let lo = 0;
  let hi = tops.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (split(tops[mid]!)) hi = mid;
    else lo = mid + 1;
  }
  return { ...plan, tops: desc ? tops.slice(0, lo) : tops.slice(lo) };
}

/** The uid range of a top: its rows are t.uid >= low AND t.uid < high ("0" follows "/" and every uid's own characters). */
export function topRange(top: string): [low: string, high: string] {
  return [top, `${top}0`];
}
