/**
 * A real upstream OpenID provider for the sign-in tests: panva's
 * oidc-provider (OpenID Certified) on 127.0.0.1, port 0, with its
 * development login form (any login, any password). The login names the
 * person: its email is the login (verified, unless the login contains
 * "unverified"). Consent is granted without asking, so a sign-in is one form.
 *
 * Clients: OPERATOR_CLIENT (confidential, client_secret_basic: an operator
 * provider), ORG_PKCE_CLIENT (public, PKCE required) and ORG_SECRET_CLIENT
 * (confidential, no PKCE): an organization's provider with and without PKCE. `tamper` rewrites the claims of
 * the next ID tokens the token endpoint answers, re-signed with the
 * provider's own key (a provider answering for another audience, nonce…).
 *
 * FetchBrowser drives the same pages with fetch and a cookie jar, for the
 * tests that need no real browser.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { decodeJwt, exportJWK, generateKeyPair, SignJWT, type JWTPayload } from "jose";
import Provider from "oidc-provider";

type ProviderContext = Parameters<Parameters<Provider["use"]>[0]>[0];

export const OPERATOR_CLIENT = { id: "operator-client", secret: "operator-secret-0123456789" };
export const ORG_PKCE_CLIENT = "org-pkce";
/** An organization's provider with a client secret and no PKCE (the API asks for one of the two). */
export const ORG_SECRET_CLIENT = { id: "org-secret", secret: "org-secret-0123456789abcdef" };

export interface UpstreamOidc {
  issuer: string;
  /** Rewrites the claims of every ID token answered while set (re-signed with the provider's key). */
  tamper: ((claims: JWTPayload) => JWTPayload) | null;
  close(): Promise<void>;
}

