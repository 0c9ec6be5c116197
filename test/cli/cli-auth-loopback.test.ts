/**
 * The browser sign-in's loopback listener (src/cli/auth/loopback.ts), called as the browser calls it: it
 * listens on 127.0.0.1 at /callback on a port of its own; it takes the code only from a response with this
 * sign-in's state and the server's issuer (RFC 9207), refusing a mismatched state or issuer, a missing iss
 * the server promised, and a refusal (access_denied); each outcome is a page the browser shows and the
 * command's result. It answers one callback only, and gives up when the browser never comes back.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { AuthCommandError } from "../../src/cli/auth/error.js";
import { listenForCallback, type CallbackExpectation } from "../../src/cli/auth/loopback.js";
import { rejectionOf } from "../support/assertions.js";

const ISSUER = "http://127.0.0.1:8080";
const expectation = (overrides: Partial<CallbackExpectation> = {}): CallbackExpectation => ({
  state: "st4te-of-this-sign-in",
  issuer: ISSUER,
  issRequired: true,
  timeoutMs: 60_000,
  ...overrides,
});

/** A browser arriving at redirectUri with params: the page's status, text and headers. */
async function arrive(redirectUri: string, params: Record<string, string>) {
  const res = await fetch(`${redirectUri}?${new URLSearchParams(params)}`);
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/** The promise's rejection message (it must reject with AuthCommandError). */
const refusal = (code: Promise<string>) => rejectionOf(code, AuthCommandError);

test("a response with this sign-in's state and the issuer gives the code, and the browser a page saying so", async () => {
  const listener = await listenForCallback(expectation());
  assert.match(listener.redirectUri, /^http:\/\/127\.0\.0\.1:\d+\/callback$/);
  const page = await arrive(listener.redirectUri, { code: "the-code", state: "st4te-of-this-sign-in", iss: ISSUER });
  assert.equal(page.status, 200);
  assert.match(page.text, /You are signed in\. You can close this tab and return to the terminal\./);
  assert.equal(page.headers.get("content-security-policy"), "default-src 'none'; frame-ancestors 'none'");
  assert.equal(page.headers.get("cache-control"), "no-store");
  assert.equal(page.headers.get("referrer-policy"), "no-referrer");
  assert.equal(await listener.code, "the-code");
});

test("without iss, when the server does not promise it, the code is taken", async () => {
  const listener = await listenForCallback(expectation({ issRequired: false }));
  const page = await arrive(listener.redirectUri, { code: "the-code", state: "st4te-of-this-sign-in" });
  assert.equal(page.status, 200);
  assert.equal(await listener.code, "the-code");
});

const refusals: [string, Partial<CallbackExpectation>, Record<string, string>, RegExp][] = [
  [
    "another state (an old tab, or a forged answer)",
    {},
    { code: "c", state: "another-state", iss: ISSUER },
    /the browser's answer is not for this sign-in \(its state differs/,
  ],
  ["no state", {}, { code: "c", iss: ISSUER }, /its state differs/],
  [
    "another issuer (a mix-up)",
    {},
    { code: "c", state: "st4te-of-this-sign-in", iss: "https://evil.example" },
    /the browser's answer names issuer https:\/\/evil\.example, not http:\/\/127\.0\.0\.1:8080; not signing in/,
  ],
  [
    "no iss, though the server promised one",
    {},
    { code: "c", state: "st4te-of-this-sign-in" },
    /names no issuer, not http:\/\/127\.0\.0\.1:8080/,
  ],
  [
    "iss checked before the error it carries",
    { issRequired: false },
    { error: "access_denied", state: "st4te-of-this-sign-in", iss: "https://evil.example" },
    /names issuer https:\/\/evil\.example/,
  ],
  [
    "error=access_denied",
    {},
    { error: "access_denied", error_description: "the person said no", state: "st4te-of-this-sign-in", iss: ISSUER },
    /^sign-in was refused or cancelled \(access_denied: the person said no\)$/,
  ],
  ["another error", {}, { error: "server_error", state: "st4te-of-this-sign-in", iss: ISSUER }, /^sign-in failed \(server_error\)$/],
  ["no code", {}, { state: "st4te-of-this-sign-in", iss: ISSUER }, /carries no authorization code/],
];

for (const [name, overrides, params, message] of refusals) {
  test(`refused: ${name}; the page says so`, async () => {
    const listener = await listenForCallback(expectation(overrides));
    const page = await arrive(listener.redirectUri, params);
    assert.equal(page.status, 400);
    assert.match(page.text, /<h1>Sign-in failed<\/h1>/);
    assert.match(await refusal(listener.code), message);
  });
}

test("an error description cannot write control characters to the terminal or markup to the page", async () => {
  const listener = await listenForCallback(expectation());
  const page = await arrive(listener.redirectUri, {
    error: "access_denied",
    error_description: "\u001b[2J\u001b]0;owned\u0007<script>x</script>\nnext line",
    state: "st4te-of-this-sign-in",
    iss: ISSUER,
  });
  const message = await refusal(listener.code);
  // eslint-disable-next-line no-control-regex
  assert.doesNotMatch(message, /[\u0000-\u001f\u007f]/);
  assert.match(message, /\[2J \]0;owned <script>x<\/script> next line/);
  assert.doesNotMatch(page.text, /<script>/);
  assert.match(page.text, /&#60;script&#62;x&#60;\/script&#62;/);
});

test("one callback only: a second one is not taken, and the first one's outcome stands", async () => {
  const listener = await listenForCallback(expectation());
  const first = await arrive(listener.redirectUri, { code: "first", state: "st4te-of-this-sign-in", iss: ISSUER });
  assert.equal(first.status, 200);
  assert.equal(await listener.code, "first");
  // The listener has stopped: the connection is refused (or, had it been open, the answer is "already finished").
  const second = await arrive(listener.redirectUri, { code: "second", state: "st4te-of-this-sign-in", iss: ISSUER }).then(
    (page) => page.status,
    () => "refused",
  );
  assert.ok(second === "refused" || second === 400, String(second));
  assert.equal(await listener.code, "first");
});

test("two callbacks at once: one is taken, the other told the sign-in has finished", async () => {
  const listener = await listenForCallback(expectation());
  const pages = await Promise.all(
    ["one", "two"].map((code) =>
      arrive(listener.redirectUri, { code, state: "st4te-of-this-sign-in", iss: ISSUER }).then(
        (page) => page,
        () => null,
      ),
    ),
  );
  const code = await listener.code;
  const taken = pages.filter((p) => p?.status === 200);
  assert.equal(taken.length, 1, JSON.stringify(pages.map((p) => p?.status)));
  const other = pages.find((p) => p?.status !== 200);
  if (other) assert.match(other.text, /This sign-in has had its answer/);
  assert.ok(code === "one" || code === "two");
});

test("other paths are not the callback, and do not end the sign-in", async () => {
  const listener = await listenForCallback(expectation());
  const other = await fetch(listener.redirectUri.replace("/callback", "/favicon.ico"));
  assert.equal(other.status, 404);
  await other.body?.cancel();
  const page = await arrive(listener.redirectUri, { code: "the-code", state: "st4te-of-this-sign-in", iss: ISSUER });
  assert.equal(page.status, 200);
  assert.equal(await listener.code, "the-code");
});

test("a browser that never comes back: the sign-in gives up, and the port is closed", async () => {
  const listener = await listenForCallback(expectation({ timeoutMs: 1 }));
  assert.match(await refusal(listener.code), /^no answer from the browser within 0 s; run login again \(or use --headless\)$/);
  await assert.rejects(fetch(listener.redirectUri), TypeError);
});
