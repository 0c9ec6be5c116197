/**
 * Issue 32 in a real browser (Debian's Chromium through playwright-core):
 * a person clicks through our sign-in page and the upstream provider's login
 * form (oidc-provider) and platform-cli's loopback listener receives a code
 * that buys a token working on REST, gRPC, Connect and gRPC-Web; the same
 * from [::1]; and the device flow: the code typed on our /device page, the
 * sign-in, the confirmation, while the device polls (authorization_pending,
 * slow_down, then tokens). Each of our pages on the way passes axe-core's
 * WCAG 2.1 A and AA rules.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { CHROMIUM, CHROMIUM_SKIP, chromiumArgs } from "../support/chromium.js";
import {
  loopbackCodeFlow,
  startSignInWorld,
  subjectsOn,
  tokenRequest,
  type LoopbackListener,
  type SignInWorld,
} from "../support/sign-in-fixture.js";

const SKIP = CHROMIUM_SKIP;
// Only this machine: the upstream's page asks for a web font, which must go nowhere.
const CHROMIUM_ARGS = chromiumArgs("MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE ::1");

/** axe-core's browser bundle: run in the page (the context bypasses our CSP for it alone; the header is checked as sent). */
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** Asserts axe-core finds no WCAG 2.1 A/AA violation on the page as it stands. */
async function assertAccessible(page: Page): Promise<void> {
  await page.evaluate(AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const axe = (
      globalThis as unknown as {
        axe: { run: (ctx: Document, opts: object) => Promise<{ violations: { id: string; nodes: { target: string[] }[] }[] }> };
      }
    ).axe;
    const result = await axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
    return result.violations.map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
  });
  assert.deepEqual(violations, [], `${page.url()}: axe-core violations`);
}

describe("signing in, in a real browser", { skip: SKIP }, () => {
  let browser: Browser;
  let world: SignInWorld;
  /** The server's clock runs this far ahead: the device tests move it instead of waiting. */
  let ahead = 0;
  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    world = await startSignInWorld({ now: () => Date.now() + ahead });
  });
  after(async () => {
    await browser?.close();
    await world?.close();
  });

  async function withPage<T>(run: (page: Page, context: BrowserContext) => Promise<T>): Promise<T> {
    const context = await browser.newContext({ bypassCSP: true });
    try {
      return await run(await context.newPage(), context);
    } finally {
      await context.close();
    }
  }

  /** On the upstream's development login form: any login, any password. */
  async function upstreamLogin(page: Page, login: string): Promise<void> {
    await page.locator('input[name="login"]').fill(login);
    await page.locator('input[name="password"]').fill("any password");
    await page.getByRole("button", { name: "Sign-in" }).click();
  }

  for (const host of ["127.0.0.1", "::1"] as const) {
    test(`the browser flow: our page, the upstream's form, then platform-cli's loopback listener on ${host} gets a code for a token every protocol accepts`, async () => {
      const visit = (authorize: string, listener: LoopbackListener) =>
        withPage(async (page) => {
          const response = await page.goto(authorize);
          // Our sign-in page: accessible, not frameable, no script.
          assert.equal(response?.status(), 200);
          const csp = response!.headers()["content-security-policy"] ?? "";
          assert.match(csp, /frame-ancestors 'none'/);
          assert.doesNotMatch(csp, /script-src/);
          assert.match(csp, /default-src 'none'/);
          assert.equal(await page.locator("html").getAttribute("lang"), "en");
          assert.equal(await page.getByRole("heading", { level: 1 }).innerText(), "Sign in");
          assert.equal(await page.locator("script").count(), 0);
          await assertAccessible(page);
          // The first thing the keyboard reaches is the first provider's button.
          await page.keyboard.press("Tab");
          assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Sign in with Test Provider");
          await page.getByRole("button", { name: "Sign in with Test Provider", exact: true }).click();
          await upstreamLogin(page, "browser.person@example.com");
          await page.waitForURL((u) => u.href.startsWith(listener.redirectUri));
          // What the listener received (the page's URL is the same callback).
          assert.equal(listener.received.length, 1);
          return new URL(`${listener.redirectUri}?${listener.received[0]!}`);
        });
      const { callback, tokens } = await loopbackCodeFlow(world.auth, visit, { host, state: "browser-state" });
      assert.deepEqual([...callback.searchParams.keys()].sort(), ["code", "iss", "state"]);
      assert.equal(callback.searchParams.get("state"), "browser-state");
      assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      const subjects = await subjectsOn(world.server, tokens.body.access_token);
      const person = subjects.rest!;
      assert.match(person, /^[0-9a-f]{40}$/, "a root-level person");
      assert.deepEqual(subjects, { rest: person, grpc: person, connect: person, grpcWeb: person });
    });
  }

  test("the device flow: the code typed on /device, sign-in, Allow, while the device polls: pending, slow_down, then tokens", async () => {
    const started = await tokenRequest(world.auth, { client_id: "platform-cli" }, "/oauth/device_authorization");
    assert.equal(started.status, 200, JSON.stringify(started.body));
    const { device_code, user_code, verification_uri, verification_uri_complete, interval } = started.body;
    assert.equal(verification_uri, `${world.auth}/device`);
    assert.match(user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    const poll = () =>
      tokenRequest(world.auth, { grant_type: "urn:ietf:params:oauth:grant-type:device_code", client_id: "platform-cli", device_code });

    assert.equal((await poll()).body.error, "authorization_pending");
    const flooded = await poll();
    assert.equal(flooded.body.error, "slow_down", "polled again at once");
    ahead += (interval + 5) * 1000;
    assert.equal((await poll()).body.error, "authorization_pending", "polled after the longer interval");

    await withPage(async (page) => {
      // verification_uri_complete prefills the code; the person still confirms it.
      await page.goto(verification_uri_complete);
      assert.equal(await page.getByLabel("Code shown on your device").inputValue(), user_code);
      await assertAccessible(page);
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByRole("button", { name: "Sign in with Test Provider", exact: true }).click();
      await upstreamLogin(page, "device.person@example.com");
      await page.getByRole("heading", { name: "Allow this device?" }).waitFor();
      assert.match(await page.locator("main").innerText(), /device\.person@example\.com/);
      await assertAccessible(page);
      await page.getByRole("button", { name: "Allow" }).click();
      await page.getByRole("heading", { name: "Device allowed" }).waitFor();
      await assertAccessible(page);
    });

    ahead += 11_000;
    const tokens = await poll();
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    const subjects = await subjectsOn(world.server, tokens.body.access_token);
    assert.deepEqual(new Set(Object.values(subjects)).size, 1);
    ahead += 11_000;
    assert.equal((await poll()).body.error, "invalid_grant", "a device code buys tokens once");
  });
});
