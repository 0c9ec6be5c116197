/**
 * GET /registry/token: Distribution's token authentication. A registry
 * answers an anonymous request with `WWW-Authenticate: Bearer
 * realm=<this>,service=…,scope=…`; the client calls here with HTTP Basic,
 * either user `_token` and an API token of this server, or user = the uid of
 * an identity to assume and password = a workload's OIDC token (the token
 * exchange's rules: sts.ts identityAssumer). The answer is a registry token
 * granting what the caller's role bindings allow (token.ts).
 *
 * POST /registry/token: the same, as Distribution's OAuth2 form
 * (grant_type=password, username, password, service, scope): what containerd
 * (and so Kubernetes' image pulls) tries first when it has a password. No
 * refresh tokens are issued, so grant_type=refresh_token is refused (400:
 * clients then ask with GET).
 */
import { Code } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Authorizer } from "../auth/authorizer.js";
import type { Authenticator, Principal } from "../auth/principal.js";
import { addressKey, createCallRateLimiter, createFailureLimiter } from "../auth/rate-limit.js";
import type { Config } from "../config.js";
import { ApiError, invalidField, PermissionDeniedError, ResourceExhaustedError, UnauthenticatedError } from "../domain/errors.js";
import { isUidp } from "../domain/uidp.js";
import { sendError } from "../server/rest/routes.js";
import type { IdentityRecord, Store } from "../store/store.js";
import { RegistryKeys } from "./keys.js";
import { grantedAccess, parseScopes, signRegistryToken, type AccessEntry, type RegistryTokenAnswer } from "./token.js";

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
/** The largest OAuth2 form read: the credentials and the scopes (at most 8 of 512 characters), encoded. */
const MAX_FORM_BYTES = 32 * 1024;

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

/** The credentials of an OAuth2 password grant, or an error naming what is wrong (nothing counts as a failed login but bad credentials). */
function formCredentials(form: URLSearchParams): { user: string; password: string } {
  const grant = form.get("grant_type");
  if (grant !== "password") {
    throw invalidField(
      "grant_type",
      grant === null ? "is required: password" : "must be password: no refresh tokens are issued here; ask with GET for a new token",
    );
  }
  const user = form.get("username") ?? "";
  const password = form.get("password") ?? "";
  if (user === "" || password === "") {
    throw new UnauthenticatedError(
      "Unauthenticated: send username and password: username _token and an API token, or an identity uid and its OIDC token",
    );
  }
  if (user.length + password.length > MAX_CREDENTIALS_LENGTH)
    throw new UnauthenticatedError("Unauthenticated: the credentials are too long");
  return { user, password };
}

/** Installs GET and POST /registry/token. */
export function installRegistryToken(app: FastifyInstance, deps: RegistryTokenDeps): void {
  const { config, store, now } = deps;
  const keys = new RegistryKeys(store.keys, () => store.version(["signing_keys"]), now);
  const failures = createFailureLimiter({ limit: FAILURES_PER_ADDRESS, windowMs: FAILURE_WINDOW_MS, now });
  const perSecond = config.callsPerIdentity;
  const calls = perSecond > 0 ? createCallRateLimiter({ perSecond, burst: 2 * perSecond, now: () => performance.now() }) : null;

  /** The principal the credentials name; a refused credential is an UnauthenticatedError (401), never a 403. */
  async function authenticate(credentials: () => { user: string; password: string }): Promise<Principal> {
    const { user, password } = credentials();
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

  /** A token for the scopes asked, to the caller the credentials name. */
  async function answer(
    req: FastifyRequest,
    reply: FastifyReply,
    ask: { service: unknown; scopes: readonly string[]; credentials: () => { user: string; password: string } },
  ): Promise<{ token: RegistryTokenAnswer; access: AccessEntry[] }> {
    if (ask.service !== config.registry.service) throw invalidField("service", `must be this token service's, ${config.registry.service}`);
    const scopes = parseScopes(ask.scopes);
    // Other processes' writes (a revoked binding, a rotated key) are seen before anything is decided.
    await store.refresh();
    let principal: Principal;
    try {
      principal = await authenticate(ask.credentials);
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
    reply.header("cache-control", "no-store");
    const claims = { issuer: config.registry.issuer, service: config.registry.service, subject: principal.subject, access };
    return { token: await signRegistryToken(keys, claims, now()), access };
  }

  app.get(REGISTRY_TOKEN_PATH, async (req, reply) => {
    const query = req.query as Record<string, string | string[] | undefined>;
    const scopes = query.scope === undefined ? [] : Array.isArray(query.scope) ? query.scope : [query.scope];
    const { token } = await answer(req, reply, {
      service: query.service,
      scopes,
      credentials: () => basicCredentials(req.headers.authorization),
    });
    return reply.send(token);
  });

  // The OAuth2 form, in a scope of its own: only this route reads form bodies, and only this small.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string", bodyLimit: MAX_FORM_BYTES }, (_req, body, done) =>
      done(null, new URLSearchParams(body as string)),
    );
    // Another type of body is told which this route reads; every other error is the server's answer (thrown on).
    scope.setErrorHandler((err: Error & { statusCode?: number }, _req, reply) => {
      if (err.statusCode !== 415) throw err;
      return sendError(reply, invalidField("Content-Type", "must be application/x-www-form-urlencoded"), 415);
    });
    scope.post(REGISTRY_TOKEN_PATH, { bodyLimit: MAX_FORM_BYTES }, async (req, reply) => {
      const form = req.body instanceof URLSearchParams ? req.body : new URLSearchParams();
      // OAuth2's scope is space-delimited; Distribution's clients may also repeat it.
      const scopes = form.getAll("scope").flatMap((s) => s.split(" ").filter((v) => v !== ""));
      const { token, access } = await answer(req, reply, {
        service: form.get("service"),
        scopes,
        credentials: () => formCredentials(form),
      });
      // As Distribution's OAuth2 answer: the token as access_token, and the scope granted.
      return reply.send({ ...token, scope: access.map((a) => `${a.type}:${a.name}:${a.actions.join(",")}`).join(" ") });
    });
  });
}
