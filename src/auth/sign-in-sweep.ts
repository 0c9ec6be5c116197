import type { Store } from "../store/store.js";
import type { RefreshTokenSettings } from "./refresh-tokens.js";

/** Rows deleted per statement: small, so a sweep never holds the database for long. */
const SWEEP_BATCH = 1000;
/** Batches per table per round at most: a backlog is worked off over several rounds rather than at once. */
const BATCHES_PER_ROUND = 10;
/** How often each process sweeps. */
const ROUND_MS = 60_000;

/** The sweep of expired sign-in flows and refresh tokens: one per process. */
export interface SignInSweep {
  /** Deletes what has expired now (at most BATCHES_PER_ROUND batches of each); how many rows went. */
  sweepNow(): Promise<number>;
  /** Stops the rounds (a round under way finishes). */
  stop(): void;
}

/**
 * Deletes expired sign-in flows, and refresh tokens past their idle or absolute lifetime, every minute on every
 * process, in batches of SWEEP_BATCH (the pattern of the event feed's retention, services/events/retention.ts).
 * Lookups refuse expired rows on their own; the sweep only bounds what is kept. A failed round (the database
 * away) is reported and tried again at the next.
 */
export function startSignInSweep(
  store: Pick<Store, "signInFlows" | "refreshTokens">,
  opts: { refresh: RefreshTokenSettings; now: () => number; onError: (err: unknown) => void; roundMs?: number },
): SignInSweep {
  let running: Promise<number> | null = null;
  const drain = async (batch: () => Promise<number>): Promise<number> => {
    let total = 0;
    for (let i = 0; i < BATCHES_PER_ROUND; i++) {
      const n = await batch();
      total += n;
      if (n < SWEEP_BATCH) break;
    }
    return total;
  };
  const sweepNow = (): Promise<number> => {
    running ??= (async () => {
      try {
        const now = opts.now();
        const flows = await drain(() => store.signInFlows.deleteExpired(now, SWEEP_BATCH));
        const tokens = await drain(() =>
          store.refreshTokens.deleteExpired(now - opts.refresh.idleMs, now - opts.refresh.maxAgeMs, SWEEP_BATCH),
        );
        return flows + tokens;
      } finally {
        running = null;
      }
    })();
    return running;
  };
  const timer = setInterval(() => sweepNow().catch(opts.onError), opts.roundMs ?? ROUND_MS);
  timer.unref();
  return { sweepNow, stop: () => clearInterval(timer) };
}
