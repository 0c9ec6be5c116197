import assert from "node:assert/strict";
import { test } from "node:test";
import { createFailureLimiter } from "../../src/auth/rate-limit.js";

test("a caller is blocked at the limit until its oldest counted failure is a window old", () => {
  let now = 1_000_000;
  const limiter = createFailureLimiter({ limit: 3, windowMs: 1000, now: () => now });
  limiter.recordFailure("a");
  now += 400;
  limiter.recordFailure("a");
  assert.equal(limiter.blocked("a"), false);
  now += 400;
  limiter.recordFailure("a");
  assert.equal(limiter.blocked("a"), true);
  assert.equal(limiter.blocked("b"), false, "per caller");
  now += 199;
  assert.equal(limiter.blocked("a"), true);
  now += 1;
  assert.equal(limiter.blocked("a"), false, "the first failure has left the window");
  limiter.recordFailure("a");
  assert.equal(limiter.blocked("a"), true, "the two recent failures and a new one");
});

test("memory is bounded: the least recently failing caller is forgotten first", () => {
  let now = 0;
  const limiter = createFailureLimiter({ limit: 2, windowMs: 60_000, now: () => now, maxKeys: 100 });
  for (let i = 0; i < 100; i++) {
    limiter.recordFailure(`caller ${i}`);
    limiter.recordFailure(`caller ${i}`);
  }
  assert.equal(limiter.blocked("caller 0"), true);
  limiter.recordFailure("caller 0");
  limiter.recordFailure("newcomer");
  assert.equal(limiter.blocked("caller 1"), false, "evicted: the oldest entry");
  assert.equal(limiter.blocked("caller 0"), true, "refreshed by its last failure");
  assert.equal(limiter.blocked("caller 99"), true);
  now += 60_000;
  for (let i = 0; i < 100; i++) limiter.recordFailure(`later ${i}`);
  assert.equal(limiter.blocked("caller 0"), false, "expired entries make room first");
});
