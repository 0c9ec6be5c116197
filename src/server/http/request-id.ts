import { randomBytes } from "node:crypto";

const prefix = randomBytes(4).toString("hex");
let counter = 0;

/** A request id unique to this process run: a random prefix and a counter. */
export function nextRequestId(): string {
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `${prefix}-${counter.toString(36)}`;
}

const CLIENT_ID = /^[A-Za-z0-9._:-]{1,64}$/;

/** The caller's x-request-id when it is a sane token, else a fresh id. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === "string" && CLIENT_ID.test(header) ? header : nextRequestId();
}
