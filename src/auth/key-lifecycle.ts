/**
 * When each of this server's signing keys may sign and verify. Keys live in
 * the store, oldest first; the newest signs. A key is "rotated out" once a
 * newer key exists: it signs nothing from then on, so every token it signed
 * expires within one maximum token lifetime, and it stops verifying at that
 * horizon. A key is "retired" by the operator (`platform-api retire-key`, or
 * `rotate-key --retire`): it verifies nothing from that moment. Only keys
 * that still verify are published in the JWKS.
 */
import type { SigningKeyRecord } from "../store/store.js";

/**
 * The longest lifetime (exp − iat) of any token this server issues, in
 * seconds: every kind it mints — exchanged at /sts/exchange, and the
 * administrator's from `platform-api admin-token` — is one API token of
 * one hour (spec: "Exchanged API token lifetime: 1 hour"). Verification
 * refuses a longer-lived token whatever its signature.
 */
export const MAX_TOKEN_LIFETIME_SECONDS = 3600;

/**
 * Seconds after a key's successor was made during which the old key may
 * still have signed: a mint that read the keys just before the rotation
 * landed, and the clocks of the process that rotated and the one that mints
 * being apart. A rotated-out key's token issued later than this was not
 * signed by us (someone holds the old key) and is refused.
 */
const ROTATION_GRACE_SECONDS = 60;

/** How long a rotated-out key keeps verifying after its successor was made: 1 h 1 min. */
export const ROTATED_KEY_HORIZON_MS = (MAX_TOKEN_LIFETIME_SECONDS + ROTATION_GRACE_SECONDS) * 1000;

/** Where a key is in its life. */
export type KeyState = "signing" | "rotated-out" | "past-horizon" | "retired";

/** A key's record and the bounds on the tokens it may verify. */
export interface KeyStatus {
  record: SigningKeyRecord;
  state: KeyState;
  /** Tokens it signed with a later iat (ms) are refused: it had stopped signing. Infinity while it signs. */
  issuedBefore: number;
  /** From this time (ms) it verifies nothing. Infinity while it signs; its retire time once retired. */
  verifiesUntil: number;
}

/**
 * The status of each key at now, in the store's order (oldest first). The
 * successor of a key is the next key in that order, retired or not: the old
 * key stopped signing when the successor was made.
 */
export function keyStatuses(records: readonly SigningKeyRecord[], now: number): KeyStatus[] {
  return records.map((record, i) => {
    if (record.retireTime !== undefined) {
      return { record, state: "retired", issuedBefore: record.retireTime, verifiesUntil: record.retireTime };
    }
    const successor = records[i + 1];
    if (!successor) return { record, state: "signing", issuedBefore: Infinity, verifiesUntil: Infinity };
    const verifiesUntil = successor.createTime + ROTATED_KEY_HORIZON_MS;
    return {
      record,
      state: now < verifiesUntil ? "rotated-out" : "past-horizon",
      issuedBefore: successor.createTime + ROTATION_GRACE_SECONDS * 1000,
      verifiesUntil,
    };
  });
}

/** Why a token signed by this key, issued at iatMs, is refused at now; null when the key accepts it. */
export function keyRefusal(status: KeyStatus, iatMs: number, now: number): string | null {
  const kid = status.record.kid;
  if (status.state === "retired") return `key ${kid} was retired at ${new Date(status.record.retireTime!).toISOString()}`;
  if (now >= status.verifiesUntil) return `key ${kid} was rotated out; it verified until ${new Date(status.verifiesUntil).toISOString()}`;
  if (iatMs > status.issuedBefore) {
    return `token issued at ${new Date(iatMs).toISOString()}, after key ${kid} stopped signing at ${new Date(status.issuedBefore).toISOString()}`;
  }
  return null;
}

/** True when the key verifies some tokens at now: it is published in the JWKS. */
export function verifiesAt(status: KeyStatus, now: number): boolean {
  return status.state !== "retired" && now < status.verifiesUntil;
}
