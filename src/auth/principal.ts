import { createContextKey } from "@connectrpc/connect";

/**
 * Who is calling. Set once per request by the service wrapper
 * (src/server/wrap.ts) and read by handlers through principalKey.
 */
export interface Principal {
  /** The identity uid the caller acts as. */
  subject: string;
  /** Holds every capability everywhere (the built-in administrator). */
  admin: boolean;
  /** The verified token's claims, for WhoAmI. */
  token: { issuer: string; audience: string[]; issuedAt: number; expiresAt: number };
}

/** Context value carrying the authenticated principal of the current call. */
export const principalKey = createContextKey<Principal | null>(null, { description: "authenticated principal" });

/** Resolves the principal of a call from its request headers. */
export interface Authenticator {
  /** Returns the principal, or throws UnauthenticatedError. */
  authenticate(headers: Headers): Principal | Promise<Principal>;
}

/**
 * Context value carrying the peer's IP address ("" when unknown), set by each
 * entry point; per-address limits key on it (see addressKey in rate-limit.ts).
 */
export const clientAddressKey = createContextKey<string>("", { description: "client address" });

/** Context value carrying the request id, set by each entry point (REST, Connect, gRPC); events record it. */
export const requestIdKey = createContextKey<string>("", { description: "request id" });
