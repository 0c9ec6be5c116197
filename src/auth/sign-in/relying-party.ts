import * as oauth from "oauth4webapi";
import { outboundAddressAllowed, type OutboundPolicy } from "../../domain/outbound-address.js";
import { QueryCache } from "../../store/decorators/query-cache.js";
import { requestGuarded } from "../guarded-fetch.js";
import type { UpstreamClaims, UpstreamVerifier } from "../upstream.js";

/** An upstream provider as one sign-in uses it: the operator's (confidential) or an organization's (public). */
export interface UpstreamClient {
  /** "op:<id>" for an operator provider, "idp:<uid>" for an organization's. */
  key: string;
  issuer: string;
  clientId: string;
  /** "" for a public client (an organization's provider): no client authentication. */
  clientSecret: string;
  /** Scopes besides openid. */
  scopes: readonly string[];
  /** PKCE S256 (operator providers always; an organization's when pkceEnabled). */
  pkce: boolean;
  /** The operator's provider: fetched from any address. An organization's only where outbound-address.ts allows. */
  operator: boolean;
  /** Whose share of issuer fetches the ID token's keys count against (the organization), undefined for the operator's. */
  tenant?: string;
}

/** What the upstream leg must remember between its start and its callback. */
export interface UpstreamSecrets {
  state: string;
  nonce: string;
  /** "" when the client does not use PKCE. */
  verifier: string;
}

/** Why the upstream leg failed; the message is safe to show and log (never a token, code or secret). */
export class UpstreamSignInError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UpstreamSignInError";
  }
}

const DISCOVERY_TTL_MS = 10 * 60_000;
const FETCH_TIMEOUT_MS = 5_000;
const MAX_BODY_BYTES = 256 * 1024;
const CLOCK_TOLERANCE_SECONDS = 60;

/**
 * The relying-party leg of a sign-in, over oauth4webapi: discovery (cached
 * 10 minutes per issuer, bounded), the authorization URL (state, nonce,
 * PKCE S256), and the callback: state and RFC 9207 `iss` checked, the code
 * exchanged with the verifier (client_secret_basic for a confidential
 * client), the ID token's iss, aud, azp, exp, iat and nonce checked by
 * oauth4webapi and its signature by UpstreamVerifier (the issuer's JWKS,
 * fetched through the same guard). Every request goes through
 * requestGuarded: one timeout, a size cap, no redirects, and an
 * organization's provider only at addresses outbound-address.ts allows.
 */
export class RelyingParty {
  private readonly discovered = new QueryCache<{ as: oauth.AuthorizationServer; until: number }>(1_000);

  constructor(
    private readonly opts: {
      /** `{PLATFORM_AUTH_URL}/sign-in/callback`. */
      redirectUri: string;
      policy: OutboundPolicy;
      upstream: UpstreamVerifier;
      now: () => number;
    },
  ) {}

  /** The upstream authorization URL to send the browser to, and the secrets the callback must match. */
  async start(client: UpstreamClient): Promise<{ url: string; secrets: UpstreamSecrets }> {
    const as = await this.discover(client);
    if (!as.authorization_endpoint) throw new UpstreamSignInError("the provider's discovery document has no authorization endpoint");
    const url = new URL(as.authorization_endpoint);
    if (url.protocol !== "https:" && url.protocol !== "http:")
      throw new UpstreamSignInError("the provider's authorization endpoint is not http(s)");
    const secrets = { state: oauth.generateRandomState(), nonce: oauth.generateRandomNonce(), verifier: "" };
    const p = url.searchParams;
    p.set("response_type", "code");
    p.set("client_id", client.clientId);
    p.set("redirect_uri", this.opts.redirectUri);
    p.set("scope", ["openid", ...client.scopes.filter((s) => s !== "openid")].join(" "));
    p.set("state", secrets.state);
    p.set("nonce", secrets.nonce);
    if (client.pkce) {
      secrets.verifier = oauth.generateRandomCodeVerifier();
      p.set("code_challenge", await oauth.calculatePKCECodeChallenge(secrets.verifier));
      p.set("code_challenge_method", "S256");
    }
    return { url: url.href, secrets };
  }

