import {
  createLocalJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  jwtVerify,
  type JSONWebKeySet,
  type JWTPayload,
  type JWTVerifyGetKey,
} from "jose";
import { UnauthenticatedError, UnavailableError, type ApiError } from "../domain/errors.js";
import { canonicalIssuer, userIssuerProblem, type IssuerPolicy } from "../domain/issuer.js";
import { outboundAddressAllowed } from "../domain/outbound-address.js";
import { QueryCache } from "../store/decorators/query-cache.js";
import { DEFAULT_FETCH_SLOT_LIMITS, FetchSlots, type FetchSlotLimits, type SlotRequest } from "./fetch-slots.js";
import { fetchJsonGuarded, FetchRefusedError, type FetchLimits } from "./guarded-fetch.js";
import { ACCESS_TOKEN_TYPE } from "./tokens.js";

/** Algorithms accepted from upstream issuers; never "none", never HMAC. */
export const UPSTREAM_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];
const CLOCK_TOLERANCE = 60;

/**
 * The longest lifetime (exp − iat, seconds) a static-keys identity's token may
 * claim: 24 hours. Such a token is a workload's self-signed credential, and
 * `platform-api sign-jwt` issues 1 hour (its cap); a day leaves room for other
 * signers and a batch job's slow start, while a token signed for 10 years with
 * a registered key stops being worth anything a day after its iat.
 */
export const MAX_STATIC_TOKEN_LIFETIME_SECONDS = 24 * 3600;

/**
 * The longest lifetime (exp − iat, seconds) a token of an online issuer
 * (discovery + JWKS: claimMatch identities, identity providers, sign-in
 * issuers) may claim: 7 days. Real providers stay far below it (GitHub
 * Actions 5–60 min, Google and Entra ID about an hour, Kubernetes projected
 * service-account tokens 1 h by default and days when so configured), so
 * none breaks, but a leaked token an issuer minted for years is refused.
 */
export const MAX_ONLINE_TOKEN_LIFETIME_SECONDS = 7 * 24 * 3600;
const DISCOVERY_TTL_MS = 10 * 60_000;
/** How long a failed issuer is not fetched again (whatever the number of exchanges naming it). */
export const ISSUER_FAILURE_TTL_MS = 30_000;
const FETCH_TIMEOUT_MS = 5_000;
/** A never-seen issuer's budget: a real IdP answers discovery well within it; a host that holds the socket costs less. */
const NEW_ISSUER_TIMEOUT_MS = 2_000;
const MAX_DOCUMENT_BYTES = 256 * 1024;
const JWKS_COOLDOWN_MS = 30_000;
/** Text of registered static JWKS whose imported keys are kept (least recently used go first). */
const STATIC_KEYS_CACHE_BYTES = 4 * 1024 * 1024;

/** Thrown (as UNAUTHENTICATED) whenever an upstream token cannot be trusted. */
function untrusted(why: string): UnauthenticatedError {
  return new UnauthenticatedError(`Unauthenticated: the upstream token was rejected: ${why}`);
}

/** Thrown (as UNAVAILABLE) when the token could not be checked: its issuer did not answer, or no fetch could be started. */
function uncheckable(why: string): UnavailableError {
  return new UnavailableError(`Unavailable: the upstream token could not be checked: ${why}; retry shortly`);
}

/** How the verifier fetches and caches issuers' documents. */
export interface UpstreamOptions {
  /** PLATFORM_ALLOW_LOOPBACK_ISSUERS: user-supplied issuers may be http or https on loopback. */
  allowLoopback?: boolean;
  /** PLATFORM_USER_ISSUERS: issuers the operator trusts as given (any address, http allowed). */
  operatorIssuers?: readonly string[];
  /** One fetch's whole budget for an operator issuer or one that answered before (default 5 s). */
  fetchTimeoutMs?: number;
  /** One fetch's whole budget for an issuer never seen answering (default 2 s, or fetchTimeoutMs if lower). */
  newIssuerTimeoutMs?: number;
  /** Issuers whose keys are kept at most, and failed issuers remembered at most (default 1,000 each; least recently used go first). */
  cacheEntries?: number;
  /** How fetch capacity is shared (default 16 in flight, 8 reserved, 2 per tenant); past it, verification fails at once. */
  fetchSlots?: Partial<FetchSlotLimits>;
}

