/**
 * GET /registry/token: Distribution's token authentication. A registry
 * answers an anonymous request with `WWW-Authenticate: Bearer
 * realm=<this>,service=…,scope=…`; the client calls here with HTTP Basic,
 * either user `_token` and an API token of this server, or user = the uid of
 * an identity to assume and password = a workload's OIDC token (the token
 * exchange's rules: sts.ts identityAssumer). The answer is a registry token
 * granting what the caller's role bindings allow (token.ts).
 */
import { Code } from "@connectrpc/connect";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Authorizer } from "../auth/authorizer.js";
import type { Authenticator, Principal } from "../auth/principal.js";
import { addressKey, createCallRateLimiter, createFailureLimiter } from "../auth/rate-limit.js";
import type { Config } from "../config.js";
import { ApiError, invalidField, PermissionDeniedError, ResourceExhaustedError, UnauthenticatedError } from "../domain/errors.js";
import { isUidp } from "../domain/uidp.js";
import type { IdentityRecord, Store } from "../store/store.js";
import { RegistryKeys } from "./keys.js";
import { grantedAccess, parseScopes, signRegistryToken } from "./token.js";

/** The path registries send clients to (auth.token.realm). */
export const REGISTRY_TOKEN_PATH = "/registry/token";
/** The user that says the password is an API token (as docker login to the real registry). */
export const API_TOKEN_USER = "_token";
/** The realm of the Basic challenge. */
const BASIC_REALM = "platform-api registry";
/** Failed logins one client address may make per window before it is refused for a while. */
const FAILURES_PER_ADDRESS = 30;
const FAILURE_WINDOW_MS = 60_000;
/** The longest Basic credentials read: a uid, a colon and a JWT of a few kilobytes. */
const MAX_CREDENTIALS_LENGTH = 16 * 1024;

const BASIC = /^Basic[ ]+([A-Za-z0-9+/]+=*)$/i;

/** What the route needs from the server. */
export interface RegistryTokenDeps {
  config: Config;
  store: Store;
  authz: Authorizer;
  /** Authenticates `Authorization: Bearer <API token>` (the server's bearer authenticator). */
  authenticator: Authenticator;
  /** The token exchange's check that an OIDC token may assume an identity. */
  assume: (uid: string, token: string) => Promise<IdentityRecord>;
  now: () => number;
}

/** The user and password of a Basic header, or an UnauthenticatedError naming what is wrong. */
function basicCredentials(header: string | undefined): { user: string; password: string } {
  if (header === undefined || header.trim() === "") {
    throw new UnauthenticatedError(
      "Unauthenticated: send HTTP Basic credentials: user _token and an API token, or an identity uid and its OIDC token",
    );
  }
  const m = header.length <= MAX_CREDENTIALS_LENGTH ? BASIC.exec(header.trim()) : null;
  const decoded = m ? Buffer.from(m[1]!, "base64").toString("utf8") : "";
  const colon = decoded.indexOf(":");
  if (colon <= 0 || colon === decoded.length - 1) {
    throw new UnauthenticatedError("Unauthenticated: the Authorization header must be Basic base64(<user>:<password>)");
  }
  return { user: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

/** Installs GET /registry/token. */
export function installRegistryToken(app: FastifyInstance, deps: RegistryTokenDeps): void {
  const { config, store, now } = deps;
  const keys = new RegistryKeys(store.keys, () => store.version(["signing_keys"]), now);
  const failures = createFailureLimiter({ limit: FAILURES_PER_ADDRESS, windowMs: FAILURE_WINDOW_MS, now });
  const perSecond = config.callsPerIdentity;
  const calls = perSecond > 0 ? createCallRateLimiter({ perSecond, burst: 2 * perSecond, now: () => performance.now() }) : null;

  /** The principal the credentials name; a refused credential is an UnauthenticatedError (401), never a 403. */
  async function authenticate(req: FastifyRequest): Promise<Principal> {
    const { user, password } = basicCredentials(req.headers.authorization);
    if (user === API_TOKEN_USER) return deps.authenticator.authenticate(new Headers({ authorization: `Bearer ${password}` }));
    if (!isUidp(user)) {
      throw new UnauthenticatedError("Unauthenticated: the user must be _token (with an API token) or the uid of an identity to assume");
    }
    try {
      const identity = await deps.assume(user, password);
      await store.identities.touchLastSeen(identity.uid, now());
      return { subject: identity.uid, admin: false, token: { issuer: "", audience: [], issuedAt: now(), expiresAt: now() } };
    } catch (err) {
      if (err instanceof PermissionDeniedError)
        throw new UnauthenticatedError(err.message.replace(/^Permission denied/, "Unauthenticated"));
      throw err;
    }
  }

  app.get(REGISTRY_TOKEN_PATH, async (req, reply) => {
    const query = req.query as Record<string, string | string[] | undefined>;
    const service = query.service;
    if (service !== config.registry.service) throw invalidField("service", `must be this token service's, ${config.registry.service}`);
    const scopeValues = query.scope === undefined ? [] : Array.isArray(query.scope) ? query.scope : [query.scope];
    const scopes = parseScopes(scopeValues);
    // Other processes' writes (a revoked binding, a rotated key) are seen before anything is decided.
    await store.refresh();
    let principal: Principal;
    try {
      principal = await authenticate(req);
    } catch (err) {
      if (!(err instanceof UnauthenticatedError)) throw err;
      // Every login is judged, even from an address past its limit (a shared NAT must not lock everyone out):
      // only its failures are answered 429 then (back off), and valid credentials still get their token.
      const address = req.clientAddress === "" ? null : addressKey(req.clientAddress);
      const limited = address !== null && failures.blocked(address);
      if (address !== null) failures.recordFailure(address);
      if (limited)
        throw new ResourceExhaustedError("Resource exhausted: too many failed registry logins from this address; retry in a minute");
      reply.header("www-authenticate", `Basic realm="${BASIC_REALM}"`);
      throw err;
    }
    const wait = principal.admin ? 0 : (calls?.take(principal.subject) ?? 0);
    if (wait > 0) {
      throw new ApiError(
        Code.ResourceExhausted,
        "RATE_LIMITED",
        `Resource exhausted: this identity is calling faster than ${perSecond} calls per second; retry after the delay given`,
        { metadata: { quota: "calls_per_identity_per_second", limit: String(perSecond) }, retryDelayMs: wait },
      );
    }
    const access = await grantedAccess(deps, principal, scopes);
    const answer = await signRegistryToken(
      keys,
      { issuer: config.registry.issuer, service: config.registry.service, subject: principal.subject, access },
      now(),
    );
    return reply.header("cache-control", "no-store").send(answer);
  });
}
