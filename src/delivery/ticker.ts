/**
 * When a deliverer looks next: one run at a time, planned at the soonest of
 * every time asked for. A run ending re-arms the poll without pushing back a
 * wake that came in while it ran (which left a commit waiting for the next
 * poll: a second of lag, or an hour with a long poll); a wake during a run
 * runs another right after it.
 */
export interface Ticker {
  /** Runs after delayMs, unless a run is already planned sooner. */
  plan(delayMs: number): void;
  /** Plans nothing more and resolves once a run in progress has ended. */
  stop(): Promise<void>;
}

/** A ticker of run; `now` is the clock delays are counted on (performance.now). */
export function createTicker(run: () => Promise<void>, now: () => number = () => performance.now()): Ticker {
  let timer: NodeJS.Timeout | undefined;
  // When the planned run is due; Infinity while none is planned.
  let due = Infinity;
  let running: Promise<void> | null = null;
  let again = false;
  let stopped = false;

  function plan(delayMs: number): void {
    if (stopped) return;
    const at = now() + delayMs;
    if (timer !== undefined && at >= due) return;
    clearTimeout(timer);
    due = at;
    timer = setTimeout(fire, delayMs);
    timer.unref();
  }

  function fire(): void {
    timer = undefined;
    due = Infinity;
    if (running) {
      again = true;
      return;
    }
    running = run().finally(() => {
      running = null;
      if (again && !stopped) {
        again = false;
        plan(0);
      }
    });
  }

  return {
    plan,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
      await running;
    },
  };
}
