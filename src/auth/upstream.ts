import {
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
} from "jose";
import { UnauthenticatedError } from "../domain/errors.js";
import { addressAllowed, canonicalIssuer, userIssuerProblem, type IssuerPolicy } from "../domain/issuer.js";
import { QueryCache } from "../store/query-cache.js";
import { fetchJsonGuarded, type FetchLimits } from "./guarded-fetch.js";
import { ACCESS_TOKEN_TYPE } from "./tokens.js";

/** Algorithms accepted from upstream issuers; never "none", never HMAC. */
export const UPSTREAM_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];
const CLOCK_TOLERANCE = 60;
const DISCOVERY_TTL_MS = 10 * 60_000;
const DISCOVERY_FAILURE_TTL_MS = 30_000;
const FETCH_TIMEOUT_MS = 5_000;
const MAX_DOCUMENT_BYTES = 256 * 1024;
const JWKS_COOLDOWN_MS = 30_000;

/** Thrown (as UNAUTHENTICATED) whenever an upstream token cannot be trusted. */
function untrusted(why: string): UnauthenticatedError {
  return new UnauthenticatedError(`Unauthenticated: the upstream token was rejected: ${why}`);
}

/** How the verifier fetches and caches issuers' documents. */
export interface UpstreamOptions {
  /** PLATFORM_ALLOW_LOOPBACK_ISSUERS: user-supplied issuers may be http or https on loopback. */
  allowLoopback?: boolean;
  /** PLATFORM_USER_ISSUERS: issuers the operator trusts as given (any address, http allowed). */
  operatorIssuers?: readonly string[];
  /** One fetch's whole budget (default 5 s). */
  fetchTimeoutMs?: number;
  /** Issuers whose keys are kept at most (default 1,000; least recently used go first). */
  cacheEntries?: number;
  /** Upstream fetches in flight at most, over all issuers (default 16); past it, verification fails at once. */
  maxConcurrentFetches?: number;
}

/** What the verifier knows of one issuer: its keys, or that it failed, until a time. */
interface IssuerEntry {
  keys: JWTVerifyGetKey | null;
  until: number;
}

/** An upstream token's claims after full verification. */
export type UpstreamClaims = JWTPayload & { iss: string; sub: string };

/**
 * Verifies OIDC tokens from other issuers (CI platforms, IdPs) against each
 * issuer's discovery document and JWKS. Only canonical issuers are
 * considered (see issuer.ts), and before anything is fetched the issuer must
 * be one the caller trusts; issuers users supplied are fetched over https
 * from public addresses only. Documents are fetched with a timeout, a size
 * cap and no redirects, and kept in a bounded cache; concurrent verifies of
 * one issuer share one fetch, and unknown kids re-fetch the JWKS at most once
 * per cooldown.
 */
export class UpstreamVerifier {
  private readonly issuers: QueryCache<IssuerEntry>;
  private readonly inFlight = new Map<string, Promise<IssuerEntry>>();
  private fetching = 0;
  private readonly policy: IssuerPolicy;
  private readonly operatorIssuers: ReadonlySet<string>;
  private readonly fetchTimeoutMs: number;
  private readonly maxConcurrentFetches: number;

  constructor(
    private readonly now: () => number = Date.now,
    opts: UpstreamOptions = {},
  ) {
    this.policy = { allowLoopback: opts.allowLoopback ?? false };
    this.operatorIssuers = new Set(opts.operatorIssuers ?? []);
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? FETCH_TIMEOUT_MS;
    this.maxConcurrentFetches = opts.maxConcurrentFetches ?? 16;
    this.issuers = new QueryCache<IssuerEntry>(opts.cacheEntries ?? 1_000);
  }

  /** Issuers whose keys or failure are cached, for tests and metrics. */
  get cacheSize(): number {
    return this.issuers.size.entries;
  }

