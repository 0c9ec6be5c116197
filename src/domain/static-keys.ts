import type { FieldViolation } from "./errors.js";

/** How long a static-keys identity may live, 365 days from creation: the default and the cap of its expirationTime. */
export const STATIC_KEYS_MAX_LIFETIME_MS = 365 * 24 * 3600 * 1000;

/** JWK members that carry private or symmetric key material; a registered JWKS must hold public keys only. */
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "k"] as const;

/** A static-keys relationship as a request gives it; expirationTime null means "not set". */
export interface StaticKeysInput {
  issuer: string;
  subject: string;
  issuerKeys: string;
  expirationTime: number | null;
  audiences: readonly string[];
}

/**
 * Violations of an issuer_keys JWKS: JSON {"keys": [...]} with at least one
 * key, each an object with a "kty", and none carrying private members. A
 * leaked private key in a stored identity would let anyone mint its tokens.
 */
export function checkIssuerKeys(field: string, text: string): FieldViolation[] {
  if (text === "") return [{ field, description: 'is required: a JWKS document {"keys": [...]}' }];
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return [{ field, description: 'must be a JSON JWKS document {"keys": [...]}' }];
  }
  const keys = typeof doc === "object" && doc !== null && !Array.isArray(doc) ? (doc as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(keys) || keys.length === 0) return [{ field, description: 'must hold at least one key in "keys"' }];
  for (const [i, key] of keys.entries()) {
    if (typeof key !== "object" || key === null || Array.isArray(key) || typeof (key as { kty?: unknown }).kty !== "string") {
      return [{ field, description: `keys[${i}] must be a JWK object with a "kty"` }];
    }
    const secret = PRIVATE_MEMBERS.find((m) => m in key);
    if (secret !== undefined)
      return [{ field, description: `keys[${i}] carries the private member "${secret}"; register public keys only` }];
  }
  return [];
}

/**
 * Violations of a static-keys relationship registered at time now. Field
 * names are given under prefix (e.g. "static_keys").
 */
export function checkStaticKeys(prefix: string, keys: StaticKeysInput, now: number): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (keys.issuer === "") out.push({ field: `${prefix}.issuer`, description: "is required" });
  if (keys.subject === "") out.push({ field: `${prefix}.subject`, description: "is required" });
  out.push(...checkIssuerKeys(`${prefix}.issuer_keys`, keys.issuerKeys));
  if (keys.expirationTime !== null) {
    if (keys.expirationTime <= now) out.push({ field: `${prefix}.expiration_time`, description: "must be in the future" });
    else if (keys.expirationTime > now + STATIC_KEYS_MAX_LIFETIME_MS) {
      out.push({ field: `${prefix}.expiration_time`, description: "must be at most 365 days after the keys are registered" });
    }
  }
  if (keys.audiences.length > 1) out.push({ field: `${prefix}.audiences`, description: "at most one audience is supported" });
  else if (keys.audiences.length === 1 && keys.audiences[0] === "")
    out.push({ field: `${prefix}.audiences`, description: "must not be empty" });
  return out;
}