/** An issuer that answered: its keys until a time. Kept past that time, it still counts as known (a priority fetch). */
interface KnownIssuer {
  jwksUri: string;
  keys: JWTVerifyGetKey;
  until: number;
  jwksFetchedAt: number;
  operator: boolean;
  /** Set when a later fetch failed: it counts as never seen again until it answers. */
  demoted: boolean;
}

/** An issuer that failed, until a time; transient when it did not answer (the token could not be checked). */
interface FailedIssuer {
  transient: boolean;
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
 *
 * Fetch capacity is shared fairly (fetch-slots.ts): each tenant holds a few
 * fetches at most, never-seen issuers get a shorter timeout and cannot take
 * the slots reserved for operator issuers and issuers that answered before,
 * and a failed issuer is remembered (in its own bounded cache, so failures
 * never evict working issuers' keys) and not fetched again for 30 s. When
 * the token could not be checked (no answer, no capacity) the answer is
 * UNAVAILABLE, so a client retries instead of believing its token bad.
 */
export class UpstreamVerifier {
  private readonly known: QueryCache<KnownIssuer>;
  private readonly failed: QueryCache<FailedIssuer>;
  /** Static-keys identities' key sets by their registered JWKS text, at most STATIC_KEYS_CACHE_BYTES of it. */
  private readonly staticKeys = new QueryCache<JWTVerifyGetKey>(STATIC_KEYS_CACHE_BYTES);
  private readonly inFlight = new Map<string, Promise<KnownIssuer>>();
  private readonly slots: FetchSlots;
  private readonly policy: IssuerPolicy;
  private readonly operatorIssuers: ReadonlySet<string>;
  private readonly fetchTimeoutMs: number;
  private readonly newIssuerTimeoutMs: number;

  constructor(
    private readonly now: () => number = Date.now,
    opts: UpstreamOptions = {},
  ) {
    this.policy = { allowLoopback: opts.allowLoopback ?? false };
    this.operatorIssuers = new Set(opts.operatorIssuers ?? []);
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? FETCH_TIMEOUT_MS;
    this.newIssuerTimeoutMs = opts.newIssuerTimeoutMs ?? Math.min(NEW_ISSUER_TIMEOUT_MS, this.fetchTimeoutMs);
    this.slots = new FetchSlots({ ...DEFAULT_FETCH_SLOT_LIMITS, ...opts.fetchSlots });
    this.known = new QueryCache<KnownIssuer>(opts.cacheEntries ?? 1_000);
    this.failed = new QueryCache<FailedIssuer>(opts.cacheEntries ?? 1_000);
  }

  /** Verifies that found the issuer's keys cached and current (hits), or had to fetch or refuse (misses), for metrics. */
  readonly discoveryLookups = { hits: 0, misses: 0 };

  /** Static-keys identities' key sets found imported (hits) or imported now (misses), for metrics. */
  get staticKeyLookups(): { hits: number; misses: number } {
    return { hits: this.staticKeys.hits, misses: this.staticKeys.misses };
  }

  /** Issuers whose keys or failure are cached, for tests and metrics. */
  get cacheSize(): number {
    return this.known.size.entries + this.failed.size.entries;
  }

  /** Upstream fetches in flight now, for tests and metrics. */
  get fetchesInFlight(): number {
    return this.slots.inFlight;
  }

  /**
   * Verifies token as issued by an issuer that trustIssuer accepts. The issuer
   * must be canonical and trusted before anything is fetched, so a token
   * cannot make us fetch from a host nobody configured. tenant names who made
   * the issuer trusted (the organization of the identity or provider); its
   * fetches count against that tenant's share. The operator's issuers are
   * nobody's share.
   */
  async verify(token: string, trustIssuer: (iss: string) => boolean, tenant?: string): Promise<UpstreamClaims> {
    const iss = unverifiedIssuer(token);
    if (canonicalIssuer(iss) === undefined) throw untrusted("its issuer is not a canonical URL");
    if (!trustIssuer(iss)) throw untrusted(`issuer ${iss} is not trusted here`);
    const operator = this.operatorIssuers.has(iss);
    if (!operator && userIssuerProblem(iss, this.policy) !== undefined) throw untrusted("issuers must use https on a public address");
    const share = operator ? undefined : tenant;
    const known = await this.keysOf(iss, operator, share);
    return verifyWith(token, this.keyResolver(known, share), iss, this.now(), MAX_ONLINE_TOKEN_LIFETIME_SECONDS);
  }

  /** Verifies a token against a pre-registered JWKS (static-keys identities). */
  async verifyStatic(token: string, jwks: string, issuer: string): Promise<UpstreamClaims> {
    let keys = this.staticKeys.get(jwks);
    if (!keys) {
      try {
        keys = createLocalJWKSet(JSON.parse(jwks));
      } catch {
        throw untrusted("the identity's registered keys are unusable");
      }
      // Kept so each registered key is imported once, not per exchange; weighed by its text.
      this.staticKeys.set(jwks, keys, jwks.length);
    }
    return verifyWith(token, keys, issuer, this.now(), MAX_STATIC_TOKEN_LIFETIME_SECONDS);
  }

  private async keysOf(iss: string, operator: boolean, tenant: string | undefined): Promise<KnownIssuer> {
    const known = this.known.get(iss);
    if (known && known.until > this.now()) {
      this.discoveryLookups.hits++;
      return known;
    }
    this.discoveryLookups.misses++;
    const failed = this.failed.get(iss);
    if (failed && failed.until > this.now()) throw this.failure(iss, failed);
    return this.load(iss, { tenant, priority: operator || (known !== undefined && !known.demoted) }, operator);
  }

  private failure(iss: string, failed: FailedIssuer): ApiError {
    return failed.transient ? uncheckable(`issuer ${iss} did not answer`) : untrusted(`the discovery document of ${iss} is unusable`);
  }

  /**
   * Runs fetch in a slot of the tenant's share of issuer fetches (the
   * operator's issuers may take reserved slots), or refuses at once: the
   * sign-in leg's discovery and code exchange share this capacity, so a
   * provider that never answers costs only its organization's share.
   */
  async inFetchSlot<T>(slot: SlotRequest, fetch: () => Promise<T>): Promise<T> {
    const release = this.slots.tryAcquire(slot);
    if (!release) throw uncheckable("too many issuer fetches are in flight");
    try {
      return await fetch();
    } finally {
      release();
    }
  }

  /**
   * Fetches an issuer's documents once for every concurrent verify of it, in
   * a slot of the asking tenant's share; without one, refuses at once.
   */
  private load(iss: string, slot: SlotRequest, operator: boolean): Promise<KnownIssuer> {
    const pending = this.inFlight.get(iss);
    if (pending) return pending;
    const release = this.slots.tryAcquire(slot);
    if (!release) throw uncheckable("too many issuer fetches are in flight");
    const timeoutMs = slot.priority ? this.fetchTimeoutMs : this.newIssuerTimeoutMs;
    const loading = this.discover(iss, operator, timeoutMs)
      .then(
        (known) => {
          this.known.set(iss, known);
          return known;
        },
        (err: unknown) => {
          // A failed issuer is no longer known: its next fetch is a never-seen issuer's, until it answers again.
          const failed = { transient: err instanceof FetchRefusedError && err.transient, until: this.now() + ISSUER_FAILURE_TTL_MS };
          const known = this.known.get(iss);
          if (known) known.demoted = true;
          this.failed.set(iss, failed);
          throw this.failure(iss, failed);
        },
      )
      .finally(() => {
        release();
        this.inFlight.delete(iss);
      });
    this.inFlight.set(iss, loading);
    return loading;
  }

  /** Fetches the discovery document, then the JWKS, both within the one timeout (a slot is held for timeoutMs at most). */
  private async discover(iss: string, operator: boolean, timeoutMs: number): Promise<KnownIssuer> {
    const deadline = performance.now() + timeoutMs;
    const doc = await fetchJsonGuarded(
      `${iss.replace(/\/+$/, "")}/.well-known/openid-configuration`,
      this.fetchLimits(operator, timeoutMs),
    );
    if (doc.issuer !== iss) throw new Error("issuer mismatch");
    const jwksUri = doc.jwks_uri;
    if (typeof jwksUri !== "string" || !isCanonicalUrl(jwksUri)) throw new Error("bad jwks_uri");
    // A user-supplied issuer's keys come from its own origin: it cannot point us elsewhere.
    if (!operator && new URL(jwksUri).origin !== new URL(iss).origin) throw new Error("jwks_uri on another origin");
    const left = Math.max(1, Math.round(deadline - performance.now()));
    const keys = createLocalJWKSet((await fetchJsonGuarded(jwksUri, this.fetchLimits(operator, left))) as unknown as JSONWebKeySet);
    const now = this.now();
    return { jwksUri, keys, until: now + DISCOVERY_TTL_MS, jwksFetchedAt: now, operator, demoted: false };
  }

  private fetchLimits(operator: boolean, timeoutMs: number): FetchLimits {
    return {
      timeoutMs,
      maxBytes: MAX_DOCUMENT_BYTES,
      // The operator's issuers (PLATFORM_USER_ISSUERS) may be anywhere; a tenant's only where outbound-address.ts allows.
      addressAllowed: operator ? () => true : (address) => outboundAddressAllowed(address, this.policy),
    };
  }

  /**
   * The issuer's keys; an unknown kid (a key rotated in) re-fetches the JWKS,
   * at most once per cooldown and in a slot of the asking tenant's share.
   */
  private keyResolver(known: KnownIssuer, tenant: string | undefined): JWTVerifyGetKey {
    return async (header, token) => {
      try {
        return await known.keys(header, token);
      } catch (err) {
        if (this.now() - known.jwksFetchedAt < JWKS_COOLDOWN_MS) throw err;
        const release = this.slots.tryAcquire({ tenant, priority: true });
        if (!release) throw uncheckable("too many issuer fetches are in flight");
        known.jwksFetchedAt = this.now();
        try {
          const jwks = await fetchJsonGuarded(known.jwksUri, this.fetchLimits(known.operator, this.fetchTimeoutMs));
          known.keys = createLocalJWKSet(jwks as unknown as JSONWebKeySet);
        } catch (fetchErr) {
          if (fetchErr instanceof FetchRefusedError && fetchErr.transient) throw uncheckable("the issuer's JWKS did not answer");
          throw fetchErr;
        } finally {
          release();
        }
        return known.keys(header, token);
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

/**
 * Verifies signature, issuer and validity period. iat is required and may not
 * lie in the future, and exp − iat may not exceed maxLifetimeSeconds, so exp
 * is at most maxLifetimeSeconds (plus the skew tolerated) after now: a token
 * claiming a longer life gets the same answer as an expired one.
 */
async function verifyWith(
  token: string,
  keys: JWTVerifyGetKey,
  issuer: string,
  now: number,
  maxLifetimeSeconds: number,
): Promise<UpstreamClaims> {
  try {
    const { payload } = await jwtVerify(token, keys, {
      algorithms: UPSTREAM_ALGORITHMS,
      issuer,
      requiredClaims: ["exp", "iat", "sub"],
      clockTolerance: CLOCK_TOLERANCE,
      currentDate: new Date(now),
    });
    if (typeof payload.sub !== "string" || payload.sub === "") throw new Error("sub");
    const { iat, exp } = payload;
    // Checked here too, not only by requiredClaims: a missing iat must never make the lifetime NaN (which passes).
    if (typeof iat !== "number" || typeof exp !== "number") throw new Error("exp and iat are required");
    if (iat > now / 1000 + CLOCK_TOLERANCE) throw new Error("iat in the future");
    if (exp - iat > maxLifetimeSeconds) throw new Error("lifetime too long");
    return payload as UpstreamClaims;
  } catch (err) {
    // The key resolver's UNAVAILABLE (a JWKS re-fetch that could not happen) passes as it is.
    if (err instanceof UnavailableError) throw err;
    throw untrusted("its signature, issuer or validity period does not check out");
  }
}
