/**
 * Refresh tokens: what keeps a person signed in past their one-hour API token. Opaque (`prt_` and 32 random bytes,
 * base64url), stored only as their SHA-256, in families: a family begins at a sign-in and every refresh rotates
 * it (the token used is marked used, a new one issued, atomically). A used token presented again means two
 * parties hold the family (RFC 9700 §4.14.2): the whole family is revoked, the newest token included. A token
 * idle too long, a family older than its lifetime, or one begun under a signing key since retired, works no more.
 * Deleting the person deletes their tokens (the schema's cascade); retiring a key revokes its families
 * (src/cli/signing-keys.ts), and a family of a retired key is refused here too.
 */
import { randomBytes } from "node:crypto";
import { UnauthenticatedError } from "../domain/errors.js";
import type { RefreshTokenRecord } from "../store/sign-in-store.js";
import type { Store } from "../store/store.js";
import { hashOf } from "./sign-in/oauth-clients.js";

/** The prefix of every refresh token: secret scanners and people can tell one at a glance. */
export const REFRESH_TOKEN_PREFIX = "prt_";
/** A refresh token's shape: the prefix and 32 bytes, base64url. Anything else is refused without a store read. */
const TOKEN_SHAPE = /^prt_[A-Za-z0-9_-]{43}$/;
/** Families one identity may hold (one per sign-in still alive): a new sign-in past it ends the oldest. */
export const MAX_FAMILIES_PER_IDENTITY = 50;

/** How long refresh tokens live (config.ts: PLATFORM_REFRESH_TOKEN_IDLE and PLATFORM_REFRESH_TOKEN_LIFETIME). */
export interface RefreshTokenSettings {
  /** A token unused this long stops working. */
  idleMs: number;
  /** No token of a family works this long after the family began. */
  maxAgeMs: number;
}

/** A rotation's outcome: who the family is for (the identity, and the client it was issued to) and the token to use next. */
export interface Rotated {
  identityUid: string;
  clientId: string;
  refreshToken: string;
}

/** Issues, rotates and revokes refresh tokens (see the module comment). */
export interface RefreshTokens {
  /**
   * Starts a family for identityUid signed in by clientId, with familyId chosen by the caller (a sign-in flow's
   * id, so a replayed authorization code can revoke exactly what its first use issued), and returns its first
   * token. The identity's oldest families beyond MAX_FAMILIES_PER_IDENTITY end.
   */
  start(identityUid: string, clientId: string, familyId: string): Promise<string>;
  /**
   * Rotates: the identity and client of the family, and the next token. UnauthenticatedError (one message
   * whatever the cause, never naming the token) when it is malformed, unknown, expired, revoked or used (a used
   * one revokes its family first).
   */
  rotate(token: string): Promise<Rotated>;
  /** Revokes the family of token; an unknown or malformed token is no error (RFC 7009 §2.2). */
  revoke(token: string): Promise<void>;
  /** Revokes a family by id; how many tokens went (0 when none). */
  revokeFamily(familyId: string): Promise<number>;
}

/** The one refusal of a refresh token, whatever was wrong with it. */
export function invalidRefreshToken(): UnauthenticatedError {
  return new UnauthenticatedError(
    "Unauthenticated: the refresh token is not valid (unknown, expired, revoked or already used); sign in again",
  );
}

/** The stored form of a token: SHA-256, base64url, as every secret handle of a sign-in is stored. */
export const refreshTokenHash = hashOf;

/** Whether text has a refresh token's shape (so a caller can tell one from an API token without a store read). */
export function isRefreshTokenShaped(text: string): boolean {
  return TOKEN_SHAPE.test(text);
}

function newToken(): string {
  return `${REFRESH_TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`;
}

export function createRefreshTokens(deps: { store: Store; now: () => number; settings: RefreshTokenSettings }): RefreshTokens {
  const { store, settings } = deps;
  /** When a token stops working: idle since it was issued, or its family too old. */
  const expiresAt = (t: RefreshTokenRecord) => Math.min(t.issueTime + settings.idleMs, t.familyStartTime + settings.maxAgeMs);

  /** The kids of retired signing keys: a family begun under one works no more. */
  async function retiredKeys(): Promise<Set<string>> {
    return new Set((await store.keys.signingKeys()).filter((k) => k.retireTime !== undefined).map((k) => k.kid));
  }

  return {
    async start(identityUid, clientId, familyId) {
      const keys = await store.keys.signingKeys();
      const signing = keys.at(-1);
      const now = deps.now();
      const refreshToken = newToken();
      const record: RefreshTokenRecord = {
        hash: refreshTokenHash(refreshToken),
        familyId,
        identityUid,
        clientId,
        keyId: signing?.kid ?? "",
        familyStartTime: now,
        issueTime: now,
        usedTime: 0,
      };
      await store.refreshTokens.start(record, MAX_FAMILIES_PER_IDENTITY);
      return refreshToken;
    },

    async rotate(token) {
      if (!isRefreshTokenShaped(token)) throw invalidRefreshToken();
      const retired = await retiredKeys();
      const now = deps.now();
      // The store may call next more than once (a retried transaction): the last token drawn is the one stored.
      let refreshToken = "";
      const result = await store.refreshTokens.rotate(
        refreshTokenHash(token),
        (old) => {
          refreshToken = newToken();
          return { ...old, hash: refreshTokenHash(refreshToken), issueTime: now, usedTime: 0 };
        },
        (old) => now >= expiresAt(old) || retired.has(old.keyId),
      );
      if (result.kind !== "rotated") throw invalidRefreshToken();
      return { identityUid: result.next.identityUid, clientId: result.next.clientId, refreshToken };
    },

    async revoke(token) {
      if (!isRefreshTokenShaped(token)) return;
      const found = await store.refreshTokens.get(refreshTokenHash(token));
      if (found) await store.refreshTokens.revokeFamily(found.familyId);
    },

    revokeFamily(familyId) {
      return store.refreshTokens.revokeFamily(familyId);
    },
  };
}
