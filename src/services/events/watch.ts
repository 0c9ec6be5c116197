import { Code, type HandlerContext } from "@connectrpc/connect";
import type { Event, WatchEventsRequest } from "../../../gen/platformapi/events/v1/events_pb.js";
import { tokenExpired } from "../../auth/tokens.js";
import { ApiError } from "../../domain/errors.js";
import type { FeedPosition } from "../../domain/events.js";
import { hierarchyFilter } from "../../domain/hierarchy.js";
import type { EventStore, EventVisibility } from "../../store/event-store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import type { Notifier, WatchOptions } from "./feed-notifier.js";
import { cursorExpired, eventMessage, heartbeatMessage, millisOf, typePrefixOf } from "./feed-view.js";
import { watchCredentials } from "./watch-credentials.js";
import { WatchSlots } from "./watch-slots.js";

export { createFeedNotifier, type FeedNotifier, type WatchOptions } from "./feed-notifier.js";

/** Events read from the feed at once: the most a stream holds in memory. */
const PAGE = 200;

export { WATCH_LIMIT } from "./watch-slots.js";

/** What watch.ts adds to EventsService: the WatchEvents implementation and how many streams are open. */
export interface EventsWatch {
  watchEvents(req: WatchEventsRequest, ctx: HandlerContext): AsyncGenerator<Event>;
  /** Streams open now in this process. */
  readonly open: number;
}

/**
 * WatchEvents over feed: validated as ListEvents is, a slot taken, then page
 * after page from the cursor, start_time or the feed's horizon, each event
 * yielded only when the entry point asks for it (so a stream holds at most
 * one page), and when caught up, a wait for the notifier or the poll
 * interval. The first message comes at once (a heartbeat when no event is
 * waiting), so every protocol sends its response headers when the stream is
 * admitted; after that a heartbeat whenever nothing was sent for heartbeatMs.
 * Each wake checks the call's token and the caller's visibility again
 * (watch-credentials.ts); a timer ends the stream at the token's expiry.
 */
export function createEventsWatch(deps: ServiceDeps, feed: EventStore, opts: WatchOptions): EventsWatch {
  const notifier = opts.notifier as Notifier;
  const pollMs = opts.pollMs ?? 1000;
  const heartbeatMs = opts.heartbeatMs ?? 15_000;
  const maxStreamMs = opts.maxStreamMs ?? 3_600_000;
  const slots = new WatchSlots({
    perIdentity: opts.maxPerIdentity ?? 8,
    perOrganization: opts.maxPerOrganization ?? 100,
    total: opts.maxTotal ?? 1000,
  });
  return {
    get open() {
      return slots.total;
    },
    async *watchEvents(req, ctx) {
      const hierarchy = hierarchyFilter(req.uidp);
      const typePrefix = typePrefixOf(req.typePrefix);
      let position: FeedPosition | null = req.cursor === "" ? null : deps.events.cursors.decode("cursor", req.cursor);
      // Neither a cursor nor a time: from now, i.e. the horizon the first read returns (nothing stamped earlier).
      const startTime = position !== null ? undefined : (millisOf("start_time", req.startTime) ?? deps.now());
      if (notifier.closed) throw shuttingDown();
      const principal = principalOf(ctx);
      // Verified within its clock tolerance, but a stream must end at exp: it would end before its first message.
      const tokenMs = principal.token.expiresAt - deps.now();
      if (tokenMs <= 0) throw tokenExpired("the token's exp has passed (a WatchEvents stream ends there)");
      const release = slots.take(principal);
      const stop = streamEnd(ctx.signal, notifier, maxStreamMs, tokenMs);
      try {
        const credentials = await watchCredentials(deps, principal, ctx.requestHeader);
        // The wrapper has just authenticated the call and refreshed the store's view.
        let checked = true;
        let sentAt = -Infinity;
        while (!stop.signal.aborted) {
          // Read before the read: a commit notified while it runs is not waited for.
          const seen = notifier.generation;
          const page = await read(feed, position, startTime, { typePrefix, hierarchy, visible: credentials.visible });
          // On the first read, before any message: an ordinary error response on every protocol.
          if (page.expired) throw cursorExpired(deps.events.retentionMs);
          if (!checked) {
            // After the read, so that the checks know every commit it saw, other processes' too (a key retired, a
            // binding deleted): one versions read, shared by the streams that woke in this turn of the event loop.
            await deps.store.refresh();
            if (!(await credentials.check())) return;
          }
          checked = false;
          for (const e of page.events) {
            if (stop.signal.aborted) break;
            yield eventMessage(deps.events, e);
            sentAt = performance.now();
          }
          if (stop.signal.aborted) break;
          position = page.resume;
          if (page.events.length === PAGE) continue;
          if (performance.now() - sentAt >= heartbeatMs) {
            yield heartbeatMessage(deps.events, position, deps.now());
            sentAt = performance.now();
          }
          await notifier.moved(seen, Math.min(pollMs, sentAt + heartbeatMs - performance.now()), stop.signal);
        }
        if (stop.failure) throw stop.failure;
      } finally {
        stop.dispose();
        release();
      }
    },
  };
}

function read(
  feed: EventStore,
  after: FeedPosition | null,
  startTime: number | undefined,
  filters: { typePrefix: string; hierarchy: ReturnType<typeof hierarchyFilter>; visible: EventVisibility },
) {
  return feed.read({ after, startTime: after === null ? startTime : undefined, limit: PAGE, ...filters });
}

/**
 * Aborts when the call's signal does, the notifier closes, or the stream's
 * maximum duration has passed (the stream ends with OK), or when its token
 * expires in tokenMs (failure: the authenticator's UNAUTHENTICATED for it).
 */
function streamEnd(
  call: AbortSignal,
  notifier: Notifier,
  maxMs: number,
  tokenMs: number,
): { signal: AbortSignal; failure: ApiError | undefined; dispose(): void } {
  const end = new AbortController();
  const abort = () => end.abort();
  const timer = setTimeout(abort, maxMs);
  timer.unref();
  const ended = {
    signal: end.signal,
    failure: undefined as ApiError | undefined,
    dispose() {
      clearTimeout(timer);
      clearTimeout(expiry);
      call.removeEventListener("abort", abort);
      notifier.closing.removeEventListener("abort", abort);
    },
  };
  const expiry = setTimeout(
    () => {
      ended.failure ??= tokenExpired("the token expired during a WatchEvents stream");
      abort();
    },
    // API tokens live an hour at most; the bound keeps any longer one from overflowing the timer (which would fire at once).
    Math.min(Math.max(0, tokenMs), 2_147_483_647),
  );
  expiry.unref();
  call.addEventListener("abort", abort, { once: true });
  notifier.closing.addEventListener("abort", abort, { once: true });
  if (call.aborted) abort();
  return ended;
}

function shuttingDown(): ApiError {
  return new ApiError(Code.Unavailable, "SHUTTING_DOWN", "The server is shutting down: retry the call");
}
