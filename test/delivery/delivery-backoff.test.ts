/**
 * Issue 23 §3: failed deliveries are retried with exponential backoff and
 * full jitter (30 s doubling, capped at an hour between attempts) until three
 * days after the first attempt, then given up. The schedule is a pure
 * function, so it is checked here with chosen random numbers and clocks.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { nextAttempt, RETRY_SCHEDULE, retryCeilingMs } from "../../src/delivery/backoff.js";

const T0 = Date.UTC(2025, 0, 1);
const SECOND = 1000;
const HOUR = 3600 * SECOND;
const THREE_DAYS = 72 * HOUR;

/** A deterministic stand-in for Math.random (mulberry32). */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("retry schedule", () => {
  test("the ceiling doubles from 30 s and stops at an hour", () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 10_000].map(retryCeilingMs),
      [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600, 3600].map((s) => s * SECOND),
    );
  });

  test("full jitter: the wait is random × ceiling, at least 1 s", () => {
    assert.deepEqual(nextAttempt(1, T0, T0, 0.5), { at: T0 + 15 * SECOND });
    assert.deepEqual(nextAttempt(3, T0, T0 + HOUR, 0.25), { at: T0 + HOUR + 30 * SECOND });
    assert.deepEqual(nextAttempt(1, T0, T0, 0), { at: T0 + RETRY_SCHEDULE.floorMs });
    assert.deepEqual(nextAttempt(20, T0, T0, 0.999), { at: T0 + Math.floor(0.999 * HOUR) });
  });

  test("no attempt is scheduled past three days after the first; one failing at or after that gives up", () => {
    assert.deepEqual(nextAttempt(70, T0, T0 + THREE_DAYS - 10 * SECOND, 0.9), { at: T0 + THREE_DAYS });
    assert.equal(nextAttempt(71, T0, T0 + THREE_DAYS, 0.1), "give-up");
    assert.equal(nextAttempt(71, T0, T0 + THREE_DAYS + 5 * SECOND, 0.1), "give-up");
    assert.deepEqual(nextAttempt(2, T0, T0 + THREE_DAYS - 1, 0.1), { at: T0 + THREE_DAYS });
  });

  test("a whole schedule, attempts failing as soon as made: waits within their ceilings, ends at three days", () => {
    for (const seed of [1, 2, 3]) {
      const random = seeded(seed);
      let now = T0;
      let attempts = 1;
      const waits: number[] = [];
      for (;;) {
        const next = nextAttempt(attempts, T0, now, random());
        if (next === "give-up") break;
        assert.ok(next.at > now, "every retry is later than the failure");
        waits.push(next.at - now);
        now = next.at;
        attempts += 1;
      }
      assert.equal(now, T0 + THREE_DAYS, `seed ${seed}: the last attempt is at the deadline`);
      waits.slice(0, -1).forEach((wait, i) => {
        assert.ok(wait >= RETRY_SCHEDULE.floorMs && wait <= retryCeilingMs(i + 1), `seed ${seed}: wait ${i + 1} is ${wait} ms`);
      });
      // An hour's ceiling with full jitter averages half an hour: about 144 attempts in three days.
      assert.ok(attempts > 100 && attempts < 250, `seed ${seed}: ${attempts} attempts`);
    }
  });

  test("attempts below 1 or a random number outside [0, 1) are programming errors", () => {
    assert.throws(() => nextAttempt(0, T0, T0, 0.5), RangeError);
    assert.throws(() => nextAttempt(1.5, T0, T0, 0.5), RangeError);
    assert.throws(() => nextAttempt(1, T0, T0, 1), RangeError);
    assert.throws(() => nextAttempt(1, T0, T0, Number.NaN), RangeError);
  });
});
