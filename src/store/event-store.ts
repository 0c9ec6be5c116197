import { EVENT_KINDS, type EventDraft, type EventKind, type EventRecord, type FeedPosition } from "../domain/events.js";
import type { HierarchyFilter } from "../domain/hierarchy-filter.js";
import type { Async } from "./async-type.js";

/**
 * Per kind of event, where the caller may see it: null for everywhere (the
 * administrator, or a grant at every root), else the tops of the subtrees it
 * may see (an empty list: nowhere). The authorizer's visibleWithin for the
 * kind's List capability.
 */
export type EventVisibility = Readonly<Record<EventKind, readonly string[] | null>>;

/** Every kind visible everywhere: the administrator's view, and migrate-to-postgres's. */
export const EVERYWHERE: EventVisibility = Object.fromEntries(Object.keys(EVENT_KINDS).map((k) => [k, null])) as unknown as EventVisibility;

/** What a read of the feed asks for. */
export interface EventQuery {
  /** Resume right after this position; null: from start_time, or the oldest event kept. */
  after: FeedPosition | null;
  /** With after null: start at the first event (in feed order) whose time is at or after this (ms). */
  startTime?: number;
  /** Only events whose time is before this (ms). */
  endTime?: number;
  /** Only events whose type starts with this ("" for all). */
  typePrefix: string;
  /** Matched against each event's subject, as the List RPCs match a record's uid. */
  hierarchy: HierarchyFilter;
  /** Only events of kinds, at groups, the caller may see. */
  visible: EventVisibility;
  /** Events returned at most (1–200). */
  limit: number;
}

/** A page of the feed. */
export interface EventPage {
  /** In feed order (commit order). */
  events: EventRecord[];
  /**
   * Where the next read resumes: the last event's position when the page is
   * full or endTime was given, else the feed's horizon, before which nothing
   * can appear any more (so a reader polling with it never skips an event,
   * and never reads again what its filters left out).
   */
  resume: FeedPosition;
  /** True when `after` lies before events already pruned (the reader has lost some): nothing else is set then. */
  expired: boolean;
}

/** An event as a scan returns it: where it is, what it is about, without its data. */
export type EventHeader = Omit<EventRecord, "data">;

/** What a scan of the feed returns: every event after its start, in feed order, without data. */
export interface EventScan {
  events: EventHeader[];
  /** Where the next scan resumes: the last event's position when the scan was full, else the feed's horizon. */
  resume: FeedPosition;
}

/**
 * The outbox and change feed (docs/events.md), as an engine implements it
 * (Store.events is its Async form). append runs inside the mutation's
 * transaction; read and prune outside any.
 */
export interface SyncEventStore {
  /** Appends the events of a change, in the caller's transaction; the store assigns each its feed position. */
  append(events: readonly EventDraft[]): void;
  /**
   * Reads the feed in commit order: never an event before one already
   * returned, never one twice. At most EVENT_SCAN_LIMIT events are examined
   * per read, whatever the filters leave out: a read that examined that many
   * resumes after the last one examined.
   */
  read(query: EventQuery): EventPage;
  /**
   * Reads at most limit (1–EVENT_SCAN_LIMIT) events after `after`, in feed
   * order, without their data and whatever their kind or place: the
   * deliverer's look at what was committed, to wake the subscriptions an
   * event may concern (it never reaches a client). With after null, returns
   * no event and the feed's horizon (where a scan starting now resumes).
   * Never skips an event, as read.
   */
  scan(after: FeedPosition | null, limit: number): EventScan;
  /**
   * Deletes at most limit of the oldest events whose time is before `before`
   * (ms), remembering the newest position deleted (reads resuming before it
   * are then expired); returns how many were deleted.
   */
  prune(before: number, limit: number): number;
}

/** Events one read examines at most (the bound on a read's cost when filters leave most out). */
export const EVENT_SCAN_LIMIT = 2000;

/** The change feed's part as every engine exposes it (Store.events). */
export type EventStore = Async<SyncEventStore>;
