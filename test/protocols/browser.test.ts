/**
 * The API in a real browser (Debian's headless Chromium driven by
 * playwright-core): the /docs page renders every operation from local files
 * only and tries a call with a pasted token; a page from another origin calls
 * ListGroups through @connectrpc/connect-web over Connect and gRPC-Web (and
 * REST with fetch), allowed by PLATFORM_CORS_ORIGINS; from an origin not
 * allowed, the browser refuses.
 */
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { build } from "esbuild";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { CHROMIUM, CHROMIUM_SKIP, chromiumArgs } from "../support/chromium.js";
import { freePort } from "../support/serve-process.js";
import { createGroup, startTestServer, type TestServer } from "../support/server.js";

const ROOT = new URL("../..", import.meta.url).pathname;
const SKIP = CHROMIUM_SKIP;
// docs.test is this machine; no other name resolves, so nothing can leave it.
const CHROMIUM_ARGS = chromiumArgs("MAP docs.test 127.0.0.1,MAP * ~NOTFOUND,EXCLUDE 127.0.0.1");

/** The browser code: connect-web clients calling ListGroups over Connect and gRPC-Web, and REST with fetch. */
const ENTRY = `
import { ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { GroupsService } from "./gen/platformapi/iam/v2beta1/groups_pb.js";

const { api, token } = JSON.parse(document.getElementById("config").textContent);
const headers = { authorization: "Bearer " + token };

async function viaClient(transport) {
  try {
    const res = await createClient(GroupsService, transport).listGroups({}, { headers });
    return { ok: true, names: res.groups.map((g) => g.name).sort(), totalCount: String(res.totalCount) };
  } catch (err) {
    const e = ConnectError.from(err);
    return { ok: false, code: e.code, message: e.rawMessage };
  }
}

async function viaFetch() {
  try {
    const res = await fetch(api + "/iam/v2beta1/groups", { headers });
    const body = await res.json();
    return { ok: res.ok, status: res.status, names: body.groups.map((g) => g.name).sort(), requestId: res.headers.get("x-request-id") };
  } catch (err) {
    return { ok: false, message: String(err) };
  }
}

const results = {
  connect: await viaClient(createConnectTransport({ baseUrl: api })),
  grpcWeb: await viaClient(createGrpcWebTransport({ baseUrl: api })),
  rest: await viaFetch(),
};
const out = document.getElementById("out");
out.textContent = JSON.stringify(results);
out.dataset.done = "true";
`;

/** Bundles ENTRY for the browser (esbuild resolves the generated .ts behind its .js import). */
async function bundle(): Promise<string> {
  const result = await build({
    stdin: { contents: ENTRY, resolveDir: ROOT, sourcefile: "browser-entry.ts", loader: "ts" },
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    target: "es2022",
    logLevel: "silent",
  });
  return result.outputFiles[0]!.text;
}

