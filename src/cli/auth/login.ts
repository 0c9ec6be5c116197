/**
 * `platform-api auth login`: a person signs in at the server and this
 * command keeps the API token and refresh token it is given. With a browser:
 * the authorization code flow with PKCE (RFC 7636, S256) and a loopback
 * redirect (RFC 8252), the URL always printed; without one (--headless): the
 * device grant (RFC 8628). The server's endpoints come from its metadata
 * (RFC 8414). Signing in again replaces the server's profile and revokes the
 * session it held.
 */
import { createHash, randomBytes } from "node:crypto";
import { openBrowser } from "./browser.js";
import { readCredentials, withCredentialsLock, writeCredentials, type ServerCredentials } from "./credentials.js";
import { pollForToken, startDeviceAuthorization } from "./device.js";
import { AuthCommandError, printable } from "./error.js";
import { listenForCallback } from "./loopback.js";
import { CLIENT_ID, discover, requestToken, revokeRefreshToken, whoAmI, type ServerMetadata } from "./server.js";

/** Where to sign in: an organization's identity provider (uid), an organization (name), or an operator's provider (id). */
export interface SignInScope {
  idp: string;
  org: string;
  provider: string;
}

export interface LoginOptions {
  server: string;
  headless: boolean;
  scope: SignInScope;
  credentialsPath: string;
}

/** How long the browser has to come back (the server's pending sign-ins last 10 minutes). */
const BROWSER_TIMEOUT_MS = 5 * 60_000;

const say = (line: string) => process.stderr.write(`${line}\n`);

/** Signs in at options.server and stores the credentials; resolves with the exit code. */
export async function login(options: LoginOptions): Promise<number> {
  const { server, credentialsPath } = options;
  // A credentials file that cannot be used is said before the person signs in, not after.
  readCredentials(credentialsPath);
  if (server.startsWith("http:") && !isLoopback(new URL(server).hostname))
    say(`warning: ${server} is plain HTTP: tokens cross the network unencrypted`);
  const metadata = await discover(server);
  const credentials = options.headless ? await deviceSignIn(metadata, options.scope) : await browserSignIn(metadata, options.scope);
  const previous = await withCredentialsLock(credentialsPath, async () => {
    const all = readCredentials(credentialsPath);
    const before = all[server];
    all[server] = credentials;
    writeCredentials(credentialsPath, all);
    return before;
  });
  // The session this sign-in replaces ends too; if the server cannot be told, it ends at its own lifetime.
  if (previous !== undefined) await revokeRefreshToken(metadata, previous.refreshToken).catch(() => {});
  let who = "";
  try {
    const me = await whoAmI(server, credentials.token);
    who = ` as ${me.subject}${me.email === "" ? "" : ` (${printable(me.email)})`}`;
  } catch {
    // Signed in all the same; `auth status` says who.
  }
  say(`Signed in to ${server}${who}.`);
  return 0;
}

function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** The scope as the server's parameters (idp, org, provider), the empty ones left out. */
function scopeParameters(scope: SignInScope): Record<string, string> {
  return Object.fromEntries(Object.entries(scope).filter(([, v]) => v !== ""));
}

/** The authorization code flow with PKCE and a loopback redirect. */
async function browserSignIn(metadata: ServerMetadata, scope: SignInScope): Promise<ServerCredentials> {
  const methods = (metadata as { code_challenge_methods_supported?: unknown }).code_challenge_methods_supported;
  if (Array.isArray(methods) && !methods.includes("S256")) throw new AuthCommandError("the server does not offer PKCE with S256");
  const verifier = randomBytes(32).toString("base64url");
  const state = randomBytes(16).toString("base64url");
  const listener = await listenForCallback({
    state,
    issuer: metadata.issuer,
    issRequired: metadata.authorization_response_iss_parameter_supported === true,
    timeoutMs: BROWSER_TIMEOUT_MS,
  });
  const url = new URL(metadata.authorization_endpoint);
  const parameters = {
    response_type: "code",
    client_id: CLIENT_ID,
    redirect_uri: listener.redirectUri,
    code_challenge: createHash("sha256").update(verifier).digest("base64url"),
    code_challenge_method: "S256",
    state,
    ...scopeParameters(scope),
  };
  for (const [name, value] of Object.entries(parameters)) url.searchParams.set(name, value);
  say(`To sign in, open this page in a browser on this machine:\n\n  ${url.href}\n`);
  if (openBrowser(url.href)) say("(A browser was started with it.)");
  else say("No browser can be started here. Over SSH, or with the browser on another machine, use: platform-api auth login --headless");
  say(`Waiting for the sign-in to finish (${BROWSER_TIMEOUT_MS / 60_000} minutes at most; Ctrl-C stops)…`);
  const code = await listener.code;
  const answer = await requestToken(metadata, {
    grant_type: "authorization_code",
    code,
    redirect_uri: listener.redirectUri,
    code_verifier: verifier,
  });
  if (!answer.ok) throw new AuthCommandError(`the server refused the sign-in's code (${answer.message})`);
  return answer.credentials;
}

/** The device grant: the person signs in on any device with the code printed here. */
async function deviceSignIn(metadata: ServerMetadata, scope: SignInScope): Promise<ServerCredentials> {
  const device = await startDeviceAuthorization(metadata, scopeParameters(scope));
  say(`To sign in, open this page in a browser on any device:\n\n  ${printable(device.verification_uri)}\n`);
  say(`and enter the code: ${printable(device.user_code)}\n`);
  if (device.verification_uri_complete !== undefined)
    say(`Or open this page, which has the code filled in:\n\n  ${printable(device.verification_uri_complete)}\n`);
  const expires = device.expires_in >= 120 ? `${Math.round(device.expires_in / 60)} minutes` : `${device.expires_in} s`;
  say(`Waiting for the sign-in to finish (the code expires in ${expires}; Ctrl-C stops)…`);
  return pollForToken(metadata, device);
}