  /**
   * Verifies token as issued by an issuer that trustIssuer accepts. The issuer
   * must be canonical and trusted before anything is fetched, so a token
   * cannot make us fetch from a host nobody configured.
   */
  async verify(token: string, trustIssuer: (iss: string) => boolean): Promise<UpstreamClaims> {
    const iss = unverifiedIssuer(token);
    if (canonicalIssuer(iss) === undefined) throw untrusted("its issuer is not a canonical URL");
    if (!trustIssuer(iss)) throw untrusted(`issuer ${iss} is not trusted here`);
    const operator = this.operatorIssuers.has(iss);
    if (!operator && userIssuerProblem(iss, this.policy) !== undefined) throw untrusted("issuers must use https on a public address");
    const keys = await this.keysOf(iss, operator);
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

  private async keysOf(iss: string, operator: boolean): Promise<JWTVerifyGetKey> {
    const cached = this.issuers.get(iss);
    const entry = cached && cached.until > this.now() ? cached : await this.load(iss, operator);
    if (!entry.keys) throw untrusted(`the discovery document of ${iss} is unavailable`);
    return entry.keys;
  }

  /** Fetches an issuer's documents once for every concurrent verify of it. */
  private load(iss: string, operator: boolean): Promise<IssuerEntry> {
    let pending = this.inFlight.get(iss);
    if (!pending) {
      if (this.fetching >= this.maxConcurrentFetches) throw untrusted("too many issuers are being fetched at once; try again");
      this.fetching++;
      pending = this.discover(iss, operator)
        .then(
          (keys) => ({ keys, until: this.now() + DISCOVERY_TTL_MS }),
          () => ({ keys: null, until: this.now() + DISCOVERY_FAILURE_TTL_MS }),
        )
        .then((entry) => {
          this.issuers.set(iss, entry);
          return entry;
        })
        .finally(() => {
          this.fetching--;
          this.inFlight.delete(iss);
        });
      this.inFlight.set(iss, pending);
    }
    return pending;
  }

  private async discover(iss: string, operator: boolean): Promise<JWTVerifyGetKey> {
    const limits: FetchLimits = {
      timeoutMs: this.fetchTimeoutMs,
      maxBytes: MAX_DOCUMENT_BYTES,
      addressAllowed: operator ? () => true : (address) => addressAllowed(address, this.policy),
    };
    const doc = await fetchJsonGuarded(`${iss.replace(/\/+$/, "")}/.well-known/openid-configuration`, limits);
    if (doc.issuer !== iss) throw new Error("issuer mismatch");
    const jwksUri = doc.jwks_uri;
    if (typeof jwksUri !== "string" || !isCanonicalUrl(jwksUri)) throw new Error("bad jwks_uri");
    // A user-supplied issuer's keys come from its own origin: it cannot point us elsewhere.
    if (!operator && new URL(jwksUri).origin !== new URL(iss).origin) throw new Error("jwks_uri on another origin");
    let local = createLocalJWKSet((await fetchJsonGuarded(jwksUri, limits)) as unknown as JSONWebKeySet);
    let fetchedAt = this.now();
    // An unknown kid (a key rotated in) re-fetches the JWKS, at most once per cooldown.
    return async (header, token) => {
      try {
        return await local(header, token);
      } catch (err) {
        if (this.now() - fetchedAt < JWKS_COOLDOWN_MS) throw err;
        fetchedAt = this.now();
        local = createLocalJWKSet((await fetchJsonGuarded(jwksUri, limits)) as unknown as JSONWebKeySet);
        return local(header, token);
      }
    };
  }
}

/** True for an absolute http(s) URL that new URL() gives back unchanged (a JWKS URL may carry a query). */
function isCanonicalUrl(url: string): boolean {
  try {
    const u = new URL(url);
    return (
      (u.protocol === "https:" || u.protocol === "http:") && u.href === url && u.username === "" && u.password === "" && !url.includes("\\")
    );
  } catch {
    return false;
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
