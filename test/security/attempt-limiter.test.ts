/**
 * Issue 21, item 10, at the unit level: an AttemptLimiter limits failures,
 * never successes, per caller and per client address (taken from
 * clientAddressKey), and holds a bounded number of entries however many
 * callers and addresses fail.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConnectError, createContextValues } from "@connectrpc/connect";
import { clientAddressKey } from "../../src/auth/principal.js";
import { createAttemptLimiter } from "../../src/auth/rate-limit.js";
import { ResourceExhaustedError } from "../../src/domain/errors.js";

class WrongCodeError extends Error {}

function limiter(maxKeys?: number) {
  return createAttemptLimiter({
    perCaller: 3,
    perAddress: 5,
    windowMs: 60_000,
    now: () => 0,
    isFailure: (err) => err instanceof WrongCodeError,
    refusal: "too many",
    maxKeys,
  });
}
const from = (address: string) => createContextValues().set(clientAddressKey, address);
const wrong = () => Promise.reject(new WrongCodeError());
const right = () => Promise.resolve("joined");

/** What one attempt ended in: "joined", "wrong", "limited" or the error's name. */
async function outcome(p: Promise<unknown>): Promise<string> {
  return p.then(
    (v) => String(v),
    (e: unknown) => (e instanceof ResourceExhaustedError ? "limited" : e instanceof WrongCodeError ? "wrong" : String(e)),
  );
}

test("past the per-caller limit failures are RESOURCE_EXHAUSTED, and a valid attempt still succeeds", async () => {
  const l = limiter();
  const seen = [];
  for (let i = 0; i < 5; i++) seen.push(await outcome(l.attempt(from("10.0.0.1"), "guesser", wrong)));
  assert.deepEqual(seen, ["wrong", "wrong", "wrong", "limited", "limited"]);
  assert.equal(await outcome(l.attempt(from("10.0.0.1"), "guesser", right)), "joined");
});

test("one address's failures limit only failures: every other caller there still gets in with a valid attempt", async () => {
  const l = limiter();
  const seen = [];
  for (let i = 0; i < 7; i++) seen.push(await outcome(l.attempt(from("::ffff:192.0.2.7"), `caller ${i}`, wrong)));
  assert.deepEqual(seen, ["wrong", "wrong", "wrong", "wrong", "wrong", "limited", "limited"]);
  assert.equal(await outcome(l.attempt(from("192.0.2.7"), "newcomer", wrong)), "limited", "the IPv4-mapped form is the same address");
  assert.equal(await outcome(l.attempt(from("192.0.2.7"), "newcomer", right)), "joined");
  assert.equal(await outcome(l.attempt(from("192.0.2.8"), "elsewhere", wrong)), "wrong", "another address");
});

test("errors that are not failures pass through uncounted", async () => {
  const l = limiter();
  const outage = () => Promise.reject(new ConnectError("db down"));
  for (let i = 0; i < 10; i++) assert.match(await outcome(l.attempt(from("10.0.0.9"), "c", outage)), /db down/);
  assert.equal(await outcome(l.attempt(from("10.0.0.9"), "c", wrong)), "wrong");
  assert.equal(l.size(), 2);
});

test("memory is bounded: 10,000 failing callers on 10,000 addresses leave at most 2 × maxKeys entries", async () => {
  const l = limiter(500);
  for (let i = 0; i < 10_000; i++) await outcome(l.attempt(from(`10.${i >> 8}.${i & 255}.1`), `caller ${i}`, wrong));
  assert.equal(l.size(), 1000);
});
