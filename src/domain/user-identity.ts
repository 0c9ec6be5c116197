import { createHash } from "node:crypto";

/**
 * The uid a person with this (issuer, subject) has, or will get on first
 * sign-in: a root-level uid derived deterministically, so role bindings can
 * be made before the person signs up (LookupIdentity).
 */
export function userIdentityUid(issuer: string, subject: string): string {
  return createHash("sha256").update(`user\u0000${issuer}\u0000${subject}`).digest("hex").slice(0, 40);
}

/**
 * The uid a person signing in through an organization's identity provider
 * gets: an identity in the provider's group, derived deterministically from
 * the provider and the token's subject, so every later sign-in finds it.
 */
export function providerUserUid(provider: { uid: string; parentUid: string; oidc: { issuer: string } }, subject: string): string {
  // The issuer is part of the key: re-pointing the provider at another issuer
  // must not let that issuer's subjects become the people already signed in.
  const segment = createHash("sha256").update(`idp\u0000${provider.uid}\u0000${provider.oidc.issuer}\u0000${subject}`).digest("hex").slice(0, 16);
  return `${provider.parentUid}/${segment}`;
}
