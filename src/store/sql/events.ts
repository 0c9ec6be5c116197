import { positionBefore, type EventDraft, type EventKind, type EventRecord, type FeedPosition } from "../../domain/events.js";
import { ancestorsOf, parentOf, rootOf } from "../../domain/uidp.js";
import {
  EVENT_SCAN_LIMIT,
  type EventHeader,
  type EventPage,
  type EventQuery,
  type EventScan,
  type EventVisibility,
} from "../event-store.js";

/**
 * The engine-neutral half of the change feed: which events a read returns
 * and where it resumes. An engine scans candidates in feed order (at most
 * EVENT_SCAN_LIMIT, below its horizon, restricted to the caller's roots);
 * everything else is decided here, the same way on both engines.
 */

/** An event as scanned, without its data (fetched only for the events returned). */
export type EventCandidate = EventHeader;

/**
 * The roots whose events a caller may see, or null for every root: the
 * scan is restricted to them, so a tenant's read never walks another
 * tenant's events. An empty list: the caller may see nothing.
 */
function visibleRoots(visible: EventVisibility): readonly string[] | null {
  const roots = new Set<string>();
  for (const tops of Object.values(visible)) {
    if (tops === null) return null;
    for (const top of tops) roots.add(rootOf(top));
  }
  return [...roots].sort();
}

/** Roots scanned one by one at most; a caller seeing more is scanned over every root, still at most EVENT_SCAN_LIMIT rows. */
const MAX_SCANNED_ROOTS = 8;

/** The roots a read scans, or null to scan the whole feed in order. */
export function scannedRoots(q: EventQuery): readonly string[] | null {
  const roots = visibleRoots(q.visible);
  return roots !== null && roots.length <= MAX_SCANNED_ROOTS ? roots : null;
}

/** The kinds' tops as sets, for a lookup per ancestor of each candidate (a uid is a few levels deep). */
function topSets(visible: EventVisibility): Map<EventKind, Set<string> | null> {
  const out = new Map<EventKind, Set<string> | null>();
  for (const [kind, tops] of Object.entries(visible) as [EventKind, readonly string[] | null][]) {
    out.set(kind, tops === null ? null : new Set(tops));
  }
  return out;
}

/** Whether uid is one of tops or lies below one. */
function underAny(uid: string, tops: Set<string>): boolean {
  if (tops.has(uid)) return true;
  for (const a of ancestorsOf(uid)) if (tops.has(a)) return true;
  return false;
}

/** A predicate for the candidates the query returns: visible kind and place, type, subject's place, time. */
function eventMatcher(q: EventQuery): (c: EventCandidate) => boolean {
  const tops = topSets(q.visible);
  const h = q.hierarchy;
  const ids = h.ids === undefined ? null : new Set(h.ids);
  const ancestors = h.ancestorsOf === undefined ? null : new Set(ancestorsOf(h.ancestorsOf));
  return (c) => {
    const kindTops = tops.get(c.kind);
    if (kindTops === undefined) return false;
    if (kindTops !== null && !underAny(c.subject, kindTops)) return false;
    if (q.typePrefix !== "" && !c.type.startsWith(q.typePrefix)) return false;
    if (q.endTime !== undefined && c.time >= q.endTime) return false;
    if (h.descendantsOf !== undefined && !c.subject.startsWith(`${h.descendantsOf}/`)) return false;
    if (h.childrenOf !== undefined && parentOf(c.subject) !== h.childrenOf) return false;
    if (h.inRoot && parentOf(c.subject) !== null) return false;
    if (ids !== null && !ids.has(c.subject)) return false;
    if (ancestors !== null && !ancestors.has(c.subject)) return false;
    return true;
  };
}

/**
 * Chooses a page from candidates scanned in feed order below horizon, and
 * where the next read resumes: after the last event returned when the page
 * is full; after the last candidate examined when the scan hit its limit or
 * end_time was given (events past end_time are still to come to a reader
 * without it, so they are not skipped over); else at the horizon, before
 * which every event is final.
 */
export function choosePage(
  candidates: readonly EventCandidate[],
  q: EventQuery,
  horizon: FeedPosition,
  start: FeedPosition | null,
): { chosen: EventCandidate[]; resume: FeedPosition } {
  const matches = eventMatcher(q);
  const chosen: EventCandidate[] = [];
  let last: EventCandidate | undefined;
  for (const c of candidates) {
    last = c;
    if (!matches(c)) continue;
    chosen.push(c);
    if (chosen.length === q.limit) return { chosen, resume: c.position };
  }
  if (candidates.length >= EVENT_SCAN_LIMIT || q.endTime !== undefined) {
    return { chosen, resume: last?.position ?? start ?? horizon };
  }
  return { chosen, resume: start !== null && positionBefore(horizon, start) ? start : horizon };
}

/**
 * A scan's answer from candidates read after `start` (null: none were read,
 * the scan starts at the horizon): every candidate, and where the next scan
 * resumes (after the last one when `limit` were read, else the horizon).
 */
export function scanOf(candidates: readonly EventCandidate[], limit: number, horizon: FeedPosition, start: FeedPosition | null): EventScan {
  if (start === null) return { events: [], resume: horizon };
  if (limit > 0 && candidates.length >= limit) return { events: candidates.slice(0, limit), resume: candidates[limit - 1]!.position };
  return { events: [...candidates], resume: start !== null && positionBefore(horizon, start) ? start : horizon };
}

/** A page with its events' data joined in, in the chosen order. */
export function pageOf(chosen: readonly EventCandidate[], data: ReadonlyMap<string, string>, resume: FeedPosition): EventPage {
  const events: EventRecord[] = chosen.map((c) => ({ ...c, data: data.get(c.id) ?? "{}" }));
  return { events, resume, expired: false };
}

/** A draft's columns as both engines store them (root: the subject's root, for the per-tenant scan). */
export function draftRow(e: EventDraft) {
  return {
    id: e.id,
    kind: e.kind,
    type: e.type,
    subject: e.subject,
    root: rootOf(e.subject),
    groupUid: e.groupUid,
    time: e.time,
    data: e.data,
  };
}
