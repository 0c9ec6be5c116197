import { createLocalJWKSet, createRemoteJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from "jose";
import { UnauthenticatedError } from "../domain/errors.js";
import { ACCESS_TOKEN_TYPE } from "./tokens.js";

/** Algorithms accepted from upstream issuers; never "none", never HMAC. */
export const UPSTREAM_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];
const CLOCK_TOLERANCE = 60;
const DISCOVERY_TTL_MS = 10 * 60_000;
const DISCOVERY_FAILURE_TTL_MS = 30_000;
const FETCH_TIMEOUT_MS = 5_000;
const MAX_DOCUMENT_BYTES = 256 * 1024;

/** Thrown (as UNAUTHENTICATED) whenever an upstream token cannot be trusted. */
function untrusted(why: string): UnauthenticatedError {
  return new UnauthenticatedError(`Unauthenticated: the upstream token was rejected: ${why}`);
}

/** True for https URLs, and for http URLs on a loopback host (development and tests). */
export function isTrustedIssuerUrl(url: string): boolean {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (u.username || u.password || u.hash || u.search) return false;
  if (u.protocol === "https:") return true;
  return u.protocol === "http:" && ["127.0.0.1", "localhost", "[::1]"].includes(u.hostname);
}

/** An upstream token's claims after full verification. */
export type UpstreamClaims = JWTPayload & { iss: string; sub: string };

/**
 * Verifies OIDC tokens from other issuers (CI platforms, IdPs) against each
 * issuer's discovery document and JWKS, fetched over https (or loopback http)
 * and cached; unknown kids re-fetch the JWKS at most once per cooldown.
 */
export class UpstreamVerifier {
  private readonly issuers = new Map<string, { keys: JWTVerifyGetKey | null; until: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * Verifies token as issued by an issuer that trustIssuer accepts. The issuer
   * is checked before anything is fetched, so a token cannot make us fetch
   * from a host nobody configured.
   */
  async verify(token: string, trustIssuer: (iss: string) => boolean): Promise<UpstreamClaims> {
    const iss = unverifiedIssuer(token);
    if (!trustIssuer(iss)) throw untrusted(`issuer ${iss} is not trusted here`);
    if (!isTrustedIssuerUrl(iss)) throw untrusted("issuers must use https (plain http only on loopback)");
    const keys = await this.keysOf(iss);
    return verifyWith(token, keys, iss, this.now());
  }

  /** Verifies a token against a pre-registered JWKS (static-keys identities). */
  async verifyStatic(token: string, jwks: string, issuer: string): Promise<UpstreamClaims> {
    let keys: JWTVerifyGetKey;
    try {
      keys = createLocalJWKSet(JSON.parse(jwks));
    } catch {
      throw untrusted("the identity's registered keys are unusable");
    }
    return verifyWith(token, keys, issuer, this.now());
  }

  private async keysOf(iss: string): Promise<JWTVerifyGetKey> {
    const now = this.now();
    const cached = this.issuers.get(iss);
    if (cached && cached.until > now) {
      if (!cached.keys) throw untrusted(`the discovery document of ${iss} is unavailable`);
      return cached.keys;
    }
    try {
      const doc = await fetchJson(`${iss.replace(/\/+$/, "")}/.well-known/openid-configuration`);
      if (doc.issuer !== iss) throw new Error("issuer mismatch");
      if (typeof doc.jwks_uri !== "string" || !isTrustedIssuerUrl(doc.jwks_uri)) throw new Error("bad jwks_uri");
      const keys = createRemoteJWKSet(new URL(doc.jwks_uri), {
        timeoutDuration: FETCH_TIMEOUT_MS,
        cooldownDuration: 30_000,
        cacheMaxAge: DISCOVERY_TTL_MS,
      });
      this.issuers.set(iss, { keys, until: now + DISCOVERY_TTL_MS });
      return keys;
    } catch {
      this.issuers.set(iss, { keys: null, until: now + DISCOVERY_FAILURE_TTL_MS });
      throw untrusted(`the discovery document of ${iss} is unavailable`);
    }
  }
}

function unverifiedIssuer(token: string): string {
  try {
    const header = decodeProtectedHeader(token);
    if (header.typ !== undefined && header.typ.toLowerCase() === ACCESS_TOKEN_TYPE) throw new Error("access token");
    const iss = decodeJwt(token).iss;
    if (typeof iss !== "string" || iss === "") throw new Error("no iss");
    return iss;
  } catch {
    throw untrusted("it is not an OIDC ID token");
  }
}

async function verifyWith(token: string, keys: JWTVerifyGetKey, issuer: string, now: number): Promise<UpstreamClaims> {
  try {
    const { payload } = await jwtVerify(token, keys, {
      algorithms: UPSTREAM_ALGORITHMS,
      issuer,
      requiredClaims: ["exp", "iat", "sub"],
      clockTolerance: CLOCK_TOLERANCE,
      currentDate: new Date(now),
    });
    if (typeof payload.sub !== "string" || payload.sub === "") throw new Error("sub");
    if (typeof payload.iat === "number" && payload.iat > now / 1000 + CLOCK_TOLERANCE) throw new Error("iat in the future");
    return payload as UpstreamClaims;
  } catch {
    throw untrusted("its signature, issuer or validity period does not check out");
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function fetchJson(url: string): Promise<Record<string, any>> {
  const res = await fetch(url, { redirect: "error", signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const text = await res.text();
  if (text.length > MAX_DOCUMENT_BYTES) throw new Error("too large");
  const doc = JSON.parse(text);
  if (typeof doc !== "object" || doc === null) throw new Error("not an object");
  return doc;
}
