/**
 * Issue 32: people sign in through a real upstream OpenID provider
 * (oidc-provider, test/support/upstream-oidc.ts), driven with fetch and a
 * cookie jar: the authorization code + PKCE flow of platform-cli with a
 * loopback redirect, the device flow end to end, organizations' own
 * providers with and without PKCE, registration and invites, and two
 * processes sharing one store finishing each other's flows. The browser
 * itself: sign-in-browser.test.ts; the attacks: sign-in-attacks.test.ts.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { builtinRole } from "../support/principals.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";
import { createGroup, rest } from "../support/server.js";
import {
  authorizeUrl,
  confirmDevice,
  DEVICE_GRANT,
  enterUserCode,
  pkcePair,
  providersFile,
  signInWithFetch,
  startLoopbackListener,
  startSignInWorld,
  subjectsOn,
  tokenRequest,
  type SignInWorld,
} from "../support/sign-in-fixture.js";
import { FetchBrowser, ORG_PKCE_CLIENT, ORG_SECRET_CLIENT } from "../support/upstream-oidc.js";

/** Signs login in as platform-cli (fetch, loopback listener) at world's server, extra parameters added; the token answer. */
async function cliSignIn(
  world: SignInWorld,
  login: string,
  opts: { extra?: Record<string, string>; upstreamKey?: string; onUpstream?: (u: URL) => void; callbackAt?: string; tokenAt?: string } = {},
) {
  const { verifier, challenge } = pkcePair();
  const listener = await startLoopbackListener();
  try {
    const back = new URL(
      await signInWithFetch(
        new FetchBrowser(),
        world.auth,
        authorizeUrl(world.auth, listener.redirectUri, challenge, "s", opts.extra),
        login,
        opts,
      ),
    );
    const code = back.searchParams.get("code");
    assert.ok(code, `a code came back: ${back.href}`);
    return await tokenRequest(opts.tokenAt ?? world.auth, {
      grant_type: "authorization_code",
      client_id: "platform-cli",
      code,
      redirect_uri: listener.redirectUri,
      code_verifier: verifier,
    });
  } finally {
    await listener.close();
  }
}

