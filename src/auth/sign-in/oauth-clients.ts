import { createHash, randomBytes, randomInt, timingSafeEqual } from "node:crypto";

/** Our own OAuth clients: public, PKCE S256 required, no secret. */
export interface OAuthClient {
  id: string;
  /** The one path a loopback redirect URI may have (RFC 8252 §7.3: any port, this exact path). */
  redirectPath: string;
}

/** The command line (`platform-api auth login`): loopback redirects and the device grant. */
export const PLATFORM_CLI: OAuthClient = { id: "platform-cli", redirectPath: "/callback" };

/** Every client this authorization server knows; nothing else may ask for a code or a device flow. */
export const OAUTH_CLIENTS: ReadonlyMap<string, OAuthClient> = new Map([[PLATFORM_CLI.id, PLATFORM_CLI]]);

/** How long a pending sign-in lives. */
export const FLOW_LIFETIME_MS = 10 * 60_000;
/** How long our authorization code may be redeemed. */
export const CODE_LIFETIME_MS = 60_000;
/** A device flow's first polling interval (seconds); slow_down adds 5 each time. */
export const DEVICE_POLL_SECONDS = 5;

const LOOPBACK_REDIRECT = /^http:\/\/(127\.0\.0\.1|\[::1\]):([1-9][0-9]{0,4})(\/[^?#]*)$/;

/**
 * Whether redirectUri is one of client's: `http://127.0.0.1:<port><path>` or
 * `http://[::1]:<port><path>`, written exactly so (no userinfo, query,
 * fragment, other host spelling or https), the port given, and the path the
 * client registered. Matched as text before any URL parsing, so nothing a
 * parser normalizes (`127.1`, `%2e`, `\`) can slip through.
 */
export function loopbackRedirectAllowed(client: OAuthClient, redirectUri: string): boolean {
  const m = LOOPBACK_REDIRECT.exec(redirectUri);
  return m !== null && Number(m[2]) <= 65535 && m[3] === client.redirectPath;
}

/** sha256, base64url: how every secret handle (codes, states, cookies) is stored. */
export function hashOf(secret: string): string {
  return createHash("sha256").update(secret).digest("base64url");
}

/** A random 128-bit handle, base64url (flow ids). */
export const newHandle = () => randomBytes(16).toString("base64url");
/** A random 256-bit secret, base64url (codes, cookies, device codes). */
export const newSecret = () => randomBytes(32).toString("base64url");

/** Whether verifier is a valid RFC 7636 verifier whose S256 challenge is challenge. */
export function pkceMatches(verifier: string, challenge: string): boolean {
  if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier)) return false;
  const a = Buffer.from(hashOf(verifier));
  const b = Buffer.from(challenge);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A valid S256 challenge: 43 base64url characters (a SHA-256). */
export const isS256Challenge = (challenge: string) => /^[A-Za-z0-9_-]{43}$/.test(challenge);

/** RFC 8628 §6.1: consonants only (no vowels, so no words; no look-alikes), shown as XXXX-XXXX. */
const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";
const USER_CODE_LENGTH = 8;

/** A new user code, XXXX-XXXX: 20^8 ≈ 2^34.6 codes, guessed only at the attempt limiter's pace. */
export function newUserCode(): string {
  let code = "";
  for (let i = 0; i < USER_CODE_LENGTH; i++) code += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/** A user code as typed, in its stored form (case, dashes and spaces ignored), or null when it cannot be one. */
export function normalizeUserCode(typed: string): string | null {
  const code = typed.toUpperCase().replace(/[\s-]/g, "");
  if (code.length !== USER_CODE_LENGTH || [...code].some((c) => !USER_CODE_ALPHABET.includes(c))) return null;
  return code;
}

/**
 * A device code carrying its expiry (ms, base 36) before the secret, so that
 * a code the store has forgotten can still be told apart: expired_token
 * rather than invalid_grant. The expiry is not secret and chooses nothing
 * but which of the two refusals is sent.
 */
export function newDeviceCode(expireTime: number): string {
  return `${expireTime.toString(36)}.${newSecret()}`;
}

/** The expiry written in a device code, or null when it has none. */
export function deviceCodeExpiry(code: string): number | null {
  const m = /^([0-9a-z]{1,12})\.[A-Za-z0-9_-]{43}$/.exec(code);
  return m ? parseInt(m[1]!, 36) : null;
}
