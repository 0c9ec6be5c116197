import type { Async } from "./async-type.js";

/** Where a sign-in flow is: started, the person signed in upstream, a device flow approved or denied, or its result taken. */
export type SignInFlowStatus = "pending" | "signed-in" | "approved" | "denied" | "consumed";

/**
 * A pending or finished sign-in: a browser flow for one of our clients ("authorize"), a device flow ("device"),
 * or a plain web sign-in ("web"). Secrets are held only as SHA-256 hashes (base64url); times are ms since the epoch.
 */
export interface SignInFlowRecord {
  /** Random 128 bits, base64url; also the flow's handle in pages (`flow=`). */
  id: string;
  kind: "authorize" | "device" | "web";
  /** "platform-cli", or "" for a web sign-in. */
  clientId: string;
  /** Authorize only: the client's loopback redirect URI. */
  redirectUri: string;
  /** Authorize only: the client's state, echoed back. */
  clientState: string;
  /** Authorize only: the client's S256 code challenge. */
  codeChallenge: string;
  /** Device only: hash of the device_code. */
  deviceCodeHash: string;
  /** Device only: hash of the normalized user code. */
  userCodeHash: string;
  /** Device only: seconds between polls (grows on slow_down). */
  pollInterval: number;
  /** Device only: when the client last polled. */
  lastPollTime: number;
  /** What the client asked to sign in through ("" when it did not). */
  scope: { idp: string; org: string; provider: string };
  /** The address the per-address bound counts against (IPv4, or an IPv6 /64). */
  clientAddress: string;
  /** "op:<id>" or "idp:<uid>", once /sign-in/start chose one; "" before. */
  upstreamProvider: string;
  /** Hash of the state sent upstream. */
  upstreamStateHash: string;
  upstreamNonce: string;
  /** The PKCE verifier sent upstream ("" when the provider does not use PKCE). */
  upstreamVerifier: string;
  /** Hash of the browser-binding cookie's secret. */
  browserBindingHash: string;
  status: SignInFlowStatus;
  /** The person, once signed in; "" before. */
  identityUid: string;
  /** Authorize only: hash of our one-time authorization code. */
  codeHash: string;
  createTime: number;
  /** After this the flow is gone for every lookup (and swept by deleteExpired). */
  expireTime: number;
}

/** The fields advance() may change: everything but the id. */
export type SignInFlowChanges = Partial<Omit<SignInFlowRecord, "id">>;

/**
 * Pending sign-ins, shared by every process on the store: any process can finish a flow another began. Each
 * non-empty hash (upstream state, device code, user code, our code) names at most one flow.
 */
export interface SyncSignInFlowStore {
  /**
   * Adds a flow. Throws ResourceExhaustedError when flow.clientAddress already has maxPerAddress unexpired flows,
   * and AlreadyExistsError when its id or one of its non-empty hashes names an unexpired flow (an expired one
   * holding them is dropped first), so a caller drawing random codes draws again.
   */
  create(flow: SignInFlowRecord, maxPerAddress: number, now: number): void;
  /** The flow, or null when absent or expired (expireTime <= now). */
  get(id: string, now: number): SignInFlowRecord | null;
  /** The flow holding this hash of the state sent upstream; null when absent or expired. */
  byUpstreamState(hash: string, now: number): SignInFlowRecord | null;
  /** The flow holding this hash of a device_code; null when absent or expired. */
  byDeviceCode(hash: string, now: number): SignInFlowRecord | null;
  /** The flow holding this hash of a user code; null when absent or expired. */
  byUserCode(hash: string, now: number): SignInFlowRecord | null;
  /** The flow holding this hash of our authorization code, whatever its status; null when absent or expired. */
  byCode(hash: string, now: number): SignInFlowRecord | null;
  /**
   * Compare-and-set: applies changes only if the flow exists and its stored status is `from`, and returns whether
   * it did (of concurrent advances from one status, exactly one wins). AlreadyExistsError when a hash it sets is
   * another flow's.
   */
  advance(id: string, from: SignInFlowStatus, changes: SignInFlowChanges): boolean;
  /** Deletes up to limit flows expired at now (oldest first); returns how many. */
  deleteExpired(now: number, limit: number): number;
}

