/**
 * The sign-in tests' world: a real upstream provider (upstream-oidc.ts), a
 * providers file naming it, a server whose auth URL is known before it starts
 * (the upstream must know our callback), PKCE pairs, and a loopback listener
 * standing in for the command line's.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { AuthService } from "../../gen/platformapi/auth/v1/auth_pb.js";
import type { Store } from "../../src/store/store.js";
import { testTransport } from "./connect.js";
import { grpcClient } from "./grpc.js";
import { freePort } from "./serve-process.js";
import { startTestServer, type TestServer } from "./server.js";
import { formOf, OPERATOR_CLIENT, startUpstreamOidc, type FetchBrowser, type Seen, type UpstreamOidc } from "./upstream-oidc.js";

/** A PKCE pair (S256). */
export function pkcePair(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString("base64url");
  return { verifier, challenge: createHash("sha256").update(verifier).digest("base64url") };
}

/** Writes a providers file naming each upstream as an operator provider (ids "test", "test2", …). */
export function providersFile(upstreams: UpstreamOidc[]): string {
  const path = join(mkdtempSync(join(tmpdir(), "sign-in-providers-")), "providers.json");
  const list = upstreams.map((u, i) => ({
    id: i === 0 ? "test" : `test${i + 1}`,
    name: i === 0 ? "Test Provider" : `Test Provider ${i + 1}`,
    issuer: u.issuer,
    clientId: OPERATOR_CLIENT.id,
    clientSecret: OPERATOR_CLIENT.secret,
  }));
  writeFileSync(path, JSON.stringify(list));
  return path;
}

/** A server with sign-in set up, its upstream providers, and its auth URL. */
export interface SignInWorld {
  auth: string;
  server: TestServer;
  upstream: UpstreamOidc;
  /** A second upstream (another operator provider, "test2"): the mix-up tests' other issuer. */
  other: UpstreamOidc;
  /** An upstream no operator configured: organizations' own providers point at it. */
  orgUpstream: UpstreamOidc;
  close(): Promise<void>;
}

/** Starts two upstreams and a server on a port chosen first, every engine as the suite's. */
export async function startSignInWorld(
  opts: {
    env?: Record<string, string>;
    now?: () => number;
    logStream?: NodeJS.WritableStream;
    decorateStore?: (store: Store) => Store;
  } = {},
): Promise<SignInWorld> {
  const port = await freePort();
  const auth = `http://127.0.0.1:${port}`;
  const callback = [`${auth}/sign-in/callback`];
  const upstream = await startUpstreamOidc(callback);
  const other = await startUpstreamOidc(callback);
  const orgUpstream = await startUpstreamOidc(callback);
  const closeUpstreams = () => Promise.all([upstream.close(), other.close(), orgUpstream.close()]);
  const server = await startTestServer({
    env: {
      PORT: String(port),
      PLATFORM_BASE_URL: auth,
      PLATFORM_SIGN_IN_PROVIDERS_FILE: providersFile([upstream, other]),
      ...opts.env,
    },
    now: opts.now,
    logStream: opts.logStream,
    decorateStore: opts.decorateStore,
  }).catch(async (err: unknown) => {
    await closeUpstreams();
    throw err;
  });
  return {
    auth,
    server,
    upstream,
    other,
    orgUpstream,
    async close() {
      await server.close();
      await closeUpstreams();
    },
  };
}

