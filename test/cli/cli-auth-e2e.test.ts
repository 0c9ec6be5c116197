/**
 * `platform-api auth` end to end, as a person runs it (the compiled command, in child processes) against the
 * real server and a real upstream OpenID provider (oidc-provider, test/support/upstream-oidc.ts): `auth login`
 * through the browser (the page driven with fetch and a cookie jar, and in Debian's Chromium), its URL
 * printed and handed to $BROWSER, the code coming back to the command's loopback listener; `auth login
 * --headless` through the device grant, the code typed on the server's /device page (approved, and denied);
 * then `auth token` used as curl uses it on REST and by @grpc/grpc-js (and Connect, gRPC-Web), refreshed
 * through /sts/exchange_refresh_token when it is about to expire — by two commands at once without losing the
 * session to reuse detection — `auth status`, and `auth logout`, after which the refresh token no longer
 * works. A session the server ended (a stolen refresh token replayed) is said, and forgotten.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { chromium, type Browser } from "playwright-core";
import { credentialsPath, readCredentials, writeCredentials, type ServerCredentials } from "../../src/cli/auth/credentials.js";
import { CHROMIUM, CHROMIUM_SKIP, chromiumArgs } from "../support/chromium.js";
import { startPlatformCli } from "../support/platform-cli.js";
import { signInWithFetch, startSignInWorld, subjectsOn, type SignInWorld } from "../support/sign-in-fixture.js";
import { FetchBrowser, formOf } from "../support/upstream-oidc.js";

const dir = mkdtempSync(join(tmpdir(), "platform-cli-auth-e2e-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A $BROWSER that writes the URL it is given to a file, as the test's stand-in for opening a window. */
const OPENER = join(dir, "opener.mjs");
writeFileSync(OPENER, `import { appendFileSync } from "node:fs";\nappendFileSync(process.env.OPENED_FILE, process.argv[2] + "\\n");\n`);

/** `platform-api auth <args>` started as a person runs it, with env (no data directory: the command needs none). */
const startCli = (env: Record<string, string>, args: string[]) => startPlatformCli(join(dir, "no-data"), ["auth", ...args], env);

