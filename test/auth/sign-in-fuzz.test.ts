/**
 * Bad input on the sign-in routes (issue 32), as test/security/fuzz.test.ts does for the API: random query strings, forms,
 * cookies and content types, built from each route's own parameter names with hostile values, sent anonymously to
 * every page and OAuth endpoint. Never a 500; the OAuth endpoints a client calls answer RFC 6749's error JSON, the pages HTML
 * (never a stack trace), and nothing ever redirects anywhere but to the upstream provider or a loopback client.
 * FUZZ_RUNS scales the runs per route; FUZZ_SEED changes the deterministic seed.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import fc from "fast-check";
import { startSignInWorld, type SignInWorld } from "../support/sign-in-fixture.js";

const RUNS = Number(process.env.FUZZ_RUNS ?? 40);
const SEED = Number(process.env.FUZZ_SEED ?? 32);

let world: SignInWorld;
before(async () => {
  world = await startSignInWorld({ env: { PLATFORM_SIGN_IN_PENDING_PER_ADDRESS: "10000" } });
});
after(async () => {
  await world?.close();
});

/** Every parameter name the sign-in routes read, and a few they do not. */
const NAMES = [
  "response_type",
  "client_id",
  "redirect_uri",
  "code_challenge",
  "code_challenge_method",
  "state",
  "idp",
  "org",
  "provider",
  "flow",
  "csrf",
  "code",
  "iss",
  "error",
  "error_description",
  "grant_type",
  "code_verifier",
  "refresh_token",
  "device_code",
  "user_code",
  "token",
  "token_type_hint",
  "decision",
  "scope",
  "__proto__",
  "constructor",
];

/** Values a hostile client sends: empty, huge, control characters, URLs of every kind, near-valid codes. */
const value = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.constantFrom(
    "",
    "platform-cli",
    "authorization_code",
    "refresh_token",
    "urn:ietf:params:oauth:grant-type:device_code",
    "S256",
    "plain",
    "code",
    "http://127.0.0.1:1/callback",
    "http://[::1]:65535/callback",
    "http://127.0.0.1:80/callback?x=1",
    "https://evil.example/callback",
    "javascript:alert(1)",
    "//evil.example",
    "http://user@127.0.0.1:1/callback",
    "BCDF-GHJK",
    "prt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "%00",
    "\u0000\r\n",
    "x".repeat(5000),
    "op:test",
    "idp:nope",
  ),
);
const params = fc.array(fc.tuple(fc.constantFrom(...NAMES), value), { maxLength: 8 });
const contentType = fc.constantFrom(
  "application/x-www-form-urlencoded",
  "application/x-www-form-urlencoded; charset=utf-8",
  "application/json",
  "text/plain",
  "multipart/form-data; boundary=x",
  "",
);
const cookie = fc.option(
  fc.constantFrom(
    "platform-sign-in=abc",
    "platform-sign-in=",
    "platform-sign-in=" + "A".repeat(4000),
    "a=b; platform-sign-in=x; platform-sign-in=y",
  ),
);

/** The routes: method and path. */
const ROUTES: [string, string][] = [
  ["GET", "/sign-in"],
  ["POST", "/sign-in/start"],
  ["GET", "/sign-in/callback"],
  ["GET", "/device"],
  ["POST", "/device"],
  ["GET", "/device/confirm"],
  ["POST", "/device/confirm"],
  ["GET", "/oauth/authorize"],
  ["POST", "/oauth/token"],
  ["POST", "/oauth/device_authorization"],
  ["POST", "/oauth/revoke"],
];

for (const [method, path] of ROUTES) {
  test(`${method} ${path}: random parameters never get a 500, and errors keep their shape`, async () => {
    await fc.assert(
      fc.asyncProperty(params, contentType, cookie, async (pairs, type, cookieHeader) => {
        const query = new URLSearchParams(pairs).toString();
        const headers: Record<string, string> = {};
        if (cookieHeader) headers.cookie = cookieHeader;
        let url = `${world.auth}${path}`;
        let body: string | undefined;
        if (method === "GET") url += `?${query}`;
        else {
          body = type === "application/json" ? JSON.stringify(Object.fromEntries(pairs)) : query;
          if (type !== "") headers["content-type"] = type;
        }
        const res = await fetch(url, { method, headers, body, redirect: "manual" });
        const text = await res.text();
        assert.ok(res.status < 500, `${method} ${path}?${query.slice(0, 200)}: ${res.status} ${text.slice(0, 300)}`);
        assert.doesNotMatch(text, /\n\s+at .+:\d+:\d+/, "no stack trace");
        const location = res.headers.get("location");
        if (location !== null) {
          const target = new URL(location, world.auth);
          const allowed = [world.auth, world.upstream.issuer, world.other.issuer].map((u) => new URL(u).origin);
          const loopback = target.protocol === "http:" && (target.hostname === "127.0.0.1" || target.hostname === "[::1]");
          assert.ok(allowed.includes(target.origin) || loopback, `${method} ${path} redirected to ${location}`);
        }
        // /oauth/authorize is a browser's page: its refusals are HTML pages (never a redirect to an unchecked URI).
        if (path.startsWith("/oauth/") && path !== "/oauth/authorize" && res.status >= 400) {
          const json = JSON.parse(text) as { error?: unknown };
          assert.equal(typeof json.error, "string", `${path}: RFC 6749 error JSON, got ${text.slice(0, 200)}`);
        }
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
  });
}
