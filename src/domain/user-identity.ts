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
 * the provider, its issuer and client and the token's subject, so every later
 * sign-in finds it.
 */
export function providerUserUid(
  provider: { uid: string; parentUid: string; oidc: { issuer: string; clientId: string } },
  subject: string,
): string {
  // Issuer and client are part of the key: re-pointing the provider at
  // another issuer, or at another application of the same (multi-tenant)
  // issuer whose subjects someone else controls, must not let those subjects
  // become the people already signed in; they are new people.
  const key = ["idp", provider.uid, provider.oidc.issuer, provider.oidc.clientId, subject].join("\u0000");
  const segment = createHash("sha256").update(key).digest("hex").slice(0, 16);
  return `${provider.parentUid}/${segment}`;
}
