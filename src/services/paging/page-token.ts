import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { QueryCache } from "../../store/decorators/query-cache.js";
import type { Cursor } from "../../store/store.js";

/** What a page token carries between requests. */
export interface PageTokenState {
  /** Where the previous page ended. */
  after: Cursor;
  /** Results skipped so far, accumulated across pages. */
  skipped: number;
  /** The skip parameter of the request that produced the token. */
  lastSkip: number;
  /** Hash of the request parameters the token belongs to. */
  queryHash: string;
  /** Seconds since the epoch when the token was issued. */
  issuedAt: number;
}

/** Why a token could not be used. */
export type OpenResult = { ok: true; state: PageTokenState } | { ok: false; reason: "expired" | "invalid" | "mismatch" };

/** Tokens older than this (the spec's 3 days) are treated as absent: the query restarts from the beginning, no error. */
const PAGE_TOKEN_LIFETIME_SECONDS = 3 * 24 * 3600;

/** Entries each of the sealer's caches keeps. */
const CACHE_ENTRIES = 4096;

const queryHashes = new QueryCache<string>(CACHE_ENTRIES);

/**
 * Seals page tokens with AES-256-GCM under a server key, so clients can
 * neither read nor forge them, and a token only works for the query that
 * produced it. A page asked for again within the same second gets the same
 * token (same plaintext, same ciphertext: no nonce is reused for different
 * text), and a token presented again is not decrypted again.
 */
export class PageTokenSealer {
  private readonly sealed = new QueryCache<string>(CACHE_ENTRIES);
  private readonly opened = new QueryCache<PageTokenState>(CACHE_ENTRIES);

  constructor(
    private readonly key: Buffer,
    private readonly now: () => number = () => Date.now(),
  ) {
    if (key.length !== 32) throw new Error("page token key must be 32 bytes");
  }

  /** A stable short hash of the parameters that must not change between pages. */
  static queryHash(parts: unknown): string {
    const text = JSON.stringify(parts);
    return queryHashes.getOrSet(text, () => createHash("sha256").update(text).digest("base64url").slice(0, 16));
  }

  seal(after: Cursor, skipped: number, lastSkip: number, queryHash: string): string {
    const payload = JSON.stringify([after.key, after.uid, skipped, lastSkip, queryHash, Math.floor(this.now() / 1000)]);
    return this.sealed.getOrSet(payload, () => this.encrypt(payload));
  }

  private encrypt(payload: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    const body = Buffer.concat([cipher.update(payload, "utf8"), cipher.final()]);
    return Buffer.concat([iv, body, cipher.getAuthTag()]).toString("base64url");
  }

  open(token: string, queryHash: string): OpenResult {
    // Only tokens we sealed are remembered: what a client makes up is not kept.
    const known = this.opened.get(token);
    const state = known ?? this.decrypt(token);
    if (state === null) return { ok: false, reason: "invalid" };
    if (known === undefined) this.opened.set(token, state);
    if (Math.floor(this.now() / 1000) - state.issuedAt > PAGE_TOKEN_LIFETIME_SECONDS) return { ok: false, reason: "expired" };
    if (state.queryHash !== queryHash) return { ok: false, reason: "mismatch" };
    return { ok: true, state };
  }

  /** The state a token carries, or null when it is not one of ours. */
  private decrypt(token: string): PageTokenState | null {
    const raw = Buffer.from(token, "base64url");
    if (raw.length < 12 + 16 + 2 || raw.toString("base64url") !== token) return null;
    let parsed: unknown;
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(raw.length - 16));
      const text = Buffer.concat([decipher.update(raw.subarray(12, raw.length - 16)), decipher.final()]).toString("utf8");
      parsed = JSON.parse(text);
    } catch {
      return null;
    }
    if (!Array.isArray(parsed) || parsed.length !== 6) return null;
    const [key, uid, skipped, lastSkip, hash, issuedAt] = parsed as [string | number, string, number, number, string, number];
    return Object.freeze({ after: Object.freeze({ key, uid }), skipped, lastSkip, queryHash: hash, issuedAt });
  }
}
