import { Code } from "@connectrpc/connect";
import type { Config } from "../../config.js";
import { ApiError } from "../../domain/errors.js";

/** The settings that say where /metrics is served and to whom. */
export type MetricsSettings = Pick<Config, "metricsToken" | "metricsAddr" | "metricsPublic">;

/**
 * Who may read /metrics on the public port:
 * - "elsewhere": nobody; PLATFORM_METRICS_ADDR serves it on an address of its own;
 * - "token": whoever sends Authorization: Bearer <PLATFORM_METRICS_TOKEN>;
 * - "anyone": every caller, because the operator said so (PLATFORM_METRICS_PUBLIC=on);
 * - "private": nobody (the default). The numbers tell an outsider the server's
 *   load, its callers' error rates and its tenants' activity, so they are
 *   never published by accident.
 */
export type PublicPortMetrics = "elsewhere" | "token" | "anyone" | "private";

/** The one decision every place that serves or describes /metrics reads (config.ts refuses contradictory settings). */
export function publicPortMetrics(settings: MetricsSettings): PublicPortMetrics {
  if (settings.metricsAddr) return "elsewhere";
  if (settings.metricsToken !== "") return "token";
  return settings.metricsPublic ? "anyone" : "private";
}

/**
 * The answer to every scrape of the public port while /metrics is private: no
 * credential can change it, so it is not 401 (which asks for one). It says
 * what the operator can set and nothing about the server's state.
 */
export function metricsNotPublicError(): ApiError {
  return new ApiError(
    Code.PermissionDenied,
    "METRICS_NOT_PUBLIC",
    "Permission denied: /metrics is not served on this port; the operator can set PLATFORM_METRICS_TOKEN " +
      "(scrapers then send Authorization: Bearer <token>), PLATFORM_METRICS_ADDR (a private address) or PLATFORM_METRICS_PUBLIC=on",
  );
}

/**
 * The start-up line saying where metrics can be scraped, or that they are
 * private and how to change that. listenerUrl: the PLATFORM_METRICS_ADDR
 * listener's address, once bound. (No "Bearer " in it: a log line holding
 * that word is taken for a leaked header, test/operations/logs.test.ts.)
 */
export function metricsStartupNote(settings: MetricsSettings, listenerUrl?: string): { fields: Record<string, string>; msg: string } {
  const bearer = "scrapers sending PLATFORM_METRICS_TOKEN in the Authorization header";
  switch (publicPortMetrics(settings)) {
    case "elsewhere": {
      const who = settings.metricsToken === "" ? "anyone who reaches that address" : bearer;
      return {
        fields: { metrics: listenerUrl ?? "", metricsAccess: settings.metricsToken === "" ? "anyone" : "token" },
        msg: `metrics on ${listenerUrl}, for ${who}; the public port serves no /metrics`,
      };
    }
    case "token":
      return { fields: { metricsAccess: "token" }, msg: `metrics on the public port at /metrics, for ${bearer}` };
    case "anyone":
      return {
        fields: { metricsAccess: "anyone" },
        msg: "metrics on the public port at /metrics, for anyone (PLATFORM_METRICS_PUBLIC=on)",
      };
    case "private":
      return {
        fields: { metricsAccess: "private" },
        msg:
          "metrics are private: /metrics on the public port refuses every caller; to scrape, set PLATFORM_METRICS_TOKEN " +
          "(scrapers send it in the Authorization header), PLATFORM_METRICS_ADDR=host:port (a private address) or PLATFORM_METRICS_PUBLIC=on",
      };
  }
}
