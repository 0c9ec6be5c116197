import type { EventStore } from "../../store/event-store.js";

/** Events deleted per statement: small, so a prune never holds the database for long. */
const PRUNE_BATCH = 1000;
/** Batches per round at most: a backlog is worked off over several rounds rather than at once. */
const BATCHES_PER_ROUND = 10;
/** How often each process prunes. */
const ROUND_MS = 60_000;

/** The pruning of events older than the retention period: one per process. */
export interface EventRetention {
  /** Deletes what has aged out now (at most BATCHES_PER_ROUND batches); how many events went. */
  pruneNow(): Promise<number>;
  /** Stops the rounds (a round under way finishes). */
  stop(): void;
}

/**
 * Prunes events older than retentionMs every minute, in batches of
 * PRUNE_BATCH, on every process (on PostgreSQL their batches skip each
 * other's rows). A failed round (the database away) is logged and tried again
 * at the next.
 */
export function startEventRetention(
  events: EventStore,
  opts: { retentionMs: number; now: () => number; onError: (err: unknown) => void; roundMs?: number },
): EventRetention {
  let running: Promise<number> | null = null;
  const pruneNow = (): Promise<number> => {
    running ??= (async () => {
      let total = 0;
      try {
        for (let i = 0; i < BATCHES_PER_ROUND; i++) {
          const n = await events.prune(opts.now() - opts.retentionMs, PRUNE_BATCH);
          total += n;
          if (n < PRUNE_BATCH) break;
        }
      } finally {
        running = null;
      }
      return total;
    })();
    return running;
  };
  const timer = setInterval(() => pruneNow().catch(opts.onError), opts.roundMs ?? ROUND_MS);
  timer.unref();
  return {
    pruneNow,
    stop: () => clearInterval(timer),
  };
}
