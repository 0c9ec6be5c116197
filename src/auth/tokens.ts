import { randomBytes } from "node:crypto";
import { errors, exportJWK, generateKeyPair, importJWK, jwtVerify, SignJWT, type JWK, type JWTPayload } from "jose";
import { UnauthenticatedError } from "../domain/errors.js";
import type { KeyStore } from "../store/store.js";

/** RFC 9068 access-token type: our verifier requires it, so an ID token can never pass as one. */
export const ACCESS_TOKEN_TYPE = "at+jwt";
/** Lifetime of every API token we issue (spec §8). */
export const TOKEN_LIFETIME_SECONDS = 3600;
const ALGORITHM = "ES256";
/** Seconds of clock skew tolerated on exp, nbf and iat. */
const CLOCK_TOLERANCE = 30;
const VERIFIED_CACHE_LIMIT = 50_000;
/** At most one re-read of the key table per interval when an unknown kid shows up. */
const KEY_RELOAD_INTERVAL_MS = 1_000;

/** A token we issued, verified. */
export interface VerifiedToken {
  subject: string;
  issuer: string;
  audience: string[];
  issuedAt: number;
  expiresAt: number;
}

const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * True for three dot-separated parts, each canonical unpadded base64url: a
 * decoder ignores the unused low bits of a part's last character, so "…Q"
 * and "…R" can decode to the same bytes; only the spelling we would encode
 * counts (RFC 7515 §2 and RFC 4648 §3.5). Without this, a token with its
 * last character changed kept verifying.
 */
export function isCanonicalCompactJws(token: string): boolean {
  const parts = token.split(".");
  return (
    parts.length === 3 &&
    parts.every((part) => BASE64URL.test(part) && part.length % 4 !== 1 && Buffer.from(part, "base64url").toString("base64url") === part)
  );
}

/**
 * A bearer token refused, with a message a client may read (missing, expired,
 * another audience, an unknown key, or simply not ours) and the exact reason
 * for the server's log only. Expiry and audience are told only of tokens whose
 * signature verified: a forger learns nothing from them.
 */
export class TokenRejectedError extends UnauthenticatedError {
  constructor(
    message: string,
    readonly detail: string,
  ) {
    super(message);
    this.name = "TokenRejectedError";
  }
}

const NOT_OURS = "Unauthenticated: the bearer token is not a valid API token of this server";

/** Thrown by the key lookup for a kid none of our keys has. */
class UnknownKeyError extends Error {
  constructor(kid: string) {
    super(`unknown kid ${JSON.stringify(kid.slice(0, 64))}`);
    this.name = "UnknownKeyError";
  }
}

/** The client's message for a jose verification failure, and the exact reason for the log. */
function rejection(err: unknown): TokenRejectedError {
  const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (err instanceof errors.JWTExpired)
    return new TokenRejectedError("Unauthenticated: the API token has expired; request a new one", detail);
  // The likely cause of each, for an operator who minted a token with another environment: nothing secret.
  if (err instanceof errors.JWTClaimValidationFailed && err.claim === "aud") {
    return new TokenRejectedError(
      "Unauthenticated: the API token was issued for another audience, not this server (mint it with this server's PLATFORM_BASE_URL and PORT)",
      detail,
    );
  }
  if (err instanceof errors.JWTClaimValidationFailed && err.claim === "iss") {
    return new TokenRejectedError(
      "Unauthenticated: the API token was issued by another address, not this server's (mint it with this server's PLATFORM_AUTH_URL and PORT)",
      detail,
    );
  }
  if (err instanceof UnknownKeyError) {
    return new TokenRejectedError(
      "Unauthenticated: the API token is signed by a key this server does not know (mint it with this server's PLATFORM_DATA_DIR or database)",
      detail,
    );
  }
  return new TokenRejectedError(NOT_OURS, detail);
}

/** An issued token and when it expires (ms since the epoch). */
export interface IssuedToken {
  token: string;
  expiresAt: number;
}

/** Generates an ES256 key pair and stores it; it signs every token from then on. */
export async function addSigningKey(keys: KeyStore, now = Date.now()): Promise<string> {
  const { privateKey, publicKey } = await generateKeyPair(ALGORITHM, { extractable: true });
  const kid = randomBytes(12).toString("base64url");
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: ALGORITHM, use: "sig" };
  const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: ALGORITHM };
  await keys.addSigningKey({ kid, privateJwk: JSON.stringify(privateJwk), publicJwk: JSON.stringify(publicJwk), createTime: now });
  return kid;
}

/**
 * Issues and verifies this server's API tokens: JWTs signed with the newest key
 * in the store, iss = auth URL, aud = base URL, sub = identity uid, one hour.
 * Verification pins ES256, requires exp/iat/sub, checks iss, aud and typ, and
 * caches verified tokens until they expire (a verify costs more than a request).
 */
