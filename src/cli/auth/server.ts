/**
 * What `platform-api auth` asks of the server, over plain fetch: its OAuth
 * metadata (RFC 8414), the token endpoint (RFC 6749), revocation (RFC 7009),
 * the contract's refresh exchange (POST /sts/exchange_refresh_token, bearer =
 * the refresh token → TokenPair) and who a token stands for (GET
 * /auth/v1/ok). Every failure is one AuthCommandError line; no token is ever
 * part of one.
 */
import type { ServerCredentials } from "./credentials.js";
import { AuthCommandError, signInAgain } from "./error.js";

/** Our client at the server: a public client, PKCE S256, loopback redirects and the device grant. */
export const CLIENT_ID = "platform-cli";
/** How long any one request may take. */
const REQUEST_TIMEOUT_MS = 30_000;

/** The server's authorization server metadata (RFC 8414), the fields this command uses. */
export interface ServerMetadata {
  issuer: string;
  authorization_endpoint: string;
  token_endpoint: string;
  device_authorization_endpoint?: string;
  revocation_endpoint?: string;
  /** RFC 9207: when true, every authorization response carries `iss`. */
  authorization_response_iss_parameter_supported?: boolean;
}

/** An answer: its HTTP status and its body, parsed as JSON (undefined when it is not JSON). */
export interface Answer {
  status: number;
  body: unknown;
}

/** The server refused a refresh token (401): used already, revoked, expired, or unknown; it does not say which. */
export class RefreshRefusedError extends AuthCommandError {
  constructor(server: string) {
    super(
      `the session has ended (the server refused its refresh token: signed out, expired, or used elsewhere); sign in again: ${signInAgain(server)}`,
    );
    this.name = "RefreshRefusedError";
  }
}

/** No answer at all from the server (refused, unresolvable, TLS, timeout): perhaps passing, unlike a refusal. */
export class UnreachableError extends AuthCommandError {
  constructor(url: string, reason: string) {
    super(`cannot reach ${new URL(url).origin}: ${reason}`);
    this.name = "UnreachableError";
  }
}

/** Fetches url; a failure to get any answer (refused, unresolvable, TLS, timeout) or a redirect is an AuthCommandError. */
async function call(url: string, init: RequestInit): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(url, { ...init, redirect: "manual", signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  } catch (err) {
    throw new UnreachableError(url, unreachable(err));
  }
  if (res.status >= 300 && res.status < 400) {
    await res.body?.cancel();
    throw new AuthCommandError(
      `${url} redirects to ${res.headers.get("location") ?? "elsewhere"}: name the server by its own URL (--server or PLATFORM_URL)`,
    );
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body };
}

