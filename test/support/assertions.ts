import assert from "node:assert/strict";
import { ConnectError } from "@connectrpc/connect";
import type { RestResult } from "./server.js";

const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";

/**
 * Asserts a REST error in the spec's shape: the HTTP status, the body
 * {code, message, details}, exactly one ErrorInfo with the given reason.
 * Returns the body for further checks.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function assertRestError(res: RestResult, status: number, code: number, reason: string): any {
  assert.equal(res.status, status, `HTTP status; body: ${JSON.stringify(res.body)}`);
  assert.equal(typeof res.body, "object", "error body is JSON");
  assert.equal(res.body.code, code);
  assert.equal(typeof res.body.message, "string");
  assert.ok(Array.isArray(res.body.details));
  const infos = res.body.details.filter((d: { "@type": string }) => d["@type"] === ERROR_INFO);
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  assert.equal(infos[0].reason, reason);
  assert.equal(typeof infos[0].domain, "string");
  assert.ok(!/at .*\.(ts|js):\d+|SQLITE|sqlite|SELECT |INSERT /.test(JSON.stringify(res.body)), "no stack or SQL text");
  return res.body;
}

/** The BadRequest field violations of an error body. */
export function fieldViolations(body: { details: { "@type": string; fieldViolations?: { field: string; description: string }[] }[] }) {
  return body.details.find((d) => d["@type"] === "type.googleapis.com/google.rpc.BadRequest")?.fieldViolations ?? [];
}

/** The PreconditionFailure violations of an error body. */
export function preconditionViolations(body: { details: { "@type": string; violations?: { type: string; description: string }[] }[] }) {
  return body.details.find((d) => d["@type"] === "type.googleapis.com/google.rpc.PreconditionFailure")?.violations ?? [];
}

/** RFC 3339 UTC with exactly three fractional digits. */
export const MILLIS_TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** Awaits a call that must fail and returns its ConnectError. */
export async function connectError(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof ConnectError, `expected a ConnectError, got ${String(err)}`);
    return err;
  }
  return assert.fail("the call succeeded");
}

/** Rejects when `promise` has not settled within `ms` (a liveness bound, not a timing assertion). */
export async function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Polls check every stepMs until it holds; rejects once ms have passed (a liveness bound, not a timing assertion)
 * and stops polling then, so a failed wait leaves nothing running.
 */
export async function until(ms: number, check: () => boolean | Promise<boolean>, what: string, stepMs = 20): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

/** A promise and the function that resolves it: a test holds a call on one, or learns that something happened. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** The message of the error promise rejects with, which must be a type; fails the test if it resolves. */
export async function rejectionOf(promise: Promise<unknown>, type: abstract new (...args: never[]) => Error): Promise<string> {
  const err = await promise.then(
    () => assert.fail("it succeeded"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof type, String(err));
  return err.message;
}
