import type { ServiceImpl } from "@connectrpc/connect";
import type { EventsService, ListEventsResponse } from "../../../gen/platformapi/events/v1/events_pb.js";
import { invalidField } from "../../domain/errors.js";
import { hierarchyFilter } from "../../domain/hierarchy.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { cursorExpired, eventMessage, eventVisibility, millisOf, typePrefixOf } from "./feed-view.js";
import { createEventsWatch } from "./watch.js";

export { FeedCursors } from "./feed-cursor.js";
export { EVENT_CURSOR_EXPIRED, eventMessage } from "./feed-view.js";

const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 200;

/** EventsService: the change feed (docs/events.md). */
export function createEventsService(deps: ServiceDeps): ServiceImpl<typeof EventsService> {
  const watch = createEventsWatch(deps, deps.store.events, deps.events.watch);
  return {
    watchEvents: (req, ctx) => watch.watchEvents(req, ctx),
    async listEvents(req, ctx): Promise<ListEventsResponse> {
      if (req.pageSize < 0) throw invalidField("page_size", "must not be negative");
      const limit = Math.min(req.pageSize || DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE);
      const hierarchy = hierarchyFilter(req.uidp);
      const typePrefix = typePrefixOf(req.typePrefix);
      const after = req.pageToken === "" ? null : deps.events.cursors.decode("page_token", req.pageToken);
      const startTime = millisOf("start_time", req.startTime);
      const endTime = millisOf("end_time", req.endTime);
      const visible = await eventVisibility(deps, principalOf(ctx));
      const page = await deps.store.events.read({
        after,
        startTime,
        endTime,
        typePrefix,
        hierarchy,
        visible,
        limit,
      });
      if (page.expired) throw cursorExpired(deps.events.retentionMs);
      return {
        $typeName: "platformapi.events.v1.ListEventsResponse",
        events: page.events.map((e) => eventMessage(deps.events, e)),
        nextPageToken: deps.events.cursors.encode(page.resume),
      };
    },
  };
}
