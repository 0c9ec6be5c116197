import { randomBytes } from "node:crypto";
import { errors, exportJWK, generateKeyPair, importJWK, jwtVerify, SignJWT, type JWK, type JWTPayload } from "jose";
import { UnauthenticatedError } from "../domain/errors.js";
import type { KeyStore, SigningKeyRecord } from "../store/store.js";
import { keyRefusal, keyStatuses, MAX_TOKEN_LIFETIME_SECONDS, verifiesAt, type KeyStatus } from "./key-lifecycle.js";

/** RFC 9068 access-token type: our verifier requires it, so an ID token can never pass as one. */
export const ACCESS_TOKEN_TYPE = "at+jwt";
/**
 * The type of the bearer token on an event delivery: never at+jwt, so our
 * verifier refuses it as an API token even when its audience is our base URL.
 */
export const DELIVERY_TOKEN_TYPE = "webhook+jwt";
/** Lifetime of a delivery token: one attempt, with room for a receiver's clock skew. */
export const DELIVERY_TOKEN_LIFETIME_SECONDS = 5 * 60;
/** Lifetime of every API token we issue (one hour, the spec's), and the most any token may claim (exp − iat) to verify. */
const TOKEN_LIFETIME_SECONDS = MAX_TOKEN_LIFETIME_SECONDS;
const ALGORITHM = "ES256";
/** Seconds of clock skew tolerated on exp, nbf and iat. */
const CLOCK_TOLERANCE = 30;
const VERIFIED_CACHE_LIMIT = 50_000;
/** At most one re-read of the key table per interval when an unknown kid shows up. */
const KEY_RELOAD_INTERVAL_MS = 1_000;
/**
 * The longest the key table is trusted without re-reading it, when nothing
 * told us it changed: the store's versions tell a server at once (every
 * request refreshes them); this bounds a caller that never refreshes them
 * (the command line) or a path that authenticates without a refresh.
 */
