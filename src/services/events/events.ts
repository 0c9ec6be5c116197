import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { EventsService, ListEventsResponse } from "../../../gen/platformapi/events/v1/events_pb.js";
import { invalidField } from "../../domain/errors.js";
import { hierarchyFilter } from "../../domain/hierarchy.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { cursorExpired, decodeCursor, encodeCursor, eventMessage, eventVisibility } from "./feed-view.js";
import { createEventsWatch } from "./watch.js";

export { EVENT_CURSOR_EXPIRED, encodeCursor, eventMessage } from "./feed-view.js";

const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 200;

function millis(field: string, t: Timestamp | undefined): number | undefined {
  if (t === undefined) return undefined;
  const ms = timestampDate(t).getTime();
  if (!Number.isFinite(ms) || ms < 0) throw invalidField(field, "must be a time after 1970");
  return ms;
}

/** EventsService: the change feed (docs/events.md). */
export function createEventsService(deps: ServiceDeps): ServiceImpl<typeof EventsService> {
  const watch = createEventsWatch(deps, deps.store.events, deps.events.watch);
  return {
    watchEvents: (req, ctx) => watch.watchEvents(req, ctx),
    async listEvents(req, ctx): Promise<ListEventsResponse> {
      if (req.pageSize < 0) throw invalidField("page_size", "must not be negative");
      const limit = Math.min(req.pageSize || DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE);
      const hierarchy = hierarchyFilter(req.uidp);
      if (!/^[A-Za-z0-9._-]{0,256}$/.test(req.typePrefix))
        throw invalidField("type_prefix", "must be at most 256 letters, digits, dots, dashes and underscores (a CloudEvents type's start)");
      const after = req.pageToken === "" ? null : decodeCursor("page_token", req.pageToken);
      const startTime = millis("start_time", req.startTime);
      const endTime = millis("end_time", req.endTime);
      const visible = await eventVisibility(deps, principalOf(ctx));
      const page = await deps.store.events.read({
        after,
        startTime,
        endTime,
        typePrefix: req.typePrefix,
        hierarchy,
        visible,
        limit,
      });
      if (page.expired) throw cursorExpired(deps.events.retentionMs);
      return {
        $typeName: "platformapi.events.v1.ListEventsResponse",
        events: page.events.map((e) => eventMessage(deps.events.source, e)),
        nextPageToken: encodeCursor(page.resume),
      };
    },
  };
}
