import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { StoredEncodings } from "../http/stored-encodings.js";

/** Files of swagger-ui-dist served under /docs/ (everything local: no CDN). */
const ASSETS: Record<string, string> = {
  "swagger-ui.css": "text/css; charset=utf-8",
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "swagger-ui-standalone-preset.js": "text/javascript; charset=utf-8",
  "favicon-32x32.png": "image/png",
};

/**
 * Every URL in the page and in init.js is relative to the page's own address,
 * so /docs also works behind a proxy that mounts the server under a path and
 * strips it (https://example.com/platform/docs loads
 * /platform/docs/swagger-ui.css and /platform/openapi.json). The page is
 * served only at /docs, never /docs/, so "docs/…" always names the assets.
 */
const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Platform API — docs</title>
  <link rel="icon" type="image/png" href="docs/favicon-32x32.png">
  <link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script src="docs/swagger-ui-standalone-preset.js"></script>
  <script src="docs/init.js"></script>
</body>
</html>
`;

// Paste a token with "Authorize"; it is kept across reloads in this browser only.
// Swagger UI fetches url relative to the page: /openapi.json, or /platform/openapi.json under a prefix.
const INIT = `window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  persistAuthorization: true,
  tryItOutEnabled: true,
  // No badge from validator.swagger.io: it would send this document's URL to a third party.
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
  layout: "StandaloneLayout",
});
`;

/**
 * The page holds a pasted token, so nothing but the server's own files may
 * run in it and no other site may frame it (clickjacking). Swagger UI needs
 * inline style attributes and data: images (its icons); "try it out" calls
 * the documented API URL, which may be another origin than the page's.
 */
function contentSecurityPolicy(apiUrl: string): string {
  return [
    "default-src 'self'",
    "img-src 'self' data:",
    "style-src 'self' 'unsafe-inline'",
    `connect-src 'self' ${new URL(apiUrl).origin}`,
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

/**
 * Serves the OpenAPI document at /openapi.json and an interactive page at
 * /docs (swagger-ui-dist, served from node_modules) where a user pastes a
 * token and tries calls against apiUrl. Every one of these bodies is fixed:
 * each is compressed once per coding and kept (stored-encodings.ts), and the
 * compressions are counted in registry.
 */
export function installDocs(app: FastifyInstance, document: object, apiUrl: string, registry: Registry): void {
  const root = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));
  const stored = new StoredEncodings(registry);
  for (const [name, type] of Object.entries(ASSETS)) stored.add(name, type, readFileSync(join(root, name)));
  stored.add("docs", "text/html; charset=utf-8", PAGE);
  stored.add("init.js", "text/javascript; charset=utf-8", INIT);
  stored.add("openapi.json", "application/json", `${JSON.stringify(document)}\n`);
  const csp = contentSecurityPolicy(apiUrl);
  app.register(async (docs) => {
    docs.addHook("onSend", async (_req, reply, payload) => {
      reply.header("content-security-policy", csp).header("x-frame-options", "DENY");
      return payload;
    });
    installPages(docs, stored);
  });
  app.get("/openapi.json", async (req, reply) => stored.send(req, reply.header("cache-control", "no-cache"), "openapi.json"));
}

function installPages(app: FastifyInstance, stored: StoredEncodings): void {
  app.get("/docs", async (req, reply) => stored.send(req, reply, "docs"));
  // Where people look first: the bare address and the slash-ended spelling both lead to the page.
  // Relative targets, so that behind a proxy /platform/ and /platform/docs/ lead to /platform/docs.
  app.get("/", async (_req, reply) => reply.redirect("docs", 302));
  app.get("/docs/", async (_req, reply) => reply.redirect("../docs", 301));
  app.get("/docs/init.js", async (req, reply) => stored.send(req, reply, "init.js"));
  app.get("/docs/:file", async (req, reply) => {
    const name = (req.params as { file: string }).file;
    if (!Object.hasOwn(ASSETS, name)) return reply.callNotFound();
    return stored.send(req, reply.header("cache-control", "public, max-age=86400"), name);
  });
}
