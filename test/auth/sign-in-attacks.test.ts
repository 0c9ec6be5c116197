/**
 * Issue 32, item 6: the sign-in attacked, one test per attack (the rows of
 * docs/threat-model.md): state missing, replayed or swapped; login CSRF; a
 * forged nonce or audience; mix-up; PKCE downgrade; code replay; redirect
 * URIs that are not ours; device-code guessing and polling floods; pending
 * flows per address; cookies; tokens never in URLs or logs; never a 500.
 */
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { after, before, describe, test } from "node:test";
import type { Store } from "../../src/store/store.js";
import { startTestServer, type TestServer } from "../support/server.js";
import {
  authorizeUrl,
  DEVICE_GRANT,
  enterUserCode,
  pkcePair,
  reachCallback,
  startLoopbackListener,
  startSignInWorld,
  tokenRequest,
  type SignInWorld,
} from "../support/sign-in-fixture.js";
import { FetchBrowser } from "../support/upstream-oidc.js";

let world: SignInWorld;
let ahead = 0;
const logs: string[] = [];
let listener: Awaited<ReturnType<typeof startLoopbackListener>>;
/** Runs (once) as the server is about to start a refresh family: a test's way into the moment between a code's
 * first use being marked and its family existing, without depending on timing. */
let beforeFamilyStart: (() => Promise<void>) | undefined;

