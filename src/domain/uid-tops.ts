import { isAtOrBelow } from "./uidp.js";

/**
 * The minimal set of uids covering the given ones: sorted, with no uid at or
 * below another (duplicates and descendants of a kept uid dropped). One sort
 * and one pass, O(n log n): sorted, every uid at or below a kept top follows
 * it, and no other top sorts between them (a uid between a top and its
 * descendant in byte order is itself a descendant, since "/" sorts before
 * every hex digit), so comparing with the last kept top suffices.
 */
export function topsOf(uids: Iterable<string>): string[] {
  const sorted = [...uids].sort();
  const tops: string[] = [];
  for (const uid of sorted) {
    const last = tops[tops.length - 1];
    if (last === undefined || !isAtOrBelow(last, uid)) tops.push(uid);
  }
  return tops;
}
