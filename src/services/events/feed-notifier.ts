/**
 * The wake-up between the events' writers and their watchers in one process:
 * mutations notify after each commit that wrote events; watches wait on it
 * (or on their poll interval, for other processes' commits).
 */

/**
 * Tells waiting watches that the feed may have moved. This process's
 * mutations call notify() after each committed transaction that appended
 * events; other processes' commits are found by polling (WatchOptions.pollMs).
 */
export interface FeedNotifier {
  /** The feed may have new events: every waiting watch reads again now. */
  notify(): void;
  /** The server is stopping: every watch ends (OK, so clients resume elsewhere) and new ones are refused (UNAVAILABLE). */
  close(): void;
}

/** The notifier and bounds of WatchEvents: one per process, shared by the emission side and the service. */
export interface WatchOptions {
  notifier: FeedNotifier;
  /** How often a caught-up watch reads the feed for other processes' commits (default 1 s). */
  pollMs?: number;
  /** A stream ends with OK after this long (default 1 h): its client resumes with its last cursor. */
  maxStreamMs?: number;
  /**
   * A stream that has sent nothing for this long sends a heartbeat (default
   * 15 s, below every shipped proxy's idle timeout): a message, so that every
   * proxy and balancer on the way sees the stream active.
   */
  heartbeatMs?: number;
  /** Streams one identity may have open in this process (default 8; the administrator is exempt). */
  maxPerIdentity?: number;
  /** Streams the identities of one organization may have open in this process, together (default 100). */
  maxPerOrganization?: number;
  /** Streams this process serves at once (default 1,000). */
  maxTotal?: number;
}

/** Creates the one notifier of a process (pass it in WatchOptions and call notify after event commits). */
export function createFeedNotifier(): FeedNotifier {
  return new Notifier();
}

/** The notifier's implementation; WatchEvents reads its generation and waits on it. */
export class Notifier implements FeedNotifier {
  /** Counts notify() calls: a watch that saw an older value has something to read. */
  generation = 0;
  private readonly waiters = new Set<() => void>();
  private readonly closer = new AbortController();

  get closing(): AbortSignal {
    return this.closer.signal;
  }

  get closed(): boolean {
    return this.closer.signal.aborted;
  }

  notify(): void {
    this.generation++;
    for (const wake of this.waiters) wake();
    this.waiters.clear();
  }

  close(): void {
    this.closer.abort();
  }

  /** Resolves once notify() was called after generation seen, pollMs passed, or stop aborted. */
  moved(seen: number, pollMs: number, stop: AbortSignal): Promise<void> {
    if (this.generation !== seen || stop.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        stop.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, pollMs);
      this.waiters.add(done);
      stop.addEventListener("abort", done, { once: true });
    });
  }
}
