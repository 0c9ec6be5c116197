import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import {
  DEVICE_POLL_SECONDS,
  FLOW_LIFETIME_MS,
  hashOf,
  isS256Challenge,
  loopbackRedirectAllowed,
  newDeviceCode,
  newUserCode,
  normalizeUserCode,
  OAUTH_CLIENTS,
} from "../../../auth/sign-in/oauth-clients.js";
import { ResourceExhaustedError } from "../../../domain/errors.js";
import { paramsOf } from "./browser-routes.js";
import { createFlow, newFlow, type BrowserBinding, type SignInDeps } from "./deps.js";
import { sendErrorPage } from "./pages.js";
import { GRANT_DEVICE_CODE, installTokenEndpoint, oauthError, repeatedParameter } from "./token-endpoint.js";

/** RFC 8414 metadata, the authorization endpoint (RFC 6749 + 7636 + 8252 + 9207), device authorization (RFC 8628) and revocation (RFC 7009). */
export function installOAuthRoutes(app: FastifyInstance, deps: SignInDeps, binding: BrowserBinding): void {
  const auth = deps.authUrl;
  app.get("/.well-known/oauth-authorization-server", async (_req, reply) =>
    reply.header("cache-control", "public, max-age=300").send({
      issuer: auth,
      authorization_endpoint: `${auth}/oauth/authorize`,
      token_endpoint: `${auth}/oauth/token`,
      device_authorization_endpoint: `${auth}/oauth/device_authorization`,
      revocation_endpoint: `${auth}/oauth/revoke`,
      jwks_uri: `${auth}/.well-known/jwks.json`,
      response_types_supported: ["code"],
      response_modes_supported: ["query"],
      grant_types_supported: ["authorization_code", "refresh_token", GRANT_DEVICE_CODE],
      code_challenge_methods_supported: ["S256"],
      token_endpoint_auth_methods_supported: ["none"],
      revocation_endpoint_auth_methods_supported: ["none"],
      authorization_response_iss_parameter_supported: true,
    }),
  );

  app.get("/oauth/authorize", async (req, reply) => authorize(deps, binding, req, reply));

  app.post("/oauth/device_authorization", async (req, reply) => {
    const form = paramsOf(req);
    const repeated = repeatedParameter(form);
    if (repeated) return oauthError(reply, 400, "invalid_request", `${repeated} is sent more than once`);
    const client = OAUTH_CLIENTS.get(form.get("client_id") ?? "");
    if (!client) return oauthError(reply, 401, "invalid_client", "unknown client_id");
    const scope = deps.upstreams.scopeOf(form);
    if (typeof scope === "string") return oauthError(reply, 400, "invalid_request", scope);
    const now = deps.now();
    const userCode = newUserCode();
    const flow = newFlow("device", req, now, {
      clientId: client.id,
      scope,
      userCodeHash: hashOf(normalizeUserCode(userCode)!),
      pollInterval: DEVICE_POLL_SECONDS,
    });
    const deviceCode = newDeviceCode(flow.expireTime);
    flow.deviceCodeHash = hashOf(deviceCode);
    try {
      await createFlow(deps, flow);
    } catch (err) {
      if (err instanceof ResourceExhaustedError)
        return oauthError(reply, 429, "slow_down", "too many sign-ins are pending from this address");
      throw err;
    }
    return reply.header("cache-control", "no-store").send({
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: `${auth}/device`,
      verification_uri_complete: `${auth}/device?user_code=${userCode}`,
      expires_in: FLOW_LIFETIME_MS / 1000,
      interval: DEVICE_POLL_SECONDS,
    });
  });

  app.post("/oauth/revoke", async (req, reply) => {
    const form = paramsOf(req);
    const token = form.get("token") ?? "";
    if (token === "") return oauthError(reply, 400, "invalid_request", "token is required");
    // RFC 7009 §2.2: an unknown or already revoked token is answered 200 like any other.
    if (token.length <= 512) await deps.refreshTokens.revoke(token);
    return reply.header("cache-control", "no-store").send({});
  });

  installTokenEndpoint(app, deps);
}

/**
 * GET /oauth/authorize. A client or redirect URI we do not know is answered
 * with an error page, never a redirect (no open redirect); once both are
 * known, errors go back to the client's loopback redirect as RFC 6749 says.
 */
async function authorize(deps: SignInDeps, binding: BrowserBinding, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = paramsOf(req);
  const client = OAUTH_CLIENTS.get(params.get("client_id") ?? "");
  if (!client || params.getAll("client_id").length > 1)
    return sendErrorPage(reply, 400, "The application asking you to sign in is unknown here.");
  const redirectUri = params.get("redirect_uri") ?? "";
  if (!loopbackRedirectAllowed(client, redirectUri) || params.getAll("redirect_uri").length > 1) {
    return sendErrorPage(reply, 400, "The application asked to be answered at an address that is not its own.");
  }
  const state = params.get("state") ?? "";
  const back = (error: string, description: string) => {
    const target = new URL(redirectUri);
    target.searchParams.set("error", error);
    target.searchParams.set("error_description", description);
    if (state !== "") target.searchParams.set("state", state);
    target.searchParams.set("iss", deps.authUrl);
    return reply.header("cache-control", "no-store").redirect(target.href, 303);
  };
  const repeated = repeatedParameter(params);
  if (repeated) return back("invalid_request", `${repeated} is sent more than once`);
  if (params.get("response_type") !== "code") return back("unsupported_response_type", "response_type must be code");
  const challenge = params.get("code_challenge") ?? "";
  if (params.get("code_challenge_method") !== "S256" || !isS256Challenge(challenge)) {
    return back("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256");
  }
  if (state.length > 512) return back("invalid_request", "state is too long");
  const scope = deps.upstreams.scopeOf(params);
  if (typeof scope === "string") return back("invalid_request", scope);
  const secret = binding.ensure(req, reply);
  const flow = newFlow("authorize", req, deps.now(), {
    clientId: client.id,
    redirectUri,
    clientState: state,
    codeChallenge: challenge,
    scope,
    browserBindingHash: hashOf(secret),
  });
  try {
    await createFlow(deps, flow);
  } catch (err) {
    if (err instanceof ResourceExhaustedError) return back("temporarily_unavailable", "too many sign-ins are pending from this address");
    throw err;
  }
  return reply.header("cache-control", "no-store").redirect(`/sign-in?flow=${encodeURIComponent(flow.id)}`, 303);
}
