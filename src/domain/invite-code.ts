import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { ApiError } from "./errors.js";

/** A key id: 16 random bytes as lowercase hex. */
const KEY_ID = /^[0-9a-f]{32}$/;
/** A secret: 32 random bytes as unpadded base64url. */
const SECRET = /^[A-Za-z0-9_-]{43}$/;

/** A fresh invite code and what is stored of it. The code itself is shown once and never stored. */
export interface NewInviteCode {
  /** `${keyId}.${secret}` */
  code: string;
  keyId: string;
  /** SHA-256 (hex) of the secret. */
  codeHash: string;
}

function hashOf(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

/** Generates an invite code: a public key id and a 256-bit secret. */
export function newInviteCode(): NewInviteCode {
  const keyId = randomBytes(16).toString("hex");
  const secret = randomBytes(32).toString("base64url");
  return { code: `${keyId}.${secret}`, keyId, codeHash: hashOf(secret) };
}

/** The parts of a well-formed code, or null. */
export function parseInviteCode(code: string): { keyId: string; secret: string } | null {
  const dot = code.indexOf(".");
  if (dot < 0 || code.length > 100) return null;
  const keyId = code.slice(0, dot);
  const secret = code.slice(dot + 1);
  return KEY_ID.test(keyId) && SECRET.test(secret) ? { keyId, secret } : null;
}

/** A hash no secret has, compared against when there is no invite, so both paths do the same work. */
const NO_HASH = "0".repeat(64);

/** True when secret hashes to codeHash; compares in constant time. codeHash null compares against nothing. */
export function inviteSecretMatches(secret: string, codeHash: string | null): boolean {
  const want = Buffer.from(codeHash ?? NO_HASH, "hex");
  const got = Buffer.from(hashOf(secret), "hex");
  return want.length === got.length && timingSafeEqual(want, got) && codeHash !== null;
}

/**
 * The one answer to every invite code that cannot be accepted (malformed,
 * unknown, wrong secret, expired, used, another person's), so a caller learns
 * nothing about which invites exist.
 */
export class InviteInvalidError extends ApiError {
  constructor() {
    super(Code.PermissionDenied, "INVITE_INVALID", "Permission denied: the invite code is invalid, expired or already used");
    this.name = "InviteInvalidError";
  }
}
