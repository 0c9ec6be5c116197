import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate, timestampFromMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { EventSchema, type Event } from "../../../gen/platformapi/events/v1/events_pb.js";
import type { Principal } from "../../auth/principal.js";
import { ApiError, invalidField } from "../../domain/errors.js";
import { CLOUDEVENTS_SPEC_VERSION, EVENT_KINDS, type EventKind, type EventRecord, type FeedPosition } from "../../domain/events.js";
import type { EventVisibility } from "../../store/event-store.js";
import type { ServiceDeps } from "../context.js";
import type { FeedCursors } from "./feed-cursor.js";

/*
 * What ListEvents and WatchEvents share: cursors, the expired-cursor error,
 * the caller's visibility per kind, and the API form of an event (and of a
 * watch's heartbeat).
 */

/** ErrorInfo reason of a cursor older than the retention period: the client restarts from a time. */
export const EVENT_CURSOR_EXPIRED = "EVENT_CURSOR_EXPIRED";

/** OUT_OF_RANGE: the cursor points before events already pruned. */
export function cursorExpired(retentionMs: number): ApiError {
  const days = Math.round((retentionMs / 86_400_000) * 10) / 10;
  return new ApiError(
    Code.OutOfRange,
    EVENT_CURSOR_EXPIRED,
    `Out of range: the cursor points before the oldest event kept (events are kept ${days} days); restart from a start_time`,
    { metadata: { retention: `${Math.round(retentionMs / 1000)}s` } },
  );
}

/** Which kinds the caller may see, and where: one visibleWithin per kind (each cached by the authorizer). */
export async function eventVisibility(deps: ServiceDeps, principal: Principal): Promise<EventVisibility> {
  const visible: Partial<Record<EventKind, readonly string[] | null>> = {};
  for (const kind of Object.keys(EVENT_KINDS) as EventKind[]) {
    visible[kind] = await deps.authz.visibleWithin(principal, EVENT_KINDS[kind].listCapability);
  }
  return visible as EventVisibility;
}

/** The API form of a stored event, its cursor sealed. */
export function eventMessage(view: { source: string; cursors: FeedCursors }, e: EventRecord): Event {
  return create(EventSchema, {
    id: e.id,
    source: view.source,
    specVersion: CLOUDEVENTS_SPEC_VERSION,
    type: e.type,
    subject: e.subject,
    time: timestampFromMs(e.time),
    group: e.groupUid,
    dataContentType: "application/json",
    data: JSON.parse(e.data) as JsonObject,
    cursor: view.cursors.encode(e.position),
  });
}

/**
 * The type of a WatchEvents heartbeat (Kubernetes' watch BOOKMARK is the
 * precedent): no change, only the stream's place in the feed. Never stored,
 * so never listed, delivered or counted as an event.
 */
export const WATCH_HEARTBEAT_TYPE = "api.platform.events.heartbeat.v1";

/**
 * A heartbeat at position: its cursor resumes exactly where the stream stands
 * (nothing before it unsent, nothing after it sent), with the time, source and
 * spec version; no id, subject, group or data.
 */
export function heartbeatMessage(view: { source: string; cursors: FeedCursors }, position: FeedPosition, time: number): Event {
  return create(EventSchema, {
    source: view.source,
    specVersion: CLOUDEVENTS_SPEC_VERSION,
    type: WATCH_HEARTBEAT_TYPE,
    time: timestampFromMs(time),
    cursor: view.cursors.encode(position),
  });
}

/** A request's type_prefix, checked: the start of a CloudEvents type, at most 256 characters. */
export function typePrefixOf(prefix: string): string {
  if (!/^[A-Za-z0-9._-]{0,256}$/.test(prefix))
    throw invalidField("type_prefix", "must be at most 256 letters, digits, dots, dashes and underscores (a CloudEvents type's start)");
  return prefix;
}

/** A request's time field in milliseconds since the epoch (undefined when unset); INVALID_ARGUMENT before 1970. */
export function millisOf(field: string, t: Timestamp | undefined): number | undefined {
  if (t === undefined) return undefined;
  const ms = timestampDate(t).getTime();
  if (!Number.isFinite(ms) || ms < 0) throw invalidField(field, "must be a time after 1970");
  return ms;
}