/** A loopback listener like the command line's: records every query it receives at /callback. */
export async function startLoopbackListener(host: "127.0.0.1" | "::1" = "127.0.0.1") {
  const received: URLSearchParams[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://loopback");
    if (url.pathname === "/callback") received.push(url.searchParams);
    res
      .writeHead(200, { "content-type": "text/html; charset=utf-8" })
      .end("<!doctype html><title>done</title><p>You may close this window.</p>");
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    redirectUri: `http://${host === "::1" ? "[::1]" : host}:${port}/callback`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The authorize URL of platform-cli for redirectUri and challenge, with more parameters. */
export function authorizeUrl(
  auth: string,
  redirectUri: string,
  challenge: string,
  state: string,
  extra: Record<string, string> = {},
): string {
  const q = new URLSearchParams({
    response_type: "code",
    client_id: "platform-cli",
    redirect_uri: redirectUri,
    code_challenge: challenge,
    code_challenge_method: "S256",
    state,
    ...extra,
  });
  return `${auth}/oauth/authorize?${q}`;
}

/**
 * Drives a sign-in with fetch from one of our URLs (the authorize endpoint,
 * the sign-in page) up to the upstream's answer: picks the upstream button
 * `upstreamKey` (or the first), logs in upstream as login, and returns the
 * URL of our callback the upstream sends the browser to (not requested).
 */
export async function reachCallback(
  browser: FetchBrowser,
  auth: string,
  start: string,
  login: string,
  opts: { upstreamKey?: string; onUpstream?: (authorizationUrl: URL) => void } = {},
): Promise<string> {
  const page = await browser.follow(start, (u) => !u.startsWith(auth));
  if (!page.seen || page.seen.status !== 200)
    throw new Error(`no sign-in page at ${page.url}: ${page.seen?.status} ${page.seen?.text.slice(0, 300)}`);
  const form = formOf(page.seen.text);
  const button = opts.upstreamKey ? { upstream: opts.upstreamKey } : form.buttons[0]!;
  const started = await browser.post(new URL(form.action, page.url).href, { ...form.fields, ...button });
  if (started.status !== 303) throw new Error(`sign-in start answered ${started.status}: ${started.text.slice(0, 300)}`);
  opts.onUpstream?.(new URL(started.location));
  return browser.upstreamLogin(started.location, login, (u) => u.startsWith(`${auth}/sign-in/callback`));
}

/**
 * reachCallback, then the callback itself (at callbackAt instead of the auth
 * URL when given: another process behind it): where it sends the browser
 * next (not requested), the client's redirect or a device confirmation.
 */
export async function signInWithFetch(
  browser: FetchBrowser,
  auth: string,
  start: string,
  login: string,
  opts: { upstreamKey?: string; callbackAt?: string; onUpstream?: (authorizationUrl: URL) => void } = {},
): Promise<string> {
  const callback = await reachCallback(browser, auth, start, login, opts);
  const answered = await browser.get(opts.callbackAt ? callback.replace(auth, opts.callbackAt) : callback);
  if (answered.status !== 303) throw new Error(`the callback answered ${answered.status}: ${answered.text.slice(0, 400)}`);
  return answered.location;
}

/** Who token says its caller is over REST, native gRPC, Connect and gRPC-Web (AuthService.Validate on each). */
export async function subjectsOn(server: TestServer, token: string): Promise<Record<string, string>> {
  const res = await fetch(`${server.url}/auth/v1/ok`, { headers: { authorization: `Bearer ${token}` } });
  const body = (await res.json()) as { subject?: string };
  const grpc = grpcClient(AuthService, server.port, { token });
  const connect = testTransport("connect-h1", server.url, token);
  const grpcWeb = testTransport("grpc-web-h1", server.url, token);
  try {
    return {
      rest: String(body.subject),
      grpc: String(((await grpc.call("validate", {})) as { subject: string }).subject),
      connect: (await createClient(AuthService, connect.transport).validate({})).subject,
      grpcWeb: (await createClient(AuthService, grpcWeb.transport).validate({})).subject,
    };
  } finally {
    grpc.close();
    connect.close();
    grpcWeb.close();
  }
}

/** POSTs a form to the token endpoint; the status and JSON. */
export async function tokenRequest(auth: string, form: Record<string, string>, path = "/oauth/token") {
  const res = await fetch(`${auth}${path}`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(form).toString(),
  });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return { status: res.status, body: (await res.json()) as any, headers: res.headers };
}

/** A loopback listener like the command line's (startLoopbackListener). */
export type LoopbackListener = Awaited<ReturnType<typeof startLoopbackListener>>;

/**
 * platform-cli's authorization code + PKCE flow with a loopback redirect on host: visit is the browser (fetch, or
 * Chromium) taking the authorize URL (state, extra parameters) through the sign-in to the listener, and it
 * returns the callback URL it arrived at; the code there is exchanged at tokenAt (the auth URL by default).
 */
export async function loopbackCodeFlow(
  auth: string,
  visit: (authorize: string, listener: LoopbackListener) => Promise<URL>,
  opts: { host?: "127.0.0.1" | "::1"; state?: string; extra?: Record<string, string>; tokenAt?: string } = {},
): Promise<{ callback: URL; redirectUri: string; tokens: Awaited<ReturnType<typeof tokenRequest>> }> {
  const { verifier, challenge } = pkcePair();
  const listener = await startLoopbackListener(opts.host);
  try {
    const callback = await visit(authorizeUrl(auth, listener.redirectUri, challenge, opts.state ?? "s", opts.extra), listener);
    const code = callback.searchParams.get("code");
    assert.ok(code, `a code came back: ${callback.href}`);
    const tokens = await tokenRequest(opts.tokenAt ?? auth, {
      grant_type: "authorization_code",
      client_id: "platform-cli",
      code,
      redirect_uri: listener.redirectUri,
      code_verifier: verifier,
    });
    return { callback, redirectUri: listener.redirectUri, tokens };
  } finally {
    await listener.close();
  }
}

/** Types user code on /device (at `at`, default the auth URL) with fetch: where the page sends the browser (the sign-in page). */
export async function enterUserCode(browser: FetchBrowser, at: string, userCode: string): Promise<Seen> {
  const page = await browser.get(`${at}/device`);
  const form = formOf(page.text);
  return browser.post(`${at}/device`, { ...form.fields, user_code: userCode });
}

/** On the confirmation page at url: presses Allow or Deny; the answer. */
export async function confirmDevice(browser: FetchBrowser, url: string, decision: "allow" | "deny"): Promise<Seen> {
  const page = await browser.get(url);
  const form = formOf(page.text);
  return browser.post(new URL(form.action, url).href, { ...form.fields, decision });
}

export const DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";
