import { FailedPreconditionError } from "../../domain/errors.js";
import type { SigningKeyRecord } from "../store.js";

/** The signing_keys table as both engines read it: its columns, row and record. */
export const SELECT = "kid, private_jwk, public_jwk, create_time, retire_time";

export interface SigningKeyRow {
  kid: string;
  private_jwk: string;
  public_jwk: string;
  create_time: number;
  retire_time: number | null;
}

/** The record of a row; retireTime only when retired, so a key comes back exactly as it was added. */
export function toRecord(row: SigningKeyRow): SigningKeyRecord {
  return {
    kid: row.kid,
    privateJwk: row.private_jwk,
    publicJwk: row.public_jwk,
    createTime: Number(row.create_time),
    ...(row.retire_time === null ? {} : { retireTime: Number(row.retire_time) }),
  };
}

/** Refuses to retire the newest key, the one that signs: the store always keeps one key that may sign. */
export function newestKeyRetireRefused(kid: string): FailedPreconditionError {
  return new FailedPreconditionError([
    {
      type: "SIGNING_KEY",
      subject: kid,
      description: `signing key ${kid} is the newest key, the one that signs; add its successor first (platform-api rotate-key --retire ${kid})`,
    },
  ]);
}