/** Starts a provider whose clients may redirect to redirectUris (our `{auth}/sign-in/callback`). */
export async function startUpstreamOidc(redirectUris: string[]): Promise<UpstreamOidc> {
  let handler: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.writeHead(503).end();
  const server = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  const kid = "upstream-key";
  const jwk = { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" };
  const web = { redirect_uris: redirectUris, response_types: ["code"], grant_types: ["authorization_code"] };
  const provider = new Provider(issuer, {
    clients: [
      { ...web, client_id: OPERATOR_CLIENT.id, client_secret: OPERATOR_CLIENT.secret, token_endpoint_auth_method: "client_secret_basic" },
      { ...web, client_id: ORG_PKCE_CLIENT, token_endpoint_auth_method: "none" },
      {
        ...web,
        client_id: ORG_SECRET_CLIENT.id,
        client_secret: ORG_SECRET_CLIENT.secret,
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    jwks: { keys: [jwk] },
    claims: { email: ["email", "email_verified"], profile: ["name"] },
    scopes: ["openid", "email", "profile", "groups"],
    // As Google, Dex and Keycloak do: the scopes' claims in the ID token itself.
    conformIdTokenClaims: false,
    ttl: { Interaction: 600, Grant: 600, Session: 600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
    pkce: { required: (_ctx: unknown, client: { clientId: string }) => client.clientId === ORG_PKCE_CLIENT },
    cookies: { keys: ["upstream-test-cookie-key"] },
    findAccount: (_ctx: unknown, login: string) => ({
      accountId: login,
      claims: () => ({ sub: login, email: login, email_verified: !login.includes("unverified"), name: login.split("@")[0] }),
    }),
    // Consent is the person's own provider's business: granted at once, so a sign-in is the login form only.
    async loadExistingGrant(ctx: ProviderContext) {
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client!.clientId, accountId: ctx.oidc.session!.accountId! });
      grant.addOIDCScope(String(ctx.oidc.params!.scope ?? "openid"));
      grant.addOIDCClaims(["email", "email_verified", "name"]);
      await grant.save();
      return grant;
    },
  });
  const upstream: UpstreamOidc = {
    issuer,
    tamper: null,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  provider.use(async (ctx, next) => {
    await next();
    const body = ctx.body as { id_token?: string } | undefined;
    if (upstream.tamper && ctx.path === "/token" && body?.id_token) {
      const claims = upstream.tamper(decodeJwt(body.id_token));
      body.id_token = await new SignJWT(claims).setProtectedHeader({ alg: "RS256", kid }).sign(privateKey);
    }
  });
  handler = provider.callback();
  return upstream;
}

/** A response as FetchBrowser saw it: no redirect followed. */
export interface Seen {
  status: number;
  /** The Location header, made absolute; "" when none. */
  location: string;
  text: string;
  headers: Headers;
}

/**
 * A browser made of fetch: a cookie jar (by host, as browsers keep them:
 * ports share cookies), no redirect followed on its own. Enough for the
 * development login form and our pages.
 */
export class FetchBrowser {
  readonly cookies = new Map<string, Map<string, string>>();

  private cookieHeader(url: URL): string {
    return [...(this.cookies.get(url.hostname) ?? new Map<string, string>())].map(([n, v]) => `${n}=${v}`).join("; ");
  }

  private remember(url: URL, headers: Headers): void {
    const jar = this.cookies.get(url.hostname) ?? new Map<string, string>();
    this.cookies.set(url.hostname, jar);
    for (const line of headers.getSetCookie()) {
      const [pair = ""] = line.split(";");
      const eq = pair.indexOf("=");
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      if (/max-age=0|expires=thu, 01 jan 1970/i.test(line) || value === "") jar.delete(name);
      else jar.set(name, value);
    }
  }

  async request(
    url: string,
    init: { method?: string; form?: Record<string, string>; headers?: Record<string, string> } = {},
  ): Promise<Seen> {
    const target = new URL(url);
    const headers: Record<string, string> = { ...init.headers };
    const cookie = this.cookieHeader(target);
    if (cookie !== "") headers.cookie = cookie;
    let body: string | undefined;
    if (init.form) {
      headers["content-type"] = "application/x-www-form-urlencoded";
      body = new URLSearchParams(init.form).toString();
    }
    const res = await fetch(target, { method: init.method ?? (init.form ? "POST" : "GET"), headers, body, redirect: "manual" });
    this.remember(target, res.headers);
    const location = res.headers.get("location");
    return { status: res.status, location: location ? new URL(location, target).href : "", text: await res.text(), headers: res.headers };
  }

  get(url: string): Promise<Seen> {
    return this.request(url);
  }

  post(url: string, form: Record<string, string>): Promise<Seen> {
    return this.request(url, { form });
  }

  /** Follows redirects from url until one leads where stop says (not requested), or a page that is not a redirect. */
  async follow(url: string, stop: (url: string) => boolean = () => false): Promise<{ url: string; seen: Seen | null }> {
    let current = url;
    for (let hops = 0; hops < 20; hops++) {
      if (stop(current)) return { url: current, seen: null };
      const seen = await this.get(current);
      if (seen.status < 300 || seen.status >= 400 || seen.location === "") return { url: current, seen };
      current = seen.location;
    }
    throw new Error(`too many redirects from ${url}`);
  }

  /** Logs in at the upstream's development form shown at url; the URL it then sends the browser to (our callback). */
  async upstreamLogin(url: string, login: string, stop: (url: string) => boolean): Promise<string> {
    const form = await this.follow(url, stop);
    if (form.seen === null) return form.url;
    const action = /<form[^>]*action="([^"]+)"/.exec(form.seen.text)?.[1];
    if (!action) throw new Error(`no login form at ${form.url}: ${form.seen.status} ${form.seen.text.slice(0, 300)}`);
    const posted = await this.post(new URL(action.replace(/&amp;/g, "&"), form.url).href, { prompt: "login", login, password: "any" });
    if (posted.location === "") throw new Error(`the login was not accepted: ${posted.status} ${posted.text.slice(0, 300)}`);
    const next = await this.follow(posted.location, stop);
    if (next.seen !== null) throw new Error(`the upstream stopped at ${next.url}: ${next.seen.status} ${next.seen.text.slice(0, 300)}`);
    return next.url;
  }
}

/** The hidden fields and the buttons (name=value) of the first form of an HTML page. */
export function formOf(html: string): { action: string; fields: Record<string, string>; buttons: Record<string, string>[] } {
  const form = /<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/.exec(html);
  if (!form) throw new Error(`no form in ${html.slice(0, 300)}`);
  const unescape = (s: string) =>
    s
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'")
      .replace(/&lt;/g, "<")
      .replace(/&gt;/g, ">")
      .replace(/&amp;/g, "&");
  const fields: Record<string, string> = {};
  for (const m of form[2]!.matchAll(/<input type="hidden" name="([^"]*)" value="([^"]*)">/g)) fields[unescape(m[1]!)] = unescape(m[2]!);
  const buttons = [...form[2]!.matchAll(/<button[^>]*name="([^"]*)" value="([^"]*)"/g)].map((m) => ({
    [unescape(m[1]!)]: unescape(m[2]!),
  }));
  return { action: unescape(form[1]!), fields, buttons };
}
