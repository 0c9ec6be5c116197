/** Feed cursors are sealed: they round-trip, say nothing about the feed, and refuse what this deployment did not issue. */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { ApiError } from "../../src/domain/errors.js";
import { FeedCursors } from "../../src/services/events/feed-cursor.js";

const cursors = new FeedCursors(randomBytes(32));
const refused = (err: unknown) =>
  err instanceof ApiError &&
  err.reason === "INVALID_ARGUMENT" &&
  err.fieldViolations.length === 1 &&
  err.fieldViolations[0]!.field === "page_token";

test("a cursor round-trips every position, is the same each time, and differs for neighbours", () => {
  const positions = [
    { txid: 0n, seq: 0n },
    { txid: 0n, seq: 1n },
    { txid: 0n, seq: 2n },
    { txid: 748n, seq: 12n },
    { txid: (1n << 64n) - 1n, seq: (1n << 63n) + 5n },
  ];
  const seen = new Set<string>();
  for (const p of positions) {
    const c = cursors.encode(p);
    assert.match(c, /^[A-Za-z0-9_-]{32}$/);
    assert.equal(cursors.encode(p), c, "deterministic");
    assert.deepEqual(cursors.decode("page_token", c), p);
    seen.add(c);
  }
  assert.equal(seen.size, positions.length);
});

test("a cursor carries no readable position: consecutive sequences share no prefix a client could count with", () => {
  const a = Buffer.from(cursors.encode({ txid: 0n, seq: 41n }), "base64url");
  const b = Buffer.from(cursors.encode({ txid: 0n, seq: 42n }), "base64url");
  assert.ok(!a.toString("latin1").includes("41") && !b.toString("latin1").includes("42"));
  assert.notDeepEqual(a.subarray(0, 4), b.subarray(0, 4));
});

test("altered, truncated, padded, foreign and made-up cursors are INVALID_ARGUMENT naming the field", () => {
  const good = cursors.encode({ txid: 7n, seq: 9n });
  const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
  const bad = [
    flip(good, 0),
    flip(good, 20),
    flip(good, 31),
    good.slice(0, 31),
    `${good}A`,
    `${good}==`,
    new FeedCursors(randomBytes(32)).encode({ txid: 7n, seq: 9n }),
    Buffer.from("e1.0.1").toString("base64url"),
    "",
    "x".repeat(10_000),
  ];
  for (const c of bad) assert.throws(() => cursors.decode("page_token", c), refused, c);
});