const KEY_MAX_AGE_MS = 60_000;

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
function isCanonicalCompactJws(token: string): boolean {
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
const TOO_LONG = `Unauthenticated: the API token claims a lifetime longer than the ${MAX_TOKEN_LIFETIME_SECONDS / 3600} hour this server issues; request a new one`;
const RETIRED_KEY = "Unauthenticated: the API token is signed by a retired signing key; request a new one";

/** Thrown by the key lookup for a kid none of our keys has. */
class UnknownKeyError extends Error {
  constructor(kid: string) {
    super(`unknown kid ${JSON.stringify(kid.slice(0, 64))}`);
    this.name = "UnknownKeyError";
  }
}

/**
 * The refusal of an expired token: what verify() throws for one, and what ends
 * a call that outlives its token (a WatchEvents stream, at its exp).
 */
export function tokenExpired(detail: string): TokenRejectedError {
  return new TokenRejectedError("Unauthenticated: the API token has expired; request a new one", detail);
}

/**
 * True when a token's iss or aud claim is http:// where ours is https://: minted (`platform-api admin-token`)
 * without the TLS settings of a server that serves TLS, whose default addresses are then http://.
 */
function mintedWithoutTls(claimed: unknown, ours: string): boolean {
  const values: unknown[] = Array.isArray(claimed) ? claimed : [claimed];
  return ours.startsWith("https://") && values.some((v) => typeof v === "string" && v.startsWith("http://"));
}

/** The operator's likely fix for a token minted with another environment, by the claim that differs. */
function mintHint(claim: "iss" | "aud", err: errors.JWTClaimValidationFailed, ours: string): string {
  const setting = claim === "iss" ? "PLATFORM_AUTH_URL" : "PLATFORM_BASE_URL";
  const what = claim === "iss" ? "issued by another address, not this server's" : "issued for another audience, not this server";
  if (!mintedWithoutTls(err.payload[claim], ours)) return `the API token was ${what} (mint it with this server's ${setting} and PORT)`;
  const whose = claim === "iss" ? "by an http:// address" : "for an http:// audience";
  return (
    `the API token was issued ${whose} and this server's is https:// ` +
    `(mint it with this server's PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE set, or its ${setting}, and PORT)`
  );
}

/**
 * The client's message for a jose verification failure, and the exact reason for the log. `ours` is what this
 * server expects of iss and aud.
 */
function rejection(err: unknown, ours: { issuer: string; audience: string }): TokenRejectedError {
  const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  if (err instanceof errors.JWTExpired) return tokenExpired(detail);
  // The likely cause of each, for an operator who minted a token with another environment: nothing secret (jose
  // checks claims only once the signature verified, so the caller holds a token of ours).
  if (err instanceof errors.JWTClaimValidationFailed && err.claim === "aud") {
    return new TokenRejectedError(`Unauthenticated: ${mintHint("aud", err, ours.audience)}`, detail);
  }
  if (err instanceof errors.JWTClaimValidationFailed && err.claim === "iss") {
    return new TokenRejectedError(`Unauthenticated: ${mintHint("iss", err, ours.issuer)}`, detail);
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

/**
 * A new ES256 key pair as a record, not yet stored. Its create time is now,
 * or the newest existing key's when that is later (a clock behind the one
 * that made it), so it is the newest key and signs once stored.
 */
export async function newSigningKey(existing: readonly SigningKeyRecord[], now = Date.now()): Promise<SigningKeyRecord> {
  const { privateKey, publicKey } = await generateKeyPair(ALGORITHM, { extractable: true });
  const kid = randomBytes(12).toString("base64url");
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: ALGORITHM, use: "sig" };
  const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: ALGORITHM };
  const createTime = Math.max(now, ...existing.map((k) => k.createTime));
  return { kid, privateJwk: JSON.stringify(privateJwk), publicJwk: JSON.stringify(publicJwk), createTime };
}

/** Generates an ES256 key pair and stores it; it signs every token from then on. */
export async function addSigningKey(keys: KeyStore, now = Date.now()): Promise<string> {
  const key = await newSigningKey(await keys.signingKeys(), now);
  await keys.addSigningKey(key);
  return key.kid;
}

/** A stored key, imported, with its bounds. */
interface LoadedKey {
  status: KeyStatus;
  key: CryptoKey;
}

/** The key table as last read, and the store's version of it then. */
interface LoadedKeys {
  /** Every stored key, retired ones too: their tokens get a precise refusal once the signature checks. */
  byKid: Map<string, LoadedKey>;
  /** The newest key, null when it is retired (a hand-edited table): nothing is minted then. */
  signing: { kid: string; key: CryptoKey } | null;
  version: number;
  loadedAt: number;
}

/** A verified token and the key that signed it, checked again on every cache hit. */
interface CachedToken {
  token: VerifiedToken;
  kid: string;
}

/**
 * Issues and verifies this server's API tokens: JWTs signed with the newest key
 * in the store, iss = auth URL, aud = base URL, sub = identity uid, one hour.
 * Verification pins ES256, requires exp/iat/sub, checks iss, aud and typ,
 * refuses a lifetime (exp − iat) over MAX_TOKEN_LIFETIME_SECONDS and a key
 * past its life (key-lifecycle.ts), and caches verified tokens until they
 * expire (a verify costs more than a request). The key table is read again
 * whenever the store's version of it moves (a rotation or retirement by any
 * process), and a cached token is checked against its key on every hit.
 */
export class TokenService {
  private loaded: LoadedKeys | null = null;
  private reloading: Promise<LoadedKeys> | null = null;
  private lastUnknownKidReload = -Infinity;
  private readonly verified = new Map<string, CachedToken>();

  private constructor(
    private readonly keys: KeyStore,
    readonly issuer: string,
    readonly audience: string,
    private readonly now: () => number,
    private readonly onCache: (hit: boolean) => void,
    private readonly keysVersion: () => number,
  ) {}

  /**
   * Loads the keys, creating the first one on first start (or a successor
   * when the newest is retired). keysVersion is the store's version of the
   * signing_keys table (Store.version), which moves with every write by
   * any process once the request's refresh has read it; without it the
   * table is re-read at most a minute after the last read.
   */
  static async open(
    keys: KeyStore,
    opts: { issuer: string; audience: string; now?: () => number; onCache?: (hit: boolean) => void; keysVersion?: () => number },
  ): Promise<TokenService> {
    const now = opts.now ?? Date.now;
    const stored = await keys.signingKeys();
    if (stored.length === 0 || stored.at(-1)!.retireTime !== undefined) await addSigningKey(keys, now());
    const service = new TokenService(keys, opts.issuer, opts.audience, now, opts.onCache ?? (() => {}), opts.keysVersion ?? (() => 0));
    await service.reload();
    return service;
  }

  /** The key table as of the store's current version, read again when it moved or grew old. */
  private async current(): Promise<LoadedKeys> {
    const version = this.keysVersion();
    let keys = this.loaded;
    // Versions only grow: a reload already under way when the version moved is followed by another.
    while (!keys || keys.version < version || this.now() - keys.loadedAt >= KEY_MAX_AGE_MS) keys = await this.reload();
    return keys;
  }

  /** The loaded key table when it is current (what current() would return without reading), else null. */
  private fresh(now: number): LoadedKeys | null {
    const keys = this.loaded;
    return keys && keys.version >= this.keysVersion() && now - keys.loadedAt < KEY_MAX_AGE_MS ? keys : null;
  }

  /** Reads the key table once for every caller waiting on it. */
  private reload(): Promise<LoadedKeys> {
    this.reloading ??= this.load().finally(() => (this.reloading = null));
    return this.reloading;
  }

  private async load(): Promise<LoadedKeys> {
    // The version before the read: newer rows may come under an older version, never older rows under a newer one.
    const version = this.keysVersion();
    const now = this.now();
    const records = await this.keys.signingKeys();
    // A kid names one key forever: keys imported by the last read are kept, only new ones are imported.
    const previous = this.loaded;
    const byKid = new Map<string, LoadedKey>();
    for (const status of keyStatuses(records, now)) {
      const key =
        previous?.byKid.get(status.record.kid)?.key ??
        ((await importJWK(JSON.parse(status.record.publicJwk) as JWK, ALGORITHM)) as CryptoKey);
      byKid.set(status.record.kid, { status, key });
    }
    const newest = records.at(-1);
    const signing =
      newest && newest.retireTime === undefined
        ? previous?.signing?.kid === newest.kid
          ? previous.signing
          : { kid: newest.kid, key: (await importJWK(JSON.parse(newest.privateJwk) as JWK, ALGORITHM)) as CryptoKey }
        : null;
    this.loaded = { byKid, signing, version, loadedAt: now };
    return this.loaded;
  }

  /** The public keys that verify now, as published at the JWKS endpoint (read from the store: always current). */
  async jwks(): Promise<{ keys: JWK[] }> {
    const now = this.now();
    const live = keyStatuses(await this.keys.signingKeys(), now).filter((s) => verifiesAt(s, now));
    return { keys: live.map((s) => JSON.parse(s.record.publicJwk) as JWK) };
  }

  /** Mints a one-hour API token for subject, with the newest key. */
  mint(subject: string): Promise<IssuedToken> {
    return this.sign(ACCESS_TOKEN_TYPE, this.audience, subject, TOKEN_LIFETIME_SECONDS);
  }

  /**
   * Mints the bearer token of an event delivery with the newest key: iss our
   * issuer, aud the sink URL, sub the subscription uid, typ webhook+jwt, five
   * minutes. Receivers verify it against our JWKS as they would an API token
   * (checking typ, iss and aud); verify() refuses it.
   */
  mintDelivery(audience: string, subject: string): Promise<IssuedToken> {
    return this.sign(DELIVERY_TOKEN_TYPE, audience, subject, DELIVERY_TOKEN_LIFETIME_SECONDS);
  }

  /** A JWT of type typ from our issuer, signed with the newest key. */
  private async sign(typ: string, audience: string, subject: string, lifetimeSeconds: number): Promise<IssuedToken> {
    const { signing } = await this.current();
    if (!signing) throw new Error("no signing key: the newest key is retired; run `platform-api rotate-key`");
    const iat = Math.floor(this.now() / 1000);
    const exp = iat + lifetimeSeconds;
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: ALGORITHM, kid: signing.kid, typ })
      .setIssuer(this.issuer)
      .setAudience(audience)
      .setSubject(subject)
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .setJti(randomBytes(12).toString("base64url"))
      .sign(signing.key);
    return { token, expiresAt: exp * 1000 };
  }

  /** Verifies a token we issued; throws UnauthenticatedError for anything else. */
  async verify(token: string): Promise<VerifiedToken> {
    const now = this.now();
    const keys = this.fresh(now) ?? (await this.current());
    // The cache holds only exact strings that passed the canonical check below, so a hit needs no second check.
    const hit = this.verified.get(token);
    if (hit) {
      const signer = keys.byKid.get(hit.kid);
      if (hit.token.expiresAt > now - CLOCK_TOLERANCE * 1000 && signer && keyRefusal(signer.status, hit.token.issuedAt, now) === null) {
        this.onCache(true);
        return hit.token;
      }
      // Expired, or its key was retired since: verified again below, which says which.
      this.verified.delete(token);
    }
    // A token is one exact string, never a lenient re-spelling of it.
    if (!isCanonicalCompactJws(token)) throw new TokenRejectedError(NOT_OURS, "not a canonical compact JWS");
    this.onCache(false);
    let payload: JWTPayload;
    let signer: LoadedKey | undefined;
    try {
      ({ payload } = await jwtVerify(
        token,
        async (header) => {
          signer = await this.keyFor(header.kid, keys);
          return signer.key;
        },
        {
          algorithms: [ALGORITHM],
          issuer: this.issuer,
          audience: this.audience,
          typ: ACCESS_TOKEN_TYPE,
          requiredClaims: ["exp", "iat", "sub"],
          clockTolerance: CLOCK_TOLERANCE,
          currentDate: new Date(now),
        },
      ));
    } catch (err) {
      throw rejection(err, { issuer: this.issuer, audience: this.audience });
    }
    if (typeof payload.sub !== "string" || payload.sub === "" || payload.iat! > now / 1000 + CLOCK_TOLERANCE) {
      throw new TokenRejectedError(NOT_OURS, "empty sub or iat in the future");
    }
    // Whatever signed it: a longer-lived token was not minted by this server, or outlives what a leak may cost.
    const lifetime = payload.exp! - payload.iat!;
    if (lifetime > MAX_TOKEN_LIFETIME_SECONDS) {
      throw new TokenRejectedError(TOO_LONG, `lifetime exp - iat = ${lifetime} s exceeds ${MAX_TOKEN_LIFETIME_SECONDS} s`);
    }
    const refusal = keyRefusal(signer!.status, payload.iat! * 1000, now);
    if (refusal !== null) throw new TokenRejectedError(RETIRED_KEY, refusal);
    const result: VerifiedToken = {
      subject: payload.sub,
      issuer: payload.iss!,
      audience: Array.isArray(payload.aud) ? payload.aud : [payload.aud!],
      issuedAt: payload.iat! * 1000,
      expiresAt: payload.exp! * 1000,
    };
    if (this.verified.size >= VERIFIED_CACHE_LIMIT) this.verified.clear();
    this.verified.set(token, { token: result, kid: signer!.status.record.kid });
    return result;
  }

  private async keyFor(kid: string | undefined, keys: LoadedKeys): Promise<LoadedKey> {
    if (kid === undefined) throw new Error("no kid");
    let key = keys.byKid.get(kid);
    if (!key && this.now() - this.lastUnknownKidReload > KEY_RELOAD_INTERVAL_MS) {
      // A key added by `platform-api rotate-key` that the store's versions have not told us of yet.
      this.lastUnknownKidReload = this.now();
      key = (await this.reload()).byKid.get(kid);
    }
    if (!key) throw new UnknownKeyError(kid);
    return key;
  }
}
