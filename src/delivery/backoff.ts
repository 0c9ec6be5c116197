/**
 * When a failed delivery is tried again: exponential backoff with full jitter
 * (a uniformly random wait up to a ceiling that doubles with each attempt, as
 * AWS's "Exponential Backoff and Jitter" recommends, so sinks coming back
 * from an outage are not hit by every subscriber's retries at once), for up
 * to three days after the first attempt, as Stripe and the Standard Webhooks
 * guidance do. A pure function: the caller brings the clock and the random
 * number, so the schedule is tested without waiting.
 */

/** The retry schedule's constants. */
export const RETRY_SCHEDULE = {
  /** The ceiling of the wait after the first failed attempt; it doubles after each. */
  baseMs: 30_000,
  /** The ceiling never grows past this: at least one attempt an hour while retrying. */
  capMs: 60 * 60_000,
  /** No wait is shorter, so a random number near 0 never means an immediate retry. */
  floorMs: 1_000,
  /** Attempts stop this long after the first one: the delivery is given up. */
  giveUpAfterMs: 3 * 24 * 60 * 60_000,
} as const;

/** What a delivery that just failed does next: another attempt at a time (ms since the epoch), or none. */
export type NextAttempt = { at: number } | "give-up";

/** The ceiling of the wait after `attempts` failed attempts (1 after the first). */
export function retryCeilingMs(attempts: number): number {
  // 2^30 × 30 s is far past the cap; the exponent is bounded so it never overflows.
  return Math.min(RETRY_SCHEDULE.capMs, RETRY_SCHEDULE.baseMs * 2 ** Math.min(attempts - 1, 30));
}

/**
 * The next attempt after `attempts` failed ones (1 after the first), the
 * first made at firstAttemptAt, now being when the last one failed, and
 * random a number in [0, 1) (Math.random in production): a wait drawn
 * uniformly under retryCeilingMs(attempts), at least floorMs, and never past
 * the three days, so the last attempt lands at the deadline. Once an attempt
 * has failed at or after the deadline, "give-up".
 */
export function nextAttempt(attempts: number, firstAttemptAt: number, now: number, random: number): NextAttempt {
  if (!Number.isInteger(attempts) || attempts < 1) throw new RangeError(`attempts must be an integer >= 1, not ${attempts}`);
  if (!(random >= 0 && random < 1)) throw new RangeError(`random must be in [0, 1), not ${random}`);
  const deadline = firstAttemptAt + RETRY_SCHEDULE.giveUpAfterMs;
  if (now >= deadline) return "give-up";
  const wait = Math.max(RETRY_SCHEDULE.floorMs, Math.floor(random * retryCeilingMs(attempts)));
  return { at: Math.min(now + wait, deadline) };
}
