import type { FastifyInstance, FastifyReply } from "fastify";
import { deviceCodeExpiry, FLOW_LIFETIME_MS, hashOf, OAUTH_CLIENTS, pkceMatches } from "../../../auth/sign-in/oauth-clients.js";
import { UnauthenticatedError } from "../../../domain/errors.js";
import type { SignInFlowRecord } from "../../../store/sign-in-store.js";
import { paramsOf } from "./browser-routes.js";
import type { SignInDeps } from "./deps.js";

export const GRANT_DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code";

/** A parameter sent twice is refused (RFC 6749 §3.1): which one, or null. */
export function repeatedParameter(params: URLSearchParams): string | null {
  const seen = new Set<string>();
  for (const name of params.keys()) {
    if (seen.has(name)) return name;
    seen.add(name);
  }
  return null;
}

/** How much slow_down adds to a device flow's interval (RFC 8628 §3.5). */
const SLOW_DOWN_SECONDS = 5;

/** An RFC 6749 §5.2 error answer. */
export function oauthError(reply: FastifyReply, status: number, error: string, description: string): FastifyReply {
  return reply.code(status).header("cache-control", "no-store").send({ error, error_description: description });
}

/**
 * POST /oauth/token: authorization_code (one-time, PKCE S256, the exact
 * redirect URI; a second use revokes what the first issued), refresh_token
 * (rotated by refresh-tokens.ts), and the device code (pending, slow_down,
 * expired, denied). Every answer is JSON; no token ever goes in a URL.
 */
