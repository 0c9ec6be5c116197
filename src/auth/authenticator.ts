import { randomBytes } from "node:crypto";
import { UnauthenticatedError } from "../domain/errors.js";
import type { KeyStore } from "../store/store.js";
import type { Authenticator, Principal } from "./principal.js";
import { TokenRejectedError, type TokenService } from "./tokens.js";

/**
 * The uid the built-in administrator acts as: a root-level uid created on
 * first start and kept in the store. Whoever can read the data directory can
 * mint tokens for it (the root of trust, like a database superuser).
 */
export async function adminSubject(keys: KeyStore): Promise<string> {
  return (await keys.secret("admin-subject", () => randomBytes(20))).toString("hex");
}

const BEARER = /^Bearer[ ]+([A-Za-z0-9\-_.~+/]+=*)$/i;

/**
 * Authenticates `Authorization: Bearer <API token>` with tokens this server
 * issued, for identities that still exist: a deleted identity's token stops
 * working at once, not when it expires. identityExists is the store's cached
 * lookup (invalidated when an identity is deleted); the administrator is no
 * stored identity and is exempt. onRejected receives the exact reason a
 * token was refused (for a debug log line); the client's message says only
 * which kind of problem it is.
 */
export function createBearerAuthenticator(
  tokens: TokenService,
  admin: string,
  identityExists: (uid: string) => Promise<boolean>,
  onRejected: (reason: string) => void = () => {},
): Authenticator {
  const verify = (token: string) =>
    tokens.verify(token).catch((err: unknown) => {
      if (err instanceof TokenRejectedError) onRejected(err.detail);
      throw err;
    });
  return {
    async authenticate(headers: Headers): Promise<Principal> {
      const header = headers.get("authorization");
      if (header === null || header === "")
        throw new UnauthenticatedError("Unauthenticated: no bearer token; send Authorization: Bearer <API token>");
      const m = BEARER.exec(header.trim());
      if (!m) throw new UnauthenticatedError("Unauthenticated: the Authorization header must be Bearer <API token>");
      const t = await verify(m[1]!);
      if (t.subject !== admin && !(await identityExists(t.subject))) {
        onRejected(`identity ${t.subject} no longer exists`);
        throw new UnauthenticatedError("Unauthenticated: the identity this API token was issued to no longer exists");
      }
      return {
        subject: t.subject,
        admin: t.subject === admin,
        token: { issuer: t.issuer, audience: t.audience, issuedAt: t.issuedAt, expiresAt: t.expiresAt },
      };
    },
  };
}
