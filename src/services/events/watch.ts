import { Code, type HandlerContext } from "@connectrpc/connect";
import type { Event, WatchEventsRequest } from "../../../gen/platformapi/events/v1/events_pb.js";
import type { Principal } from "../../auth/principal.js";
import { ApiError } from "../../domain/errors.js";
import type { FeedPosition } from "../../domain/events.js";
import { hierarchyFilter } from "../../domain/hierarchy.js";
import type { EventStore, EventVisibility } from "../../store/event-store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import type { Notifier, WatchOptions } from "./feed-notifier.js";
import { cursorExpired, eventMessage, eventVisibility, millisOf, typePrefixOf } from "./feed-view.js";

export { createFeedNotifier, type FeedNotifier, type WatchOptions } from "./feed-notifier.js";

/** Events read from the feed at once: the most a stream holds in memory. */
const PAGE = 200;

/** ErrorInfo reason of a watch refused because its identity, or the process, has as many open as allowed. */
export const WATCH_LIMIT = "WATCH_LIMIT";

/** What watch.ts adds to EventsService: the WatchEvents implementation and how many streams are open. */
export interface EventsWatch {
  watchEvents(req: WatchEventsRequest, ctx: HandlerContext): AsyncGenerator<Event>;
  /** Streams open now in this process. */
  readonly open: number;
}

/**
 * WatchEvents over feed: validated as ListEvents is, then page after page
 * from the cursor, start_time or the feed's horizon, each event yielded only
 * when the entry point asks for it (so a stream holds at most one page), and
 * when caught up, a wait for the notifier or the poll interval.
 */
export function createEventsWatch(deps: ServiceDeps, feed: EventStore, opts: WatchOptions): EventsWatch {
  const notifier = opts.notifier as Notifier;
  const pollMs = opts.pollMs ?? 1000;
  const maxStreamMs = opts.maxStreamMs ?? 3_600_000;
  const visibilityMs = opts.visibilityMs ?? 30_000;
  const slots = new WatchSlots(opts.maxPerIdentity ?? 8, opts.maxTotal ?? 1000);
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
      const release = slots.take(principal);
      const stop = streamEnd(ctx.signal, notifier, maxStreamMs);
      try {
        let visible = await eventVisibility(deps, principal);
        let visibleAt = performance.now();
        while (!stop.signal.aborted) {
          if (performance.now() - visibleAt > visibilityMs) {
            visible = await eventVisibility(deps, principal);
            visibleAt = performance.now();
          }
          // Read before the read: a commit notified while it runs is not waited for.
          const seen = notifier.generation;
          const page = await read(feed, position, startTime, { typePrefix, hierarchy, visible });
          if (page.expired) throw cursorExpired(deps.events.retentionMs);
          for (const e of page.events) {
            if (stop.signal.aborted) return;
            yield eventMessage(deps.events, e);
          }
          position = page.resume;
          if (page.events.length < PAGE) await notifier.moved(seen, pollMs, stop.signal);
        }
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

/** Aborts when the call's signal does, the notifier closes, or the stream's maximum duration has passed. */
function streamEnd(call: AbortSignal, notifier: Notifier, maxMs: number): { signal: AbortSignal; dispose(): void } {
  const end = new AbortController();
  const abort = () => end.abort();
  const timer = setTimeout(abort, maxMs);
  timer.unref();
  call.addEventListener("abort", abort, { once: true });
  notifier.closing.addEventListener("abort", abort, { once: true });
  if (call.aborted) abort();
  return {
    signal: end.signal,
    dispose() {
      clearTimeout(timer);
      call.removeEventListener("abort", abort);
      notifier.closing.removeEventListener("abort", abort);
    },
  };
}

/** Open streams per identity and in all; take() throws RESOURCE_EXHAUSTED past either bound. */
class WatchSlots {
  total = 0;
  private readonly perIdentity = new Map<string, number>();

  constructor(
    private readonly maxPerIdentity: number,
    private readonly maxTotal: number,
  ) {}

  take(principal: Principal): () => void {
    if (this.total >= this.maxTotal)
      throw watchLimit(`this server serves at most ${this.maxTotal} event watches at once`, "process", this.maxTotal);
    const key = principal.subject;
    const mine = this.perIdentity.get(key) ?? 0;
    if (!principal.admin && mine >= this.maxPerIdentity)
      throw watchLimit(`this identity has ${mine} event watches open, the most allowed`, "identity", this.maxPerIdentity);
    this.total++;
    this.perIdentity.set(key, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      const left = (this.perIdentity.get(key) ?? 1) - 1;
      if (left === 0) this.perIdentity.delete(key);
      else this.perIdentity.set(key, left);
    };
  }
}

function watchLimit(what: string, scope: string, limit: number): ApiError {
  return new ApiError(Code.ResourceExhausted, WATCH_LIMIT, `Resource exhausted: ${what}; close one or retry later`, {
    metadata: { scope, limit: String(limit) },
  });
}

function shuttingDown(): ApiError {
  return new ApiError(Code.Unavailable, "SHUTTING_DOWN", "The server is shutting down: retry the call");
}