describe("platform-api auth against the real server and a real upstream provider", () => {
  let world: SignInWorld;
  let configs = 0;
  before(async () => {
    world = await startSignInWorld();
  });
  after(async () => world?.close());

  /** A person's environment: their own config directory, the server named by PLATFORM_URL, $BROWSER recording. */
  function person() {
    const config = join(dir, `config-${++configs}`);
    const opened = join(dir, `opened-${configs}.txt`);
    const env = { XDG_CONFIG_HOME: config, PLATFORM_URL: world.auth, BROWSER: `${process.execPath} ${OPENER} %s`, OPENED_FILE: opened };
    return {
      env,
      path: credentialsPath(env),
      opened: () => (existsSync(opened) ? readFileSync(opened, "utf8").trim().split("\n") : []),
      run: (...args: string[]) => startCli(env, args).done,
      start: (...args: string[]) => startCli(env, args),
    };
  }

  /** Signs in through the browser flow, the page driven with fetch; the command's result. */
  async function browserLogin(who: ReturnType<typeof person>, login: string, args: string[] = []) {
    const cli = who.start("login", ...args);
    const [, url] = await cli.waitFor(/open this page in a browser on this machine:\n\n {2}(\S+)\n/, "stderr");
    const back = await signInWithFetch(new FetchBrowser(), world.auth, url!, login);
    // The browser arrives at the command's listener with the code.
    const page = await fetch(back);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /You are signed in\. You can close this tab and return to the terminal\./);
    return { url: url!, result: await cli.done };
  }

  /** Makes the stored API token look about to expire, so the next `auth token` refreshes it. */
  function expireSoon(path: string): ServerCredentials {
    const all = readCredentials(path);
    all[world.auth] = { ...all[world.auth]!, expiry: new Date(Date.now() + 30_000).toISOString() };
    writeCredentials(path, all);
    return all[world.auth]!;
  }

  const refreshWith = (refreshToken: string) =>
    fetch(`${world.auth}/sts/exchange_refresh_token`, {
      method: "POST",
      headers: { authorization: `Bearer ${refreshToken}`, "content-type": "application/x-www-form-urlencoded" },
      body: "",
    });

  test("auth login through the browser: the URL printed and opened, the code back on 127.0.0.1, then token, status and logout", async () => {
    const alice = person();
    const { url, result } = await browserLogin(alice, "alice.cli@example.com");
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, "", "nothing on stdout");
    assert.deepEqual(alice.opened(), [url], "$BROWSER got the URL printed");
    const authorize = new URL(url);
    assert.equal(`${authorize.origin}${authorize.pathname}`, `${world.auth}/oauth/authorize`);
    assert.equal(authorize.searchParams.get("code_challenge_method"), "S256");
    assert.match(authorize.searchParams.get("redirect_uri")!, /^http:\/\/127\.0\.0\.1:\d+\/callback$/);
    const signedIn = /Signed in to (\S+) as ([0-9a-f]{40}) \(alice\.cli@example\.com\)\.\n$/.exec(result.stderr);
    assert.ok(signedIn, result.stderr);
    assert.equal(signedIn[1], world.auth);
    const uid = signedIn[2]!;

    // The credentials: private, for this server, never printed.
    assert.equal(statSync(alice.path).mode & 0o777, 0o600);
    assert.equal(statSync(join(alice.path, "..")).mode & 0o777, 0o700);
    const stored = readCredentials(alice.path)[world.auth]!;
    assert.ok(!result.stderr.includes(stored.token) && !result.stderr.includes(stored.refreshToken));

    // auth token: alone on stdout, as $(platform-api auth token) takes it; it works on every protocol.
    const token = await alice.run("token");
    assert.deepEqual(token, { code: 0, stdout: `${stored.token}\n`, stderr: "" });
    const subjects = await subjectsOn(world.server, token.stdout.trim());
    assert.deepEqual(subjects, { rest: uid, grpc: uid, connect: uid, grpcWeb: uid });

    const status = await alice.run("status");
    assert.equal(status.code, 0, status.stderr);
    assert.match(
      status.stdout,
      new RegExp(
        `^server: {3}${world.auth.replace(/[.]/g, "\\.")}\nidentity: ${uid}\nemail: {4}alice\\.cli@example\\.com\ntoken: {4}valid until `,
      ),
    );

    // auth logout: the server ends the session (the refresh token stops working), and it is forgotten here.
    const logout = await alice.run("logout");
    assert.deepEqual(logout, { code: 0, stdout: "", stderr: `Signed out of ${world.auth}.\n` });
    assert.equal((await refreshWith(stored.refreshToken)).status, 401);
    assert.deepEqual(readCredentials(alice.path), {});
    const after = await alice.run("status");
    assert.equal(after.code, 1);
    assert.match(after.stderr, /^platform-api auth status: not signed in to /);
  });

  test("auth token refreshes a token about to expire, rotating the refresh token; two at once share one refresh", async () => {
    const bob = person();
    const { result } = await browserLogin(bob, "bob.cli@example.com");
    assert.equal(result.code, 0, result.stderr);
    const first = expireSoon(bob.path);

    const refreshed = await bob.run("token");
    assert.equal(refreshed.code, 0, refreshed.stderr);
    const second = readCredentials(bob.path)[world.auth]!;
    assert.equal(refreshed.stdout, `${second.token}\n`);
    assert.notEqual(second.token, first.token, "a new API token");
    assert.notEqual(second.refreshToken, first.refreshToken, "the refresh token rotated");
    assert.ok(Date.parse(second.expiry) > Date.now() + 30 * 60_000, second.expiry);
    const me = await fetch(`${world.auth}/auth/v1/ok`, { headers: { authorization: `Bearer ${second.token}` } });
    assert.equal(me.status, 200);

    // Two commands needing a refresh at once: one refreshes, the other uses what it stored.
    expireSoon(bob.path);
    const [a, b] = await Promise.all([bob.run("token"), bob.run("token")]);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(b.code, 0, b.stderr);
    const third = readCredentials(bob.path)[world.auth]!;
    assert.deepEqual([a.stdout, b.stdout], [`${third.token}\n`, `${third.token}\n`]);
    // The session survived (no refresh token was presented twice): it refreshes again.
    expireSoon(bob.path);
    const again = await bob.run("token");
    assert.equal(again.code, 0, again.stderr);
    assert.notEqual(readCredentials(bob.path)[world.auth]!.refreshToken, third.refreshToken);
  });

  test("a session the server ended (an old refresh token replayed): auth token says so in one line and forgets it", async () => {
    const carol = person();
    const { result } = await browserLogin(carol, "carol.cli@example.com");
    assert.equal(result.code, 0, result.stderr);
    const stolen = expireSoon(carol.path).refreshToken;
    assert.equal((await carol.run("token")).code, 0);
    // A thief presents the refresh token the command has already spent: the server revokes the whole family.
    assert.equal((await refreshWith(stolen)).status, 401);
    expireSoon(carol.path);
    const run = await carol.run("token");
    assert.equal(run.code, 1);
    assert.equal(run.stdout, "");
    assert.match(
      run.stderr,
      /^platform-api auth token: the session has ended \(the server refused its refresh token: signed out, expired, or used elsewhere\); sign in again: platform-api auth login --server http:\/\/127\.0\.0\.1:\d+\n$/,
    );
    assert.deepEqual(readCredentials(carol.path), {});
  });

  test("auth login --provider signs in through that provider only", async () => {
    const dave = person();
    const cli = dave.start("login", "--provider", "test2");
    const [, url] = await cli.waitFor(/open this page in a browser on this machine:\n\n {2}(\S+)\n/, "stderr");
    assert.equal(new URL(url!).searchParams.get("provider"), "test2");
    const browser = new FetchBrowser();
    const page = await browser.follow(url!);
    assert.match(page.seen!.text, /Sign in with Test Provider 2/);
    assert.doesNotMatch(page.seen!.text, /Sign in with Test Provider</);
    const back = await signInWithFetch(browser, world.auth, url!, "dave.cli@example.com");
    assert.equal((await fetch(back)).status, 200);
    const result = await cli.done;
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /Signed in to \S+ as [0-9a-f]{40} \(dave\.cli@example\.com\)\.\n$/);
  });

  /** Drives the device page with fetch: the code typed, the sign-in, then Allow or Deny; the last page's text. */
  async function onDevicePage(
    verificationUriComplete: string,
    userCode: string,
    login: string,
    decision: "allow" | "deny",
  ): Promise<string> {
    const browser = new FetchBrowser();
    const entry = await browser.get(verificationUriComplete);
    assert.equal(entry.status, 200, entry.text);
    const form = formOf(entry.text);
    const entered = await browser.post(new URL(form.action, world.auth).href, { ...form.fields, user_code: userCode });
    assert.equal(entered.status, 303, entered.text);
    const confirm = await signInWithFetch(browser, world.auth, entered.location, login);
    const page = await browser.get(confirm);
    const choice = formOf(page.text);
    const decided = await browser.post(new URL(choice.action, world.auth).href, { ...choice.fields, decision });
    assert.equal(decided.status, 200, decided.text);
    return decided.text;
  }

  test("auth login --headless: the code and page printed, typed on /device, allowed there; the command polls until signed in", async () => {
    const erin = person();
    const cli = erin.start("login", "--headless");
    const [, uri] = await cli.waitFor(/open this page in a browser on any device:\n\n {2}(\S+)\n/, "stderr");
    const [, userCode] = await cli.waitFor(/and enter the code: (\S+)\n/, "stderr");
    const [, complete] = await cli.waitFor(/Or open this page, which has the code filled in:\n\n {2}(\S+)\n/, "stderr");
    assert.equal(uri, `${world.auth}/device`);
    assert.equal(new URL(complete!).searchParams.get("user_code"), userCode);
    assert.match(await onDevicePage(complete!, userCode!, "erin.cli@example.com", "allow"), /Device allowed/);
    const result = await cli.done;
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(erin.opened(), [], "--headless opens no browser");
    assert.match(result.stderr, /Signed in to \S+ as [0-9a-f]{40} \(erin\.cli@example\.com\)\.\n$/);
    const token = await erin.run("token");
    assert.equal(token.code, 0, token.stderr);
    const subjects = await subjectsOn(world.server, token.stdout.trim());
    assert.equal(new Set(Object.values(subjects)).size, 1);
  });

  test("auth login --headless denied on the device page: one line, exit 1, nothing stored", async () => {
    const frank = person();
    const cli = frank.start("login", "--headless");
    const [, userCode] = await cli.waitFor(/and enter the code: (\S+)\n/, "stderr");
    const [, complete] = await cli.waitFor(/Or open this page, which has the code filled in:\n\n {2}(\S+)\n/, "stderr");
    assert.match(await onDevicePage(complete!, userCode!, "frank.cli@example.com", "deny"), /Device denied/);
    const result = await cli.done;
    assert.equal(result.code, 1);
    assert.match(result.stderr, /\nplatform-api auth login: the sign-in was refused at the verification page\n$/);
    assert.deepEqual(readCredentials(frank.path), {});
  });

  describe("in a real browser", { skip: CHROMIUM_SKIP }, () => {
    let browser: Browser;
    before(async () => {
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: chromiumArgs("MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE ::1"),
      });
    });
    after(async () => browser?.close());

    test("auth login: Chromium opens the printed URL, the person signs in, and the command's page says to close the tab", async () => {
      const grace = person();
      const cli = grace.start("login");
      const [, url] = await cli.waitFor(/open this page in a browser on this machine:\n\n {2}(\S+)\n/, "stderr");
      const context = await browser.newContext();
      try {
        const page = await context.newPage();
        await page.goto(url!);
        await page.getByRole("button", { name: "Sign in with Test Provider", exact: true }).click();
        await page.locator('input[name="login"]').fill("grace.cli@example.com");
        await page.locator('input[name="password"]').fill("any password");
        await page.getByRole("button", { name: "Sign-in" }).click();
        await page.getByRole("heading", { name: "Signed in" }).waitFor();
        assert.match(page.url(), /^http:\/\/127\.0\.0\.1:\d+\/callback\?/);
        assert.match(await page.locator("main").innerText(), /You can close this tab and return to the terminal/);
      } finally {
        await context.close();
      }
      const result = await cli.done;
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stderr, /Signed in to \S+ as [0-9a-f]{40} \(grace\.cli@example\.com\)\.\n$/);
      const token = await grace.run("token");
      assert.equal(token.code, 0, token.stderr);
    });
  });
});
