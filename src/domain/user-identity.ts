import { createHash } from "node:crypto";

/**
 * The uid a person with this (issuer, subject) has, or will get on first
 * sign-in: a root-level uid derived deterministically, so role bindings can
 * be made before the person signs up (LookupIdentity).
 */
export function userIdentityUid(issuer: string, subject: string): string {
  return createHash("sha256").update(`user\u0000${issuer}\u0000${subject}`).digest("hex").slice(0, 40);
}