export function installTokenEndpoint(app: FastifyInstance, deps: SignInDeps): void {
  /** The API token and a new refresh family for a finished flow. */
  async function tokensFor(flow: SignInFlowRecord, reply: FastifyReply): Promise<FastifyReply> {
    const access = await deps.tokens.mint(flow.identityUid);
    const refreshToken = await deps.refreshTokens.start(flow.identityUid, flow.clientId, flow.id);
    await deps.store.identities.touchLastSeen(flow.identityUid, deps.now());
    return answer(reply, access, refreshToken);
  }

  function answer(reply: FastifyReply, access: { token: string; expiresAt: number }, refreshToken: string): FastifyReply {
    const expiresIn = Math.max(0, Math.floor((access.expiresAt - deps.now()) / 1000));
    return reply
      .header("cache-control", "no-store")
      .header("pragma", "no-cache")
      .send({ access_token: access.token, token_type: "Bearer", expires_in: expiresIn, refresh_token: refreshToken });
  }

  async function authorizationCode(form: URLSearchParams, clientId: string, reply: FastifyReply): Promise<FastifyReply> {
    const code = form.get("code") ?? "";
    const flow = code === "" || code.length > 128 ? null : await deps.store.signInFlows.byCode(hashOf(code), deps.now());
    const invalid = () => oauthError(reply, 400, "invalid_grant", "the code is invalid, expired or already used");
    if (!flow || flow.kind !== "authorize" || flow.clientId !== clientId) return invalid();
    if (flow.status === "consumed" || flow.status === "denied") {
      // RFC 6749 §4.1.2: a code used twice is stolen or replayed; what its first use issued is revoked. The flow
      // is marked first, so a first use still issuing (below) sees the mark once its family exists.
      await deps.store.signInFlows.advance(flow.id, "consumed", { status: "denied" });
      await deps.refreshTokens.revokeFamily(flow.id);
      return invalid();
    }
    if (flow.status !== "signed-in" || form.get("redirect_uri") !== flow.redirectUri) return invalid();
    if (!pkceMatches(form.get("code_verifier") ?? "", flow.codeChallenge)) {
      return oauthError(reply, 400, "invalid_grant", "code_verifier does not match the code_challenge");
    }
    // Kept (consumed) for the flow's lifetime, so that a replay within it is seen.
    if (!(await deps.store.signInFlows.advance(flow.id, "signed-in", { status: "consumed", expireTime: deps.now() + FLOW_LIFETIME_MS }))) {
      await deps.refreshTokens.revokeFamily(flow.id);
      return invalid();
    }
    const access = await deps.tokens.mint(flow.identityUid);
    const refreshToken = await deps.refreshTokens.start(flow.identityUid, flow.clientId, flow.id);
    // A replay that came between the mark above and the family's start revoked nothing yet: it left its mark.
    if ((await deps.store.signInFlows.get(flow.id, deps.now()))?.status !== "consumed") {
      await deps.refreshTokens.revokeFamily(flow.id);
      return invalid();
    }
    await deps.store.identities.touchLastSeen(flow.identityUid, deps.now());
    return answer(reply, access, refreshToken);
  }

  async function deviceCode(form: URLSearchParams, clientId: string, reply: FastifyReply): Promise<FastifyReply> {
    const code = form.get("device_code") ?? "";
    const now = deps.now();
    const flow = code === "" || code.length > 128 ? null : await deps.store.signInFlows.byDeviceCode(hashOf(code), now);
    if (!flow) {
      const expiry = deviceCodeExpiry(code);
      if (expiry !== null && expiry <= now) return oauthError(reply, 400, "expired_token", "the device code has expired; start again");
      return oauthError(reply, 400, "invalid_grant", "unknown device code");
    }
    if (flow.kind !== "device" || flow.clientId !== clientId) return oauthError(reply, 400, "invalid_grant", "unknown device code");
    if (flow.status === "consumed") return oauthError(reply, 400, "invalid_grant", "the device code was already used");
    if (flow.status === "denied") return oauthError(reply, 400, "access_denied", "the person declined");
    // Polled sooner than the interval: slow_down, and the interval grows (RFC 8628 §3.5).
    if (now - flow.lastPollTime < flow.pollInterval * 1000) {
      await deps.store.signInFlows.advance(flow.id, flow.status, {
        pollInterval: flow.pollInterval + SLOW_DOWN_SECONDS,
        lastPollTime: now,
      });
      return oauthError(reply, 400, "slow_down", `poll at most every ${flow.pollInterval + SLOW_DOWN_SECONDS} seconds`);
    }
    if (flow.status !== "approved") {
      await deps.store.signInFlows.advance(flow.id, flow.status, { lastPollTime: now });
      return oauthError(reply, 400, "authorization_pending", "the person has not finished signing in yet");
    }
    if (!(await deps.store.signInFlows.advance(flow.id, "approved", { status: "consumed", lastPollTime: now }))) {
      return oauthError(reply, 400, "invalid_grant", "the device code was already used");
    }
    return tokensFor(flow, reply);
  }

  async function refreshToken(form: URLSearchParams, clientId: string, reply: FastifyReply): Promise<FastifyReply> {
    const token = form.get("refresh_token") ?? "";
    if (token === "" || token.length > 512) return oauthError(reply, 400, "invalid_grant", "the refresh token is invalid");
    try {
      const rotated = await deps.refreshTokens.rotate(token);
      // RFC 6749 §6: a refresh token is bound to the client it was issued to.
      if (rotated.clientId !== clientId) {
        await deps.refreshTokens.revoke(rotated.refreshToken);
        return oauthError(reply, 400, "invalid_grant", "the refresh token was issued to another client");
      }
      const access = await deps.tokens.mint(rotated.identityUid);
      return answer(reply, access, rotated.refreshToken);
    } catch (err) {
      if (err instanceof UnauthenticatedError)
        return oauthError(reply, 400, "invalid_grant", "the refresh token is invalid, expired or revoked");
      throw err;
    }
  }

  app.post("/oauth/token", async (req, reply) => {
    const form = paramsOf(req);
    const repeated = repeatedParameter(form);
    if (repeated) return oauthError(reply, 400, "invalid_request", `${repeated} is sent more than once`);
    const client = OAUTH_CLIENTS.get(form.get("client_id") ?? "");
    if (!client) return oauthError(reply, 401, "invalid_client", "unknown client_id");
    switch (form.get("grant_type")) {
      case "authorization_code":
        return authorizationCode(form, client.id, reply);
      case GRANT_DEVICE_CODE:
        return deviceCode(form, client.id, reply);
      case "refresh_token":
        return refreshToken(form, client.id, reply);
      case null:
        return oauthError(reply, 400, "invalid_request", "grant_type is required");
      default:
        return oauthError(reply, 400, "unsupported_grant_type", "grant_type must be authorization_code, refresh_token or the device code");
    }
  });
}