describe("signing in with platform-cli's authorization code + PKCE", () => {
  let world: SignInWorld;
  before(async () => {
    world = await startSignInWorld();
  });
  after(async () => world?.close());

  test("a person signs in, the loopback redirect carries only code, state and iss, and the code buys working tokens", async () => {
    const { verifier, challenge } = pkcePair();
    const listener = await startLoopbackListener();
    try {
      const browser = new FetchBrowser();
      const back = await signInWithFetch(
        browser,
        world.auth,
        authorizeUrl(world.auth, listener.redirectUri, challenge, "client-state-1"),
        "alice@example.com",
      );
      const redirect = new URL(back);
      assert.equal(`${redirect.origin}${redirect.pathname}`, listener.redirectUri);
      assert.deepEqual([...redirect.searchParams.keys()].sort(), ["code", "iss", "state"]);
      assert.equal(redirect.searchParams.get("state"), "client-state-1");
      assert.equal(redirect.searchParams.get("iss"), world.auth);
      const tokens = await tokenRequest(world.auth, {
        grant_type: "authorization_code",
        client_id: "platform-cli",
        code: redirect.searchParams.get("code")!,
        redirect_uri: listener.redirectUri,
        code_verifier: verifier,
      });
      assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      assert.equal(tokens.body.token_type, "Bearer");
      assert.equal(tokens.headers.get("cache-control"), "no-store");
      const me = await rest(world.auth, "GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${tokens.body.access_token}` });
      assert.equal(me.status, 200, JSON.stringify(me.body));
      assert.equal(me.body.email, "alice@example.com");
    } finally {
      await listener.close();
    }
  });

  test("a role binding made to a person's predicted uid before they ever signed in applies at their first sign-in", async () => {
    const org = (await createGroup(world.server.url, null, "prebound")).uid;
    const viewer = await builtinRole(world.server, "viewer");
    const lookup = await rest(
      world.auth,
      "GET",
      `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(world.upstream.issuer)}&subject=${encodeURIComponent("carol@example.com")}`,
    );
    assert.equal(lookup.status, 200, JSON.stringify(lookup.body));
    const bound = await rest(world.auth, "POST", `/iam/v2beta1/roleBindings/${org}`, { identityUid: lookup.body.uid, roleUid: viewer });
    assert.equal(bound.status, 200, JSON.stringify(bound.body));
    const tokens = await cliSignIn(world, "carol@example.com");
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    const person = { authorization: `Bearer ${tokens.body.access_token}` };
    const group = await rest(world.auth, "GET", `/iam/v2beta1/groups/${org}`, undefined, person);
    assert.equal(group.status, 200, JSON.stringify(group.body));
    assert.equal(group.body.uid, org);
    const me = await rest(world.auth, "GET", "/auth/v1/ok", undefined, person);
    assert.equal(me.body.subject, lookup.body.uid, "the person is the predicted identity");
  });
});

describe("the device flow, driven with fetch", () => {
  let world: SignInWorld;
  let ahead = 0;
  before(async () => {
    world = await startSignInWorld({ now: () => Date.now() + ahead });
  });
  after(async () => world?.close());

  const start = async () => (await tokenRequest(world.auth, { client_id: "platform-cli" }, "/oauth/device_authorization")).body;
  const poll = (device_code: string) => tokenRequest(world.auth, { grant_type: DEVICE_GRANT, client_id: "platform-cli", device_code });

  test("a person who declines: access_denied, and the device code is then worth nothing", async () => {
    const { device_code, user_code } = await start();
    const browser = new FetchBrowser();
    const entered = await enterUserCode(browser, world.auth, user_code);
    assert.equal(entered.status, 303);
    const confirm = await signInWithFetch(browser, world.auth, entered.location, "decliner@example.com");
    assert.match(confirm, /\/device\/confirm\?flow=/);
    const denied = await confirmDevice(browser, confirm, "deny");
    assert.equal(denied.status, 200);
    assert.match(denied.text, /Device denied/);
    const answer = await poll(device_code);
    assert.equal(answer.status, 400);
    assert.equal(answer.body.error, "access_denied");
  });

  test("a device code past its ten minutes: expired_token; an unknown one: invalid_grant", async () => {
    const { device_code } = await start();
    ahead += 11 * 60_000;
    assert.equal((await poll(device_code)).body.error, "expired_token");
    assert.equal((await poll(`${(Date.now() + ahead + 600_000).toString(36)}.${"A".repeat(43)}`)).body.error, "invalid_grant");
    assert.equal((await poll("guess")).body.error, "invalid_grant");
  });

  test("a device flow an organization's provider scopes lists only that provider", async () => {
    const { user_code } = (await tokenRequest(world.auth, { client_id: "platform-cli", provider: "test2" }, "/oauth/device_authorization"))
      .body;
    const browser = new FetchBrowser();
    const entered = await enterUserCode(browser, world.auth, user_code.toLowerCase().replace("-", " "));
    assert.equal(entered.status, 303, "the code is read whatever its case and separator");
    const page = await browser.get(entered.location);
    assert.match(page.text, /Sign in with Test Provider 2</);
    assert.doesNotMatch(page.text, /value="op:test"/);
  });
});

describe("an organization's own identity providers", () => {
  let world: SignInWorld;
  let org: { uid: string };
  let viewer: string;
  const providers: Record<string, string> = {};
  before(async () => {
    world = await startSignInWorld();
    viewer = await builtinRole(world.server, "viewer");
    org = await createGroup(world.server.url, null, "acme");
    for (const [client, oidc] of [
      [ORG_PKCE_CLIENT, { pkceEnabled: true }],
      [ORG_SECRET_CLIENT.id, { clientSecret: ORG_SECRET_CLIENT.secret }],
    ] as const) {
      const res = await rest(world.server.url, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
        name: `acme ${client}`,
        defaultRole: viewer,
        oidc: { issuer: world.orgUpstream.issuer, clientId: client, additionalScopes: ["groups"], ...oidc },
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      providers[client] = res.body.uid;
    }
  });
  after(async () => world?.close());

  for (const client of [ORG_PKCE_CLIENT, ORG_SECRET_CLIENT.id]) {
    test(`through ${client}: registered in the organization with its default role bound, PKCE exactly when enabled`, async () => {
      let upstreamUrl: URL | undefined;
      const login = `${client}.person@acme.example`;
      const tokens = await cliSignIn(world, login, { extra: { idp: providers[client]! }, onUpstream: (u) => (upstreamUrl = u) });
      assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      const q = upstreamUrl!.searchParams;
      assert.equal(q.get("client_id"), client);
      assert.equal(q.get("code_challenge_method"), client === ORG_PKCE_CLIENT ? "S256" : null);
      assert.equal(q.get("scope"), "openid email profile groups");
      assert.ok(q.get("nonce") && q.get("state"));
      const me = await rest(world.auth, "GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${tokens.body.access_token}` });
      assert.ok(me.body.subject.startsWith(`${org.uid}/`), `registered in the organization: ${me.body.subject}`);
      assert.deepEqual(
        me.body.capabilities.map((c: { group: { id: string }; role: { id: string } }) => [c.group.id, c.role.id]),
        [[org.uid, viewer]],
      );
      // Signing in again finds the same person and binds nothing twice.
      const again = await cliSignIn(world, login, { extra: { idp: providers[client]! } });
      const me2 = await rest(world.auth, "GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${again.body.access_token}` });
      assert.equal(me2.body.subject, me.body.subject);
      assert.equal(me2.body.capabilities.length, 1);
    });
  }

  test("?org= lists that organization's providers and nothing else", async () => {
    const browser = new FetchBrowser();
    const page = await browser.get(`${world.auth}/sign-in?org=acme`);
    assert.equal(page.status, 200);
    assert.match(page.text, /Sign in with acme org-pkce/);
    assert.match(page.text, /Sign in with acme org-secret/);
    assert.doesNotMatch(page.text, /Test Provider/);
    const none = await browser.get(`${world.auth}/sign-in?org=nobody`);
    assert.equal(none.status, 404);
  });

  test("an invite bound to an email is redeemed by a person whose provider verified it, and not by one whose did not", async () => {
    for (const [login, expected] of [
      ["invited@example.com", 200],
      ["unverified.invited@example.com", 403],
    ] as const) {
      const inv = await rest(world.server.url, "POST", `/iam/v2beta1/groupInvites/${org.uid}`, {
        roleUid: viewer,
        ttl: "3600s",
        email: login,
      });
      assert.equal(inv.status, 200, JSON.stringify(inv.body));
      const tokens = await cliSignIn(world, login);
      const joined = await rest(
        world.auth,
        "POST",
        "/auth/v1/register",
        { code: inv.body.code },
        {
          authorization: `Bearer ${tokens.body.access_token}`,
        },
      );
      assert.equal(joined.status, expected, `${login}: ${JSON.stringify(joined.body)}`);
    }
  });
});

describe("two processes sharing one store", () => {
  let world: SignInWorld;
  /** A second OS process (the compiled server) on the same database: nothing of a flow may live in one process. */
  let process2: ServeProcess;
  let second: { url: string };
  before(async () => {
    world = await startSignInWorld();
    process2 = await startServeProcess({
      PLATFORM_DATA_DIR: world.server.dataDir,
      ...(world.server.databaseUrl ? { PLATFORM_DATABASE_URL: world.server.databaseUrl } : {}),
      PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true",
      PLATFORM_BASE_URL: world.auth,
      PLATFORM_SIGN_IN_PROVIDERS_FILE: providersFile([world.upstream, world.other]),
    });
    second = { url: `http://127.0.0.1:${process2.port}` };
  });
  after(async () => {
    await process2?.stop();
    await world?.close();
  });

  test("a browser flow begun at one finishes at the other, and the other redeems the code", async () => {
    const tokens = await cliSignIn(world, "roamer@example.com", { callbackAt: second.url, tokenAt: second.url });
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    const subjects = await subjectsOn(world.server, tokens.body.access_token);
    assert.equal(new Set(Object.values(subjects)).size, 1);
  });

  test("a device flow begun at one is confirmed at the other and polled at the first", async () => {
    const { device_code, user_code } = (await tokenRequest(world.auth, { client_id: "platform-cli" }, "/oauth/device_authorization")).body;
    const browser = new FetchBrowser();
    const entered = await enterUserCode(browser, second.url, user_code);
    assert.equal(entered.status, 303);
    const confirm = await signInWithFetch(
      browser,
      world.auth,
      entered.location.replace(second.url, world.auth),
      "device.roamer@example.com",
      {
        callbackAt: second.url,
      },
    );
    assert.equal((await confirmDevice(browser, confirm, "allow")).status, 200);
    const tokens = await tokenRequest(world.auth, { grant_type: DEVICE_GRANT, client_id: "platform-cli", device_code });
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
  });
});
