import assert from "node:assert/strict";
import { assertRestError, fieldViolations, preconditionViolations } from "./assertions.js";
import type { RestResult } from "./server.js";

/**
 * Asserts INVALID_ARGUMENT whose BadRequest names exactly these fields, the
 * first of them in the message, in a body of nothing but code, message and
 * details. Returns the body.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function assertViolations(res: RestResult, fields: string[]): any {
  const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
  assert.deepEqual(Object.keys(err).sort(), ["code", "details", "message"]);
  assert.equal(err.details.filter((d: { "@type": string }) => d["@type"] === "type.googleapis.com/google.rpc.BadRequest").length, 1);
  assert.deepEqual(
    fieldViolations(err).map((v) => v.field),
    fields,
    JSON.stringify(err),
  );
  assert.ok(err.message.startsWith(`Invalid argument: ${fields[0]}: `), err.message);
  return err;
}

/** Asserts FAILED_PRECONDITION with exactly one violation, of this type, its description matching. */
export function assertPrecondition(res: RestResult, type: string, description: RegExp): void {
  const err = assertRestError(res, 400, 9, "FAILED_PRECONDITION");
  assert.match(err.message, /^Precondition failed: /);
  const violations = preconditionViolations(err);
  assert.equal(violations.length, 1);
  assert.equal(violations[0]!.type, type);
  assert.match(violations[0]!.description, description);
}
