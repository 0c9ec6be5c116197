import { cors } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";

const ALLOWED_METHODS = ["GET", "POST", "PATCH", "PUT", "DELETE"].join(", ");
const ALLOWED_HEADERS = [...new Set([...cors.allowedHeaders, "Authorization", "X-Request-Id"])].join(", ");
const EXPOSED_HEADERS = [...new Set([...cors.exposedHeaders, "X-Request-Id"])].join(", ");

/**
 * CORS for browser clients (REST, Connect and gRPC-Web) from the configured
 * origins ("*" allows any): answers preflight requests and exposes the
 * headers Connect and gRPC-Web read. Requests from other origins get no CORS
 * headers, so the browser refuses them.
 */
export function installCors(app: FastifyInstance, origins: readonly string[]): void {
  if (origins.length === 0) return;
  const any = origins.includes("*");
  const allowed = new Set(origins);
  app.addHook("onRequest", async (req, reply) => {
    const origin = req.headers.origin;
    if (origin === undefined || (!any && !allowed.has(origin))) return;
    reply.header("access-control-allow-origin", any ? "*" : origin);
    reply.header("vary", "Origin");
    reply.header("access-control-expose-headers", EXPOSED_HEADERS);
    if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
      reply.header("access-control-allow-methods", ALLOWED_METHODS);
      reply.header("access-control-allow-headers", ALLOWED_HEADERS);
      reply.header("access-control-max-age", "7200");
      return reply.code(204).send();
    }
  });
}