/** The store with refreshTokens.start running beforeFamilyStart first. */
function holdingFamilyStart(store: Store): Store {
  const refreshTokens = new Proxy(store.refreshTokens, {
    get(target, key) {
      if (key === "start") {
        return async (...args: Parameters<Store["refreshTokens"]["start"]>) => {
          const hook = beforeFamilyStart;
          beforeFamilyStart = undefined;
          await hook?.();
          return target.start(...args);
        };
      }
      const value: unknown = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return new Proxy(store, {
    get: (target, key) => {
      if (key === "refreshTokens") return refreshTokens;
      const value: unknown = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

before(async () => {
  const logStream = new PassThrough();
  logStream.on("data", (chunk: Buffer) => logs.push(chunk.toString()));
  world = await startSignInWorld({
    now: () => Date.now() + ahead,
    logStream,
    env: { LOG_LEVEL: "debug", PLATFORM_SIGN_IN_PENDING_PER_ADDRESS: "1000" },
    decorateStore: holdingFamilyStart,
  });
  listener = await startLoopbackListener();
});
after(async () => {
  await listener?.close();
  await world?.close();
});

/** A browser at our callback for login, not yet requested: the browser, the callback URL and the PKCE verifier. */
async function atCallback(login: string, opts: { upstreamKey?: string } = {}) {
  const browser = new FetchBrowser();
  const { verifier, challenge } = pkcePair();
  const callback = await reachCallback(browser, world.auth, authorizeUrl(world.auth, listener.redirectUri, challenge, "st"), login, opts);
  return { browser, callback, verifier };
}

/** Asserts an HTML error page with status, no redirect. */
function assertErrorPage(seen: { status: number; location: string; text: string; headers: Headers }, status: number, text?: RegExp) {
  assert.equal(seen.status, status, seen.text.slice(0, 300));
  assert.equal(seen.location, "", "never a redirect");
  assert.match(seen.headers.get("content-type") ?? "", /^text\/html/);
  assert.match(seen.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
  if (text) assert.match(seen.text, text);
}

/** Redeems code as platform-cli. */
const redeem = (code: string, verifier: string, redirectUri = listener.redirectUri) =>
  tokenRequest(world.auth, {
    grant_type: "authorization_code",
    client_id: "platform-cli",
    code,
    redirect_uri: redirectUri,
    code_verifier: verifier,
  });

describe("state and the browser binding", () => {
  test("a callback without state, or with a state never issued, is refused with a page", async () => {
    const browser = new FetchBrowser();
    assertErrorPage(await browser.get(`${world.auth}/sign-in/callback?code=x`), 400, /no valid state/);
    assertErrorPage(await browser.get(`${world.auth}/sign-in/callback?code=x&state=made-up`), 400, /unknown, finished or expired/);
  });

  test("a callback replayed after it succeeded is refused", async () => {
    const { browser, callback } = await atCallback("replayer@example.com");
    assert.equal((await browser.get(callback)).status, 303);
    assertErrorPage(await browser.get(callback), 400, /unknown, finished or expired/);
  });

  test("login CSRF: an attacker's callback (their state) opened in the victim's browser is refused", async () => {
    const attacker = await atCallback("attacker@example.com");
    const victim = new FetchBrowser();
    assertErrorPage(await victim.get(attacker.callback), 403, /another browser/);
    // Nor does it work once the victim holds a binding cookie of their own.
    await victim.get(`${world.auth}/device`);
    assertErrorPage(await victim.get(attacker.callback), 403, /another browser/);
  });

  test("states swapped between two sign-ins of one browser: each state finishes its own flow only", async () => {
    const browser = new FetchBrowser();
    const one = pkcePair();
    const a = await reachCallback(
      browser,
      world.auth,
      authorizeUrl(world.auth, listener.redirectUri, one.challenge, "A"),
      "swap@example.com",
    );
    const b = await reachCallback(
      browser,
      world.auth,
      authorizeUrl(world.auth, listener.redirectUri, pkcePair().challenge, "B"),
      "swap@example.com",
    );
    const aState = new URL(a).searchParams.get("state")!;
    // B's code under A's state: the upstream refuses a code issued for another exchange, or the flows do not match.
    const swapped = new URL(b);
    swapped.searchParams.set("state", aState);
    assertErrorPage(await browser.get(swapped.href), 400);
  });
});

describe("forged answers from the upstream", () => {
  for (const [what, change, pattern] of [
    ["an ID token with another nonce", (c: Record<string, unknown>) => ({ ...c, nonce: "not-ours" }), /token answer does not check out/],
    [
      "an ID token for another audience",
      (c: Record<string, unknown>) => ({ ...c, aud: "someone-else" }),
      /token answer does not check out/,
    ],
    ["an ID token of another issuer", (c: Record<string, unknown>) => ({ ...c, iss: "https://evil.example" }), /does not check out/],
  ] as const) {
    test(`${what} is refused with a page, no redirect to the client`, async () => {
      const { browser, callback } = await atCallback(`forged.${what.length}@example.com`);
      world.upstream.tamper = change;
      try {
        assertErrorPage(await browser.get(callback), 400, pattern);
      } finally {
        world.upstream.tamper = null;
      }
    });
  }

  test("mix-up: a callback naming another provider's issuer (RFC 9207 iss) is refused", async () => {
    const { browser, callback } = await atCallback("mixup@example.com");
    const mixed = new URL(callback);
    mixed.searchParams.set("iss", world.other.issuer);
    assertErrorPage(await browser.get(mixed.href), 400, /state or issuer/);
  });
});

describe("our authorization endpoint", () => {
  const good = () => authorizeUrl(world.auth, listener.redirectUri, pkcePair().challenge, "s");

  for (const [what, redirectUri] of [
    ["another host", "https://evil.example/callback"],
    ["localhost by name", "http://localhost:5000/callback"],
    ["https to loopback", "https://127.0.0.1:5000/callback"],
    ["another path", "http://127.0.0.1:5000/other"],
    ["a longer path", "http://127.0.0.1:5000/callback/x"],
    ["a query", "http://127.0.0.1:5000/callback?next=https://evil.example"],
    ["userinfo", "http://127.0.0.1:80@evil.example/callback"],
    ["no port", "http://127.0.0.1/callback"],
    ["an encoded dot path", "http://127.0.0.1:5000/%2e/callback"],
    ["127.1 shorthand", "http://127.1:5000/callback"],
  ] as const) {
    test(`a redirect URI with ${what} gets an error page, never a redirect`, async () => {
      const url = new URL(good());
      url.searchParams.set("redirect_uri", redirectUri);
      assertErrorPage(await new FetchBrowser().get(url.href), 400, /not its own/);
    });
  }

  test("an unknown client gets an error page", async () => {
    const url = new URL(good());
    url.searchParams.set("client_id", "evil-cli");
    assertErrorPage(await new FetchBrowser().get(url.href), 400, /unknown here/);
  });

  for (const [what, change] of [
    ["no code_challenge", (q: URLSearchParams) => q.delete("code_challenge")],
    ["the plain method", (q: URLSearchParams) => q.set("code_challenge_method", "plain")],
    ["no method", (q: URLSearchParams) => q.delete("code_challenge_method")],
  ] as const) {
    test(`PKCE downgrade (${what}): invalid_request back to the client, no sign-in begins`, async () => {
      const url = new URL(good());
      change(url.searchParams);
      const seen = await new FetchBrowser().get(url.href);
      assert.equal(seen.status, 303);
      const back = new URL(seen.location);
      assert.equal(`${back.origin}${back.pathname}`, listener.redirectUri);
      assert.equal(back.searchParams.get("error"), "invalid_request");
      assert.equal(back.searchParams.get("iss"), world.auth);
    });
  }
});

describe("our token endpoint", () => {
  test("a wrong code_verifier is refused; the right one then works", async () => {
    const { browser, callback, verifier } = await atCallback("verifier@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    const wrong = await redeem(code, pkcePair().verifier);
    assert.equal(wrong.body.error, "invalid_grant");
    assert.equal((await redeem(code, verifier)).status, 200);
  });

  test("a code for another redirect URI is refused", async () => {
    const { browser, callback, verifier } = await atCallback("redirect@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    assert.equal((await redeem(code, verifier, "http://127.0.0.1:1/callback")).body.error, "invalid_grant");
  });

  test("a code used twice: the second use fails and revokes the refresh token the first bought", async () => {
    const { browser, callback, verifier } = await atCallback("replay@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    const first = await redeem(code, verifier);
    assert.equal(first.status, 200);
    const second = await redeem(code, verifier);
    assert.equal(second.status, 400);
    assert.equal(second.body.error, "invalid_grant");
    const refreshed = await tokenRequest(world.auth, {
      grant_type: "refresh_token",
      client_id: "platform-cli",
      refresh_token: first.body.refresh_token,
    });
    assert.equal(refreshed.body.error, "invalid_grant", "the first use's family is gone");
  });

  test("a replay that lands while the first use is still issuing: neither gets a refresh token that works", async () => {
    const { browser, callback, verifier } = await atCallback("race@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    let replay: Awaited<ReturnType<typeof redeem>> | undefined;
    beforeFamilyStart = async () => {
      replay = await redeem(code, verifier);
    };
    const first = await redeem(code, verifier);
    assert.equal(replay?.status, 400);
    assert.equal(replay?.body.error, "invalid_grant");
    assert.equal(first.status, 400, JSON.stringify(first.body));
    assert.equal(first.body.error, "invalid_grant");
    assert.equal(first.body.refresh_token, undefined);
  });

  test("a code past its minute is refused", async () => {
    const { browser, callback, verifier } = await atCallback("slow@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    ahead += 61_000;
    assert.equal((await redeem(code, verifier)).body.error, "invalid_grant");
  });

  test("refresh tokens rotate at /oauth/token, and a revoked one (logout) is refused", async () => {
    const { browser, callback, verifier } = await atCallback("rotate@example.com");
    const code = new URL((await browser.get(callback)).location).searchParams.get("code")!;
    const first = await redeem(code, verifier);
    const refresh = (token: string) =>
      tokenRequest(world.auth, { grant_type: "refresh_token", client_id: "platform-cli", refresh_token: token });
    const rotated = await refresh(first.body.refresh_token);
    assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
    assert.notEqual(rotated.body.refresh_token, first.body.refresh_token);
    const revoked = await tokenRequest(world.auth, { token: rotated.body.refresh_token, client_id: "platform-cli" }, "/oauth/revoke");
    assert.equal(revoked.status, 200);
    assert.equal((await refresh(rotated.body.refresh_token)).body.error, "invalid_grant");
    assert.equal((await tokenRequest(world.auth, { token: "never-issued" }, "/oauth/revoke")).status, 200);
  });

  test("bad requests get RFC 6749 errors, never a 500", async () => {
    const bad: [Record<string, string>, number, string][] = [
      [{ grant_type: "authorization_code" }, 401, "invalid_client"],
      [{ client_id: "platform-cli" }, 400, "invalid_request"],
      [{ client_id: "platform-cli", grant_type: "password" }, 400, "unsupported_grant_type"],
      [{ client_id: "platform-cli", grant_type: "authorization_code", code: "x".repeat(5000) }, 400, "invalid_grant"],
      [{ client_id: "platform-cli", grant_type: DEVICE_GRANT }, 400, "invalid_grant"],
      [{ client_id: "platform-cli", grant_type: "refresh_token", refresh_token: "nope" }, 400, "invalid_grant"],
    ];
    for (const [form, status, error] of bad) {
      const res = await tokenRequest(world.auth, form);
      assert.equal(res.status, status, JSON.stringify(form));
      assert.equal(res.body.error, error, JSON.stringify(form));
    }
    const json = await fetch(`${world.auth}/oauth/token`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    assert.equal(json.status, 415);
    assert.equal(((await json.json()) as { error: string }).error, "invalid_request");
    const huge = await fetch(`${world.auth}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `code=${"x".repeat(20_000)}`,
    });
    assert.equal(huge.status, 413);
    const twice = await fetch(`${world.auth}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "client_id=platform-cli&client_id=platform-cli&grant_type=refresh_token",
    });
    assert.equal(((await twice.json()) as { error: string }).error, "invalid_request");
    for (const [path, form] of [
      ["/sign-in/start", { upstream: "op:test" }],
      ["/device", { user_code: "BCDF-GHJK" }],
      ["/device/confirm", { flow: "x", decision: "allow" }],
    ] as const) {
      const res = await new FetchBrowser().post(`${world.auth}${path}`, form);
      assert.equal(res.status, 403, `${path} without this browser's form token`);
    }
    assertErrorPage(await new FetchBrowser().get(`${world.auth}/sign-in?flow=${"x".repeat(100)}`), 400);
    assertErrorPage(await new FetchBrowser().get(`${world.auth}/sign-in?idp=not-a-uid`), 400);
  });
});

describe("the device flow under attack", () => {
  test("user-code guessing: wrong codes from one address are refused after ten, and a right code still gets through", async () => {
    const { user_code } = (await tokenRequest(world.auth, { client_id: "platform-cli" }, "/oauth/device_authorization")).body;
    const browser = new FetchBrowser();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await enterUserCode(browser, world.auth, "BBBB-BBBB")).status);
    assert.deepEqual(statuses, [...Array<number>(10).fill(400), 429, 429]);
    assert.equal((await enterUserCode(browser, world.auth, user_code)).status, 303);
  });

  test("a polling flood gets slow_down, each adding five seconds to the interval", async () => {
    const { device_code } = (await tokenRequest(world.auth, { client_id: "platform-cli" }, "/oauth/device_authorization")).body;
    const poll = () => tokenRequest(world.auth, { grant_type: DEVICE_GRANT, client_id: "platform-cli", device_code });
    assert.equal((await poll()).body.error, "authorization_pending");
    const floods = [await poll(), await poll()];
    assert.deepEqual(
      floods.map((f) => f.body.error),
      ["slow_down", "slow_down"],
    );
    assert.match(floods[1]!.body.error_description, /every 15 seconds/);
  });
});

describe("what the server writes", () => {
  test("no code, state, token or refresh token of a sign-in appears in the server's log", async () => {
    const before = logs.length;
    const { browser, callback, verifier } = await atCallback("logged@example.com");
    const back = new URL((await browser.get(callback)).location);
    const tokens = await redeem(back.searchParams.get("code")!, verifier);
    assert.equal(tokens.status, 200);
    const upstream = new URL(callback).searchParams;
    const written = logs.slice(before).join("");
    assert.ok(written.includes("/sign-in/callback"), "the requests were logged");
    for (const secret of [
      upstream.get("code")!,
      upstream.get("state")!,
      back.searchParams.get("code")!,
      tokens.body.access_token,
      tokens.body.refresh_token,
      verifier,
    ]) {
      assert.ok(!written.includes(secret), `a secret appears in the log: ${secret.slice(0, 8)}…`);
    }
  });

  test("the browser-binding cookie is HttpOnly and SameSite=Lax, and not Secure on a plain http auth URL", async () => {
    const seen = await new FetchBrowser().get(`${world.auth}/device`);
    const cookie = seen.headers.getSetCookie()[0] ?? "";
    assert.match(cookie, /^platform-sign-in=[A-Za-z0-9_-]{43}; /);
    assert.match(cookie, /; HttpOnly/);
    assert.match(cookie, /; SameSite=Lax/);
    assert.doesNotMatch(cookie, /Secure/);
  });
});

describe("an https auth URL, and the per-address bound", () => {
  let srv: TestServer;
  /** The server's clock runs this far ahead: the idle test moves it instead of waiting. */
  let later = 0;
  before(async () => {
    srv = await startTestServer({
      env: { PLATFORM_AUTH_URL: "https://auth.example", PLATFORM_SIGN_IN_PENDING_PER_ADDRESS: "2" },
      now: () => Date.now() + later,
    });
  });
  after(async () => srv?.close());

  test("under TLS the cookie is __Host-, Secure, HttpOnly and SameSite=Lax", async () => {
    const cookie = (await new FetchBrowser().get(`${srv.url}/device`)).headers.getSetCookie()[0] ?? "";
    assert.match(cookie, /^__Host-platform-sign-in=[A-Za-z0-9_-]{43}; Path=\/; /);
    for (const attribute of ["; HttpOnly", "; SameSite=Lax", "; Secure"]) assert.ok(cookie.includes(attribute), cookie);
  });

  test("pending sign-ins from one address are bounded: the third device flow is refused until one ends", async () => {
    const start = () => tokenRequest(srv.url, { client_id: "platform-cli" }, "/oauth/device_authorization");
    const statuses = [(await start()).status, (await start()).status];
    const third = await start();
    assert.deepEqual([...statuses, third.status], [200, 200, 429]);
    assert.equal(third.body.error, "slow_down");
    const metadata = (await (await fetch(`${srv.url}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    assert.equal(metadata.issuer, "https://auth.example");
    assert.deepEqual(metadata.code_challenge_methods_supported, ["S256"]);
    assert.equal(metadata.authorization_response_iss_parameter_supported, true);
  });

  test("after ten idle minutes the address's pending sign-ins have expired: new ones start, up to the bound again", async () => {
    later += 10 * 60_000 + 1_000;
    const start = () => tokenRequest(srv.url, { client_id: "platform-cli" }, "/oauth/device_authorization");
    const statuses = [(await start()).status, (await start()).status, (await start()).status];
    assert.deepEqual(statuses, [200, 200, 429]);
  });
});