export class TokenService {
  private verifyKeys = new Map<string, CryptoKey>();
  private signing: { kid: string; key: CryptoKey } | null = null;
  private lastReload = 0;
  private readonly verified = new Map<string, VerifiedToken>();

  private constructor(
    private readonly keys: KeyStore,
    readonly issuer: string,
    readonly audience: string,
    private readonly now: () => number,
    private readonly onCache: (hit: boolean) => void,
  ) {}

  /** Loads the keys, creating the first one on first start. */
  static async open(
    keys: KeyStore,
    opts: { issuer: string; audience: string; now?: () => number; onCache?: (hit: boolean) => void },
  ): Promise<TokenService> {
    if ((await keys.signingKeys()).length === 0) await addSigningKey(keys);
    const service = new TokenService(keys, opts.issuer, opts.audience, opts.now ?? Date.now, opts.onCache ?? (() => {}));
    await service.reload();
    return service;
  }

  private async reload(): Promise<void> {
    const records = await this.keys.signingKeys();
    const next = new Map<string, CryptoKey>();
    for (const r of records) next.set(r.kid, (await importJWK(JSON.parse(r.publicJwk) as JWK, ALGORITHM)) as CryptoKey);
    const newest = records[records.length - 1]!;
    this.signing = { kid: newest.kid, key: (await importJWK(JSON.parse(newest.privateJwk) as JWK, ALGORITHM)) as CryptoKey };
    this.verifyKeys = next;
    this.lastReload = this.now();
  }

  /** The public keys, as published at the JWKS endpoint. */
  async jwks(): Promise<{ keys: JWK[] }> {
    return { keys: (await this.keys.signingKeys()).map((r) => JSON.parse(r.publicJwk) as JWK) };
  }

  /** Mints a one-hour API token for subject. */
  async mint(subject: string): Promise<IssuedToken> {
    // Pick up keys added by `platform-api rotate-key` while we run.
    if (!this.signing || this.now() - this.lastReload > 60_000) await this.reload();
    const iat = Math.floor(this.now() / 1000);
    const exp = iat + TOKEN_LIFETIME_SECONDS;
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: ALGORITHM, kid: this.signing!.kid, typ: ACCESS_TOKEN_TYPE })
      .setIssuer(this.issuer)
      .setAudience(this.audience)
      .setSubject(subject)
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .setJti(randomBytes(12).toString("base64url"))
      .sign(this.signing!.key);
    return { token, expiresAt: exp * 1000 };
  }

  /** Verifies a token we issued; throws UnauthenticatedError for anything else. */
  async verify(token: string): Promise<VerifiedToken> {
    // Before the cache: a token is one exact string, never a lenient re-spelling of it.
    if (!isCanonicalCompactJws(token)) throw new TokenRejectedError(NOT_OURS, "not a canonical compact JWS");
    const now = this.now();
    const hit = this.verified.get(token);
    if (hit) {
      if (hit.expiresAt > now - CLOCK_TOLERANCE * 1000) {
        this.onCache(true);
        return hit;
      }
      this.verified.delete(token);
    }
    this.onCache(false);
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, (header) => this.keyFor(header.kid), {
        algorithms: [ALGORITHM],
        issuer: this.issuer,
        audience: this.audience,
        typ: ACCESS_TOKEN_TYPE,
        requiredClaims: ["exp", "iat", "sub"],
        clockTolerance: CLOCK_TOLERANCE,
        currentDate: new Date(now),
      }));
    } catch (err) {
      throw rejection(err);
    }
    if (typeof payload.sub !== "string" || payload.sub === "" || payload.iat! > now / 1000 + CLOCK_TOLERANCE) {
      throw new TokenRejectedError(NOT_OURS, "empty sub or iat in the future");
    }
    const result: VerifiedToken = {
      subject: payload.sub,
      issuer: payload.iss!,
      audience: Array.isArray(payload.aud) ? payload.aud : [payload.aud!],
      issuedAt: payload.iat! * 1000,
      expiresAt: payload.exp! * 1000,
    };
    if (this.verified.size >= VERIFIED_CACHE_LIMIT) this.verified.clear();
    this.verified.set(token, result);
    return result;
  }

  private async keyFor(kid: string | undefined): Promise<CryptoKey> {
    if (kid === undefined) throw new Error("no kid");
    let key = this.verifyKeys.get(kid);
    if (!key && this.now() - this.lastReload > KEY_RELOAD_INTERVAL_MS) {
      // A key added by `platform-api rotate-key` while we run.
      await this.reload();
      key = this.verifyKeys.get(kid);
    }
    if (!key) throw new UnknownKeyError(kid);
    return key;
  }
}