function unreachable(err: unknown): string {
  if (err instanceof DOMException && err.name === "TimeoutError") return `no answer within ${REQUEST_TIMEOUT_MS / 1000} s`;
  const cause = (err as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (cause?.code === "ECONNREFUSED") return "connection refused (is the server running there?)";
  if (typeof cause?.message === "string" && cause.message !== "") return cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** What a refusal says: RFC 6749's error (and description), the spec's error message, or the status. */
export function refusal(answer: Answer): string {
  const b = (answer.body ?? {}) as { error?: unknown; error_description?: unknown; message?: unknown };
  if (typeof b.error === "string") return typeof b.error_description === "string" ? `${b.error}: ${b.error_description}` : b.error;
  if (typeof b.message === "string" && b.message !== "") return b.message;
  return `HTTP ${answer.status}`;
}

/** Posts fields form-encoded (as every OAuth endpoint takes them) to url. */
export function postForm(url: string, fields: Record<string, string>): Promise<Answer> {
  return call(url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
    body: new URLSearchParams(fields).toString(),
  });
}

/** The server's metadata, from {server}/.well-known/oauth-authorization-server; its issuer must be server itself. */
export async function discover(server: string): Promise<ServerMetadata> {
  const url = `${server}/.well-known/oauth-authorization-server`;
  const answer = await call(url, { headers: { accept: "application/json" } });
  if (answer.status !== 200 || typeof answer.body !== "object" || answer.body === null)
    throw new AuthCommandError(
      `${server} has no sign-in (${url}: ${refusal(answer)}); is it a platform-api server of version 0.4 or later?`,
    );
  const m = answer.body as Partial<ServerMetadata>;
  // RFC 8414 §3.3: metadata naming another issuer must not be used; the other name is the one to sign in at.
  if (typeof m.issuer !== "string" || m.issuer.replace(/\/+$/, "") !== server)
    throw new AuthCommandError(`${server} says its issuer is ${JSON.stringify(m.issuer)}: name it that way (--server or PLATFORM_URL)`);
  const secure = server.startsWith("https:");
  for (const name of ["authorization_endpoint", "token_endpoint", "device_authorization_endpoint", "revocation_endpoint"] as const) {
    const value = m[name];
    if (value === undefined && name !== "authorization_endpoint" && name !== "token_endpoint") continue;
    if (typeof value !== "string" || !/^https?:\/\//.test(value) || (secure && !value.startsWith("https:")))
      throw new AuthCommandError(`${url}: ${name} ${JSON.stringify(value)} is not a usable URL`);
  }
  return m as ServerMetadata;
}

/** The token endpoint's answer to one request: the credentials, or RFC 6749's error code and what it says. */
export type TokenAnswer = { ok: true; credentials: ServerCredentials } | { ok: false; error: string; message: string };

/** Posts a token request (RFC 6749 §4.1.3, §5; RFC 8628 §3.4) from our client; a success must carry a refresh token. */
export async function requestToken(metadata: ServerMetadata, fields: Record<string, string>): Promise<TokenAnswer> {
  const answer = await postForm(metadata.token_endpoint, { ...fields, client_id: CLIENT_ID });
  const b = (answer.body ?? {}) as {
    access_token?: unknown;
    token_type?: unknown;
    expires_in?: unknown;
    refresh_token?: unknown;
    error?: unknown;
  };
  if (answer.status !== 200) {
    if (typeof b.error === "string") return { ok: false, error: b.error, message: refusal(answer) };
    throw new AuthCommandError(`the token endpoint refused: ${refusal(answer)}`);
  }
  if (typeof b.access_token !== "string" || typeof b.token_type !== "string" || b.token_type.toLowerCase() !== "bearer")
    throw new AuthCommandError("the token endpoint's answer holds no bearer access_token");
  if (typeof b.refresh_token !== "string" || b.refresh_token === "")
    throw new AuthCommandError("the token endpoint issued no refresh token");
  const expiry = typeof b.expires_in === "number" ? new Date(Date.now() + b.expires_in * 1000).toISOString() : jwtExpiry(b.access_token);
  return { ok: true, credentials: { token: b.access_token, expiry, refreshToken: b.refresh_token } };
}

/**
 * A new API token and refresh token for refreshToken (which the server marks used), from
 * POST {server}/sts/exchange_refresh_token. Throws RefreshRefusedError when the server refuses it (401).
 */
export async function exchangeRefreshToken(server: string, refreshToken: string): Promise<ServerCredentials> {
  const answer = await call(`${server}/sts/exchange_refresh_token`, {
    method: "POST",
    headers: { authorization: `Bearer ${refreshToken}`, "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
    body: "",
  });
  if (answer.status === 401) throw new RefreshRefusedError(server);
  if (answer.status !== 200) throw new AuthCommandError(`refreshing the token failed: ${refusal(answer)}`);
  const pair = (answer.body ?? {}) as { token?: { token?: unknown; expiry?: unknown }; refreshToken?: { token?: unknown } };
  const token = pair.token?.token;
  const next = pair.refreshToken?.token;
  if (typeof token !== "string" || token === "" || typeof next !== "string" || next === "")
    throw new AuthCommandError("refreshing the token failed: the answer is not a TokenPair");
  const expiry =
    typeof pair.token?.expiry === "string" && !Number.isNaN(Date.parse(pair.token.expiry)) ? pair.token.expiry : jwtExpiry(token);
  return { token, expiry, refreshToken: next };
}

/** Revokes refreshToken's session at the server (RFC 7009: 200 whether or not it was valid). */
export async function revokeRefreshToken(metadata: ServerMetadata, refreshToken: string): Promise<void> {
  if (metadata.revocation_endpoint === undefined) throw new AuthCommandError("the server has no revocation endpoint");
  const answer = await postForm(metadata.revocation_endpoint, {
    token: refreshToken,
    token_type_hint: "refresh_token",
    client_id: CLIENT_ID,
  });
  if (answer.status !== 200) throw new AuthCommandError(`the server did not revoke the session: ${refusal(answer)}`);
}

/** Who token stands for, from GET {server}/auth/v1/ok. */
export async function whoAmI(server: string, token: string): Promise<{ subject: string; email: string }> {
  const answer = await call(`${server}/auth/v1/ok`, { headers: { authorization: `Bearer ${token}`, accept: "application/json" } });
  if (answer.status === 401)
    throw new AuthCommandError(`the server refused the API token (${refusal(answer)}); sign in again: ${signInAgain(server)}`);
  if (answer.status !== 200) throw new AuthCommandError(`${server}/auth/v1/ok: ${refusal(answer)}`);
  const b = (answer.body ?? {}) as { subject?: unknown; email?: unknown };
  return { subject: typeof b.subject === "string" ? b.subject : "", email: typeof b.email === "string" ? b.email : "" };
}

/** A JWT's exp as RFC 3339 (read, not verified: the server verifies; this only says when to refresh). */
function jwtExpiry(token: string): string {
  try {
    const claims = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString("utf8")) as { exp?: unknown };
    if (typeof claims.exp === "number") return new Date(claims.exp * 1000).toISOString();
  } catch {
    // not a JWT: fall through
  }
  throw new AuthCommandError("the server's token says no expiry");
}