/** One refresh token as stored: only its hash. Times are ms since the epoch. */
export interface RefreshTokenRecord {
  /** SHA-256 (base64url) of the token. */
  hash: string;
  /** The sign-in the token descends from: every rotation stays in it, and revocation takes all of it. */
  familyId: string;
  identityUid: string;
  /** The OAuth client the family was issued to ("platform-cli"). */
  clientId: string;
  /** The signing key's kid when the family began: retiring that key revokes the family. */
  keyId: string;
  /** When the family began: its absolute lifetime counts from here. */
  familyStartTime: number;
  /** When this token was issued: its idle lifetime counts from here. */
  issueTime: number;
  /** When it was exchanged; 0 while it has not been. */
  usedTime: number;
}

/** What rotate() did. */
export type RotateResult =
  /** The token was current: it is now marked used (previous, with its usedTime), and next is stored. */
  | { kind: "rotated"; previous: RefreshTokenRecord; next: RefreshTokenRecord }
  /** The token had been used already: its whole family is deleted. */
  | { kind: "reused"; familyId: string }
  /** Unknown (never issued, revoked, swept) or past a lifetime: nothing changed. */
  | { kind: "invalid" };

/**
 * How many used tokens a family keeps for reuse detection: a client rotating in a loop cannot grow its family
 * beyond this, and a replay of an older one is refused as unknown (without revoking the family).
 */
export const USED_REFRESH_TOKENS_KEPT = 16;

/**
 * Refresh tokens, in families. Deleting the identity deletes its tokens in the same statement (the schema's
 * ON DELETE CASCADE), whichever path deletes it.
 */
export interface SyncRefreshTokenStore {
  /**
   * Stores the first token of a family, first dropping the identity's least recently used families (by the
   * latest issueTime of each) so that with this one it has at most maxFamilies. NotFoundError when the identity does not exist;
   * AlreadyExistsError when the hash is taken.
   */
  start(token: RefreshTokenRecord, maxFamilies: number): void;
  /**
   * Rotation, atomically (of concurrent rotations of one token, one rotates and the others find it reused): an
   * unknown token is "invalid"; a used one deletes its family ("reused", checked before any lifetime, so a stolen
   * old token revokes even a family past its lifetimes); one `expired(old)` says is past a lifetime is
   * "invalid"; otherwise old is marked used at next(old).issueTime and next(old) is stored (it must keep old's
   * family fields), keeping the family's newest USED_REFRESH_TOKENS_KEPT used tokens. `next` may be called more
   * than once (a retried transaction): the last call's record is the one stored.
   */
  rotate(hash: string, next: (old: RefreshTokenRecord) => RefreshTokenRecord, expired: (old: RefreshTokenRecord) => boolean): RotateResult;
  /** The token (used or not), or null when absent: for revoking its family. */
  get(hash: string): RefreshTokenRecord | null;
  /** Deletes every token of the family; returns how many (0 when none). */
  revokeFamily(familyId: string): number;
  /** Deletes every token of the identity; returns how many. */
  revokeIdentity(identityUid: string): number;
  /** Deletes every token of families begun while keyId was signing; returns how many. */
  revokeKey(keyId: string): number;
  /**
   * Deletes up to limit tokens issued at or before idleBefore, or of families begun at or before startedBefore
   * (past the idle or the absolute lifetime); returns how many.
   */
  deleteExpired(idleBefore: number, startedBefore: number, limit: number): number;
}

export type SignInFlowStore = Async<SyncSignInFlowStore>;
export type RefreshTokenStore = Async<SyncRefreshTokenStore>;
