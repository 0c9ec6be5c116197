/**
 * /docs behind a proxy that mounts the server under /platform/ and strips the
 * prefix (nginx `location /platform/ { proxy_pass http://api/; }`, Caddy
 * `handle_path /platform/*`): the page, every asset it names, the script's
 * OpenAPI URL and the redirects resolve as a browser resolves them against
 * http://host/platform/docs, and each loads with its content type. With
 * PLATFORM_BASE_URL naming the public URL, the document's servers entry is
 * where "Try it out" calls land. The same page works with no prefix.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { startTestServer, type TestServer } from "../support/server.js";

const PREFIX = "/platform";

/** Content types by file extension, as the page's assets must be served for a browser to use them. */
const TYPES: Record<string, RegExp> = {
  css: /^text\/css\b/,
  js: /^text\/javascript\b/,
  png: /^image\/png$/,
};

/** A reverse proxy on a free loopback port: /platform/… goes upstream as /…, anything else is 404. */
async function startPrefixProxy(upstream: () => number): Promise<{ url: string; close(): Promise<void> }> {
  const proxy = http.createServer((req, res) => {
    const path = req.url ?? "/";
    if (!path.startsWith(`${PREFIX}/`)) {
      res.writeHead(404, { "content-type": "text/plain" }).end("outside the mount\n");
      return;
    }
    const forwarded = http.request(
      { host: "127.0.0.1", port: upstream(), method: req.method, path: path.slice(PREFIX.length), headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forwarded.on("error", () => res.destroy());
    req.pipe(forwarded);
  });
  proxy.listen(0, "127.0.0.1");
  await once(proxy, "listening");
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => proxy.close(() => resolve())),
  };
}

/** Every src and href of the page, resolved against its URL. */
function pageUrls(html: string, pageUrl: string): URL[] {
  return [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => new URL(m[1]!, pageUrl));
}

/** The spec URL init.js hands Swagger UI, which fetches it relative to the page. */
function specUrl(init: string, pageUrl: string): URL {
  const url = /\burl: "([^"]+)"/.exec(init)?.[1];
  assert.ok(url, "init.js names the OpenAPI document");
  return new URL(url, pageUrl);
}

/** Loads the page at pageUrl and everything it references; returns the OpenAPI document it leads to. */
async function loadDocsPage(pageUrl: string, mount: string): Promise<{ servers: { url: string }[] }> {
  const page = await fetch(pageUrl);
  assert.equal(page.status, 200);
  assert.match(page.headers.get("content-type") ?? "", /^text\/html\b/);
  const urls = pageUrls(await page.text(), pageUrl);
  assert.deepEqual(urls.map((u) => u.pathname.slice(mount.length)).sort(), [
    "/docs/favicon-32x32.png",
    "/docs/init.js",
    "/docs/swagger-ui-bundle.js",
    "/docs/swagger-ui-standalone-preset.js",
    "/docs/swagger-ui.css",
  ]);
  let init = "";
  for (const url of urls) {
    assert.equal(url.origin, new URL(pageUrl).origin, `${url} is on the page's origin`);
    const res = await fetch(url);
    assert.equal(res.status, 200, url.href);
    assert.match(res.headers.get("content-type") ?? "", TYPES[url.pathname.split(".").pop()!]!, url.href);
    const body = await res.text();
    assert.ok(body.length > 0, url.href);
    if (url.pathname.endsWith("/init.js")) init = body;
  }
  const spec = specUrl(init, pageUrl);
  assert.equal(spec.href, `${new URL(pageUrl).origin}${mount}/openapi.json`);
  const res = await fetch(spec);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json\b/);
  return (await res.json()) as { servers: { url: string }[] };
}

/** Where a redirect from url leads, resolved as a browser resolves its Location. */
async function redirectTarget(url: string): Promise<string> {
  const res = await fetch(url, { redirect: "manual" });
  assert.ok([301, 302].includes(res.status), `${url}: ${res.status}`);
  return new URL(res.headers.get("location")!, url).href;
}

describe("/docs under a path prefix, behind a prefix-stripping proxy", () => {
  let srv: TestServer;
  let proxy: Awaited<ReturnType<typeof startPrefixProxy>>;
  let publicUrl: string;

  before(async () => {
    proxy = await startPrefixProxy(() => srv.port);
    publicUrl = `${proxy.url}${PREFIX}`;
    srv = await startTestServer({ env: { PLATFORM_BASE_URL: publicUrl } });
  });
  after(async () => {
    await proxy?.close();
    await srv?.close();
  });

  test("the page, its assets and /openapi.json load through the proxy at the prefix", async () => {
    await loadDocsPage(`${publicUrl}/docs`, PREFIX);
  });

  test("the OpenAPI servers entry is the public URL, and a call there ('Try it out') reaches the API", async () => {
    const doc = await loadDocsPage(`${publicUrl}/docs`, PREFIX);
    assert.deepEqual(doc.servers, [{ url: publicUrl }]);
    const headers = { authorization: `Bearer ${srv.adminToken}`, "content-type": "application/json" };
    const created = await fetch(`${doc.servers[0]!.url}/iam/v2beta1/groups`, {
      method: "POST",
      headers,
      body: JSON.stringify({ name: "prefixed org" }),
    });
    assert.equal(created.status, 200);
    const { uid } = (await created.json()) as { uid: string };
    const got = await fetch(`${doc.servers[0]!.url}/iam/v2beta1/groups/${uid}`, { headers });
    assert.equal(got.status, 200);
    assert.equal(((await got.json()) as { name: string }).name, "prefixed org");
  });

  test("/platform/ and /platform/docs/ lead to /platform/docs", async () => {
    assert.equal(await redirectTarget(`${publicUrl}/`), `${publicUrl}/docs`);
    assert.equal(await redirectTarget(`${publicUrl}/docs/`), `${publicUrl}/docs`);
  });

  test("the proxy serves nothing outside the mount (a URL that lost the prefix would fail)", async () => {
    assert.equal((await fetch(`${proxy.url}/docs/swagger-ui.css`)).status, 404);
    assert.equal((await fetch(`${proxy.url}/openapi.json`)).status, 404);
  });
});

describe("/docs with no prefix", () => {
  let srv: TestServer;

  before(async () => {
    srv = await startTestServer();
  });
  after(async () => {
    await srv?.close();
  });

  test("the page, its assets and /openapi.json load from the server's root", async () => {
    await loadDocsPage(`${srv.url}/docs`, "");
  });

  test("/ and /docs/ lead to /docs", async () => {
    assert.equal(await redirectTarget(`${srv.url}/`), `${srv.url}/docs`);
    assert.equal(await redirectTarget(`${srv.url}/docs/`), `${srv.url}/docs`);
  });
});
