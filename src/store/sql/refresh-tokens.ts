import type { RefreshTokenRecord } from "../sign-in-store.js";

/**
 * The refresh_tokens table as both engines read and write it: one SQL text for both ("?" placeholders, which the
 * PostgreSQL store numbers), the row, and row → record.
 */
export interface RefreshTokenRow {
  hash: string;
  family_id: string;
  identity_uid: string;
  client_id: string;
  key_id: string;
  family_start_time: number;
  issue_time: number;
  used_time: number;
}

const SELECT = "hash, family_id, identity_uid, client_id, key_id, family_start_time, issue_time, used_time";

export const REFRESH_SQL = {
  get: `SELECT ${SELECT} FROM refresh_tokens WHERE hash = ?`,
  insert: `INSERT INTO refresh_tokens (${SELECT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  identityExists: "SELECT 1 AS found FROM identities WHERE uid = ?",
  /** The identity's families, most recently used first (the latest issue time of each). */
  familiesOf: `SELECT family_id, max(issue_time) AS last_issue FROM refresh_tokens WHERE identity_uid = ?
    GROUP BY family_id ORDER BY last_issue DESC, family_id DESC`,
  /** Marks a current token used; no row changes when it was used already (a concurrent rotation won). */
  markUsed: "UPDATE refresh_tokens SET used_time = ? WHERE hash = ? AND used_time = 0",
  /** Drops the family's used tokens beyond the newest n. */
  trimUsed: `DELETE FROM refresh_tokens WHERE family_id = ? AND used_time <> 0 AND hash NOT IN (
    SELECT hash FROM refresh_tokens WHERE family_id = ? AND used_time <> 0 ORDER BY used_time DESC, hash DESC LIMIT ?)`,
  deleteFamily: "DELETE FROM refresh_tokens WHERE family_id = ?",
  deleteIdentity: "DELETE FROM refresh_tokens WHERE identity_uid = ?",
  deleteKey: "DELETE FROM refresh_tokens WHERE key_id = ?",
  deleteExpired: `DELETE FROM refresh_tokens WHERE hash IN (
    SELECT hash FROM refresh_tokens WHERE issue_time <= ? OR family_start_time <= ? LIMIT ?)`,
};

/** The insert's parameters. */
export function insertValues(t: RefreshTokenRecord): unknown[] {
  return [t.hash, t.familyId, t.identityUid, t.clientId, t.keyId, t.familyStartTime, t.issueTime, t.usedTime];
}

export function toRecord(row: RefreshTokenRow): RefreshTokenRecord {
  return {
    hash: row.hash,
    familyId: row.family_id,
    identityUid: row.identity_uid,
    clientId: row.client_id,
    keyId: row.key_id,
    familyStartTime: Number(row.family_start_time),
    issueTime: Number(row.issue_time),
    usedTime: Number(row.used_time),
  };
}

/** Whether next keeps the family fields of old (a rotation never moves a token to another family or identity). */
export function sameFamily(old: RefreshTokenRecord, next: RefreshTokenRecord): boolean {
  return (
    next.familyId === old.familyId &&
    next.identityUid === old.identityUid &&
    next.clientId === old.clientId &&
    next.keyId === old.keyId &&
    next.familyStartTime === old.familyStartTime &&
    next.usedTime === 0
  );
}