  /**
   * Finishes the leg from the callback's query: the verified ID token's
   * claims. Throws UpstreamSignInError for anything that does not check out
   * (the provider's error, a state or issuer mismatch, a failed exchange, an
   * ID token for another client or nonce, a bad signature).
   */
  async finish(client: UpstreamClient, callback: URLSearchParams, secrets: UpstreamSecrets): Promise<UpstreamClaims> {
    const as = await this.discover(client);
    const rp = this.client(client);
    let params: URLSearchParams;
    try {
      params = oauth.validateAuthResponse(as, rp, callback, secrets.state);
    } catch (err) {
      if (err instanceof oauth.AuthorizationResponseError) throw new UpstreamSignInError(`the provider answered ${safeCode(err.error)}`);
      throw new UpstreamSignInError("the provider's answer does not match this sign-in (state or issuer)");
    }
    let idToken: string;
    try {
      const auth = client.clientSecret === "" ? oauth.None() : oauth.ClientSecretBasic(client.clientSecret);
      const res = await this.inSlot(client, () =>
        oauth.authorizationCodeGrantRequest(
          as,
          rp,
          auth,
          params,
          this.opts.redirectUri,
          client.pkce ? secrets.verifier : oauth.nopkce,
          this.fetchOptions(client),
        ),
      );
      const tokens = await oauth.processAuthorizationCodeResponse(as, rp, res, { expectedNonce: secrets.nonce, requireIdToken: true });
      idToken = tokens.id_token!;
    } catch (err) {
      if (err instanceof oauth.ResponseBodyError) throw new UpstreamSignInError(`the provider refused the code: ${safeCode(err.error)}`);
      const code = (err as { code?: unknown }).code;
      throw new UpstreamSignInError(`the provider's token answer does not check out (${typeof code === "string" ? code : "no answer"})`);
    }
    // oauth4webapi checked iss, aud, azp, exp, iat and nonce; the signature is checked against the issuer's keys here.
    try {
      const claims = await this.opts.upstream.verify(idToken, (iss) => iss === client.issuer, client.tenant);
      const aud = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
      if (!aud.includes(client.clientId)) throw new Error("audience");
      return claims;
    } catch {
      throw new UpstreamSignInError("the provider's ID token does not verify");
    }
  }

  private client(client: UpstreamClient): oauth.Client {
    return { client_id: client.clientId, [oauth.clockTolerance]: CLOCK_TOLERANCE_SECONDS };
  }

  /** The issuer's metadata, fetched once per 10 minutes. */
  private async discover(client: UpstreamClient): Promise<oauth.AuthorizationServer> {
    const key = `${client.operator ? "op" : "org"} ${client.issuer}`;
    const cached = this.discovered.get(key);
    if (cached && cached.until > this.opts.now()) return cached.as;
    try {
      const issuer = new URL(client.issuer);
      const as = await this.inSlot(client, async () =>
        oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { ...this.fetchOptions(client), algorithm: "oidc" })),
      );
      this.discovered.set(key, { as, until: this.opts.now() + DISCOVERY_TTL_MS });
      return as;
    } catch {
      throw new UpstreamSignInError("the provider's discovery document could not be read");
    }
  }

  /** One outbound request in the client's share of issuer fetches (upstream.ts): an organization's two, or a refusal. */
  private inSlot<T>(client: UpstreamClient, fetch: () => Promise<T>): Promise<T> {
    return this.opts.upstream.inFetchSlot({ tenant: client.tenant, priority: client.operator }, fetch);
  }

  private fetchOptions(client: UpstreamClient): { [oauth.customFetch]: typeof fetch; [oauth.allowInsecureRequests]?: boolean } {
    const allowed = client.operator ? () => true : (address: string) => outboundAddressAllowed(address, this.opts.policy);
    return {
      [oauth.customFetch]: guardedFetch(allowed) as typeof fetch,
      // http only where the providers file or PLATFORM_ALLOW_LOOPBACK_ISSUERS allowed it (a loopback provider).
      ...(client.issuer.startsWith("http:") ? { [oauth.allowInsecureRequests]: true } : {}),
    };
  }
}

/** An OAuth error code as shown: its characters only (RFC 6749 restricts them), at most 64. */
function safeCode(code: string): string {
  return code.replace(/[^\x20-\x7e]/g, "").slice(0, 64);
}

/** fetch for oauth4webapi over requestGuarded: only allowed addresses, one timeout, bounded bodies, no redirects. */
function guardedFetch(addressAllowed: (address: string) => boolean) {
  return async (url: string, init: { method?: string; headers?: HeadersInit; body?: unknown }): Promise<Response> => {
    const method = init.method === "POST" ? "POST" : "GET";
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((value, key) => (headers[key] = value));
    const body = init.body === undefined || init.body === null ? undefined : Buffer.from(String(init.body));
    const res = await requestGuarded(
      url,
      { method, headers, body, label: { name: "sign-in upstream", attributes: {} } },
      {
        timeoutMs: FETCH_TIMEOUT_MS,
        maxBytes: MAX_BODY_BYTES,
        addressAllowed,
      },
    );
    if (res.truncated) throw new Error("answer too large");
    const out = new Headers();
    for (const [name, value] of Object.entries(res.headers)) {
      if (typeof value === "string") out.set(name, value);
      else if (Array.isArray(value)) for (const v of value) out.append(name, v);
    }
    const empty = [101, 204, 205, 304].includes(res.status);
    return new Response(empty ? null : new Uint8Array(res.body), { status: res.status, headers: out });
  };
}
