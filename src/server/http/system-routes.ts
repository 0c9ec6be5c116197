import { Code } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { TokenService } from "../../auth/tokens.js";
import type { Config } from "../../config.js";
import { ApiError } from "../../domain/errors.js";
import type { Store } from "../../store/store.js";
import { metricsNotPublicError, publicPortMetrics } from "../observe/metrics-access.js";
import { metricsTokenMatches, type Metrics } from "../observe/metrics.js";
import { bearerChallenge } from "./www-authenticate.js";

/**
 * What the operator's probes and scrapers read: /healthz (alive), /readyz
 * (send me calls: serving, and the store answers) and /metrics (to whom the
 * settings allow: publicPortMetrics). serving() turns false when the drain
 * begins, so /readyz answers 503 while calls are still served.
 */
export function installHealthAndMetrics(
  app: FastifyInstance,
  deps: { config: Config; store: Store; serving: () => boolean; metrics: Metrics },
): void {
  const { config, store, serving, metrics } = deps;
  app.get("/healthz", async (_req, reply) => reply.send({ status: "ok" }));
  // Who may scrape here (metrics-access.ts). With PLATFORM_METRICS_ADDR, /metrics is served there only
  // (metrics-endpoint.ts): no route. Private (the default), every scrape is refused, with what the operator can set.
  const access = publicPortMetrics(config);
  if (access !== "elsewhere")
    app.get("/metrics", async (req, reply) => {
      if (access === "private") throw metricsNotPublicError();
      if (access === "token" && !metricsTokenMatches(req.headers.authorization, config.metricsToken)) {
        // The app's error handler renders the refusal in the spec's shape and keeps this challenge.
        reply.header("www-authenticate", bearerChallenge(req.headers.authorization, "metrics"));
        throw new ApiError(
          Code.Unauthenticated,
          "UNAUTHENTICATED",
          "Unauthenticated: /metrics requires Authorization: Bearer <metrics token>",
        );
      }
      // In a worker, the whole cluster's numbers (metrics-cluster.ts).
      return reply.type(metrics.contentType).send(await metrics.exposition());
    });
  app.get("/readyz", async (_req, reply) => {
    // One cheap read: a database that stopped answering makes the process not ready at once.
    const reachable = await store.refresh().then(
      () => true,
      () => false,
    );
    const ready = serving() && reachable && store.ready();
    return reply.code(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
  });
}

/** OpenID discovery and the JWKS: what a relying party needs to verify this server's tokens. */
export function installWellKnown(app: FastifyInstance, config: Config, tokens: TokenService): void {
  app.get("/.well-known/openid-configuration", async (_req, reply) =>
    reply.header("cache-control", "public, max-age=300").send({
      issuer: config.authUrl,
      jwks_uri: `${config.authUrl}/.well-known/jwks.json`,
      token_endpoint: `${config.authUrl}/sts/exchange`,
      response_types_supported: ["token"],
      subject_types_supported: ["public"],
      id_token_signing_alg_values_supported: ["ES256"],
    }),
  );
  app.get("/.well-known/jwks.json", async (_req, reply) => reply.header("cache-control", "public, max-age=300").send(await tokens.jwks()));
}