/** A second origin: a tiny server of HTML pages (one per API under test) and the bundle. */
async function startPageServer(script: string) {
  const pages = new Map<string, string>();
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    if (path === "/app.js") {
      res.writeHead(200, { "content-type": "text/javascript; charset=utf-8" }).end(script);
      return;
    }
    const page = pages.get(path);
    if (!page) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(page);
  });
  server.listen(0, "127.0.0.1");
  await new Promise((resolve) => server.once("listening", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    /** Serves at `path` a page that calls the API at `api` with `token`. */
    addPage(path: string, api: string, token: string) {
      const config = JSON.stringify({ api, token }).replace(/</g, "\\u003c");
      pages.set(
        path,
        `<!doctype html><html><head><meta charset="utf-8"><title>connect-web client</title></head><body>` +
          `<script type="application/json" id="config">${config}</script><pre id="out"></pre>` +
          `<script type="module" src="/app.js"></script></body></html>`,
      );
      return `${origin}${path}`;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

interface ClientResult {
  ok: boolean;
  names?: string[];
  totalCount?: string;
  code?: number;
  message?: string;
  status?: number;
  requestId?: string | null;
}

describe("in a real browser", { skip: SKIP }, () => {
  let browser: Browser;
  let context: BrowserContext;
  before(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
  });
  after(async () => {
    await browser?.close();
  });

  /** A fresh page in a fresh context (no shared cache or storage between tests). */
  async function newPage(): Promise<Page> {
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    return context.newPage();
  }

  test("/docs renders every operation from the server's own origin only, and tries a call with a pasted token", async () => {
    // Served under a host name, as in production (Swagger UI treats localhost and 127.0.0.1 specially).
    const port = await freePort();
    const origin = `http://docs.test:${port}`;
    const srv = await startTestServer({ env: { PORT: String(port), PLATFORM_BASE_URL: origin } });
    const page = await newPage();
    try {
      const org = await createGroup(srv.url, null, "docs page org");
      const child = await createGroup(srv.url, org.uid, "docs page child");
      const requests: string[] = [];
      page.on("request", (req) => requests.push(req.url()));
      const failed: string[] = [];
      page.on("requestfailed", (req) => failed.push(`${req.url()} ${req.failure()?.errorText}`));
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(String(err)));

      const res = await page.goto(`${origin}/docs`, { waitUntil: "load" });
      assert.equal(res?.status(), 200);
      // Swagger UI renders one block per operation once it has loaded /openapi.json.
      await page.locator(".opblock").first().waitFor({ timeout: 30_000 });
      await page.waitForLoadState("networkidle");
      const doc = (await (await fetch(`${srv.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
      assert.equal(await page.locator(".opblock").count(), countOperations(doc), "one block per documented operation");
      const text = await page.locator("#swagger-ui").innerText();
      for (const expected of [
        "Platform API",
        "GroupsService",
        "ListGroups",
        "/iam/v2beta1/groups",
        "/iam/v2beta1/groups/{uid}",
        "/iam/v2beta1/roleBindings:batchCreate",
        "Authorize",
      ]) {
        assert.ok(text.includes(expected), `the page shows ${expected}`);
      }
      const listGroups = page.locator(".opblock-get", { has: page.locator('[data-path="/iam/v2beta1/groups"]') });
      assert.equal(await listGroups.count(), 1, "GET /iam/v2beta1/groups is listed");

      // Paste a token.
      await page.locator("button.authorize").first().click();
      await page.locator(".auth-container input").first().fill(srv.adminToken);
      await page.locator(".auth-btn-wrapper button.authorize").click();
      await page.locator(".auth-btn-wrapper button.btn-done").click();

      // The screenshot the README shows: the operations, authorized (no hover highlight).
      await page.mouse.move(0, 0);
      mkdirSync(join(ROOT, "docs"), { recursive: true });
      // DOCS_SCREENSHOT=docs/docs-page.png (npm run screenshot) refreshes the README's image.
      const shot = process.env.DOCS_SCREENSHOT ? join(ROOT, process.env.DOCS_SCREENSHOT) : join(tmpdir(), `docs-page-${process.pid}.png`);
      await page.screenshot({ path: shot, fullPage: false });

      // Try ListGroups.
      await listGroups.locator(".opblock-summary").click();
      // The page opens operations ready to try (tryItOutEnabled); otherwise, "Try it out".
      const tryOut = listGroups.locator("button.try-out__btn", { hasText: "Try it out" });
      if ((await tryOut.count()) > 0) await tryOut.click();
      await listGroups.locator("button.execute").click();
      const status = listGroups.locator(".live-responses-table .response .response-col_status").first();
      await status.waitFor({ timeout: 30_000 });
      assert.equal((await status.innerText()).trim(), "200");
      assert.ok((await listGroups.locator(".live-responses-table").innerText()).includes("docs page org"), "the response shows the group");

      // Try GetGroup on a child: Swagger UI percent-encodes the uid's "/" as %2F.
      const getGroup = page.locator(".opblock-get", { has: page.locator('[data-path="/iam/v2beta1/groups/{uid}"]') });
      assert.equal(await getGroup.count(), 1, "GET /iam/v2beta1/groups/{uid} is listed");
      await getGroup.locator(".opblock-summary").click();
      const tryGet = getGroup.locator("button.try-out__btn", { hasText: "Try it out" });
      if ((await tryGet.count()) > 0) await tryGet.click();
      await getGroup.locator('tr[data-param-name="uid"] input').fill(child.uid);
      await getGroup.locator("button.execute").click();
      const getStatus = getGroup.locator(".live-responses-table .response .response-col_status").first();
      await getStatus.waitFor({ timeout: 30_000 });
      assert.equal((await getStatus.innerText()).trim(), "200");
      assert.ok(
        (await getGroup.locator(".live-responses-table").innerText()).includes("docs page child"),
        "the response shows the child group",
      );
      assert.ok(requests.includes(`${origin}/iam/v2beta1/groups/${child.uid.replace("/", "%2F")}`), "the uid went percent-encoded");

      // Everything came from the server itself: no CDN, no validator badge, no fonts.
      assert.ok(requests.some((u) => u.endsWith("/openapi.json")));
      assert.ok(
        requests.some((u) => u.startsWith(`${origin}/iam/v2beta1/groups`)),
        "the call went to the server",
      );
      for (const url of requests) assert.equal(new URL(url).origin, origin, `request to another origin: ${url}`);
      assert.deepEqual(failed, []);
      assert.deepEqual(errors, []);
    } finally {
      await context.close();
      await srv.close();
    }
  });

  describe("a page from another origin", () => {
    let script: string;
    let pages: Awaited<ReturnType<typeof startPageServer>>;
    let allowed: TestServer;
    let refused: TestServer;

    before(async () => {
      script = await bundle();
      pages = await startPageServer(script);
      allowed = await startTestServer({ env: { PLATFORM_CORS_ORIGINS: `https://app.example.com, ${pages.origin}` } });
      refused = await startTestServer({ env: { PLATFORM_CORS_ORIGINS: "https://app.example.com" } });
      for (const s of [allowed, refused]) {
        await createGroup(s.url, null, "browser org a");
        await createGroup(s.url, null, "browser org b");
      }
    });
    after(async () => {
      await allowed?.close();
      await refused?.close();
      await pages?.close();
    });

    /** Opens url and returns what the page's clients wrote into the DOM, with the console's messages. */
    async function runPage(url: string) {
      const page = await newPage();
      const consoleMessages: string[] = [];
      page.on("console", (m) => consoleMessages.push(m.text()));
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(String(err)));
      try {
        await page.goto(url);
        await page.locator("#out[data-done=true]").waitFor({ timeout: 30_000 });
        const results = JSON.parse(await page.locator("#out").innerText()) as Record<"connect" | "grpcWeb" | "rest", ClientResult>;
        assert.deepEqual(errors, []);
        return { results, consoleMessages };
      } finally {
        await context.close();
      }
    }

    test("from an allowed origin, ListGroups returns the groups over Connect, gRPC-Web and REST", async () => {
      assert.notEqual(pages.origin, allowed.url, "two origins");
      const { results } = await runPage(pages.addPage("/allowed.html", allowed.url, allowed.adminToken));
      const expected = ["browser org a", "browser org b"];
      assert.deepEqual(results.connect, { ok: true, names: expected, totalCount: "2" });
      assert.deepEqual(results.grpcWeb, { ok: true, names: expected, totalCount: "2" });
      assert.equal(results.rest.ok, true, JSON.stringify(results.rest));
      assert.deepEqual(results.rest.names, expected);
      assert.ok(results.rest.requestId, "x-request-id is exposed to the page");
    });

    test("from an origin not allowed, the browser refuses every call (CORS)", async () => {
      const { results, consoleMessages } = await runPage(pages.addPage("/refused.html", refused.url, refused.adminToken));
      for (const kind of ["connect", "grpcWeb", "rest"] as const) {
        assert.equal(results[kind].ok, false, `${kind} must fail: ${JSON.stringify(results[kind])}`);
        assert.equal(results[kind].names, undefined);
      }
      assert.match(results.rest.message ?? "", /Failed to fetch/);
      const blocked = consoleMessages.filter((m) => /blocked by CORS policy/.test(m));
      assert.ok(blocked.length >= 3, `Chromium reports the CORS refusals: ${consoleMessages.join("\n")}`);
      for (const m of blocked) assert.ok(m.includes(refused.url) && m.includes(pages.origin), m);

      // The server itself answers fine: it is the browser that refuses, for want of CORS headers.
      const preflight = await fetch(`${refused.url}/platformapi.iam.v2beta1.GroupsService/ListGroups`, {
        method: "OPTIONS",
        headers: {
          origin: pages.origin,
          "access-control-request-method": "POST",
          "access-control-request-headers": "authorization,content-type",
        },
      });
      assert.equal(preflight.headers.get("access-control-allow-origin"), null);
    });
  });
});

/** The number of operations in an OpenAPI document. */
function countOperations(doc: { paths: Record<string, Record<string, unknown>> }): number {
  const methods = new Set(["get", "put", "post", "delete", "patch", "options", "head", "trace"]);
  return Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).filter((m) => methods.has(m)).length, 0);
}
