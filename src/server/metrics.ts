import { createHash, timingSafeEqual } from "node:crypto";
import { Registry, collectDefaultMetrics } from "prom-client";
import type { Store } from "../store/store.js";
import { SeriesCounter, SeriesGauge, SeriesHistogram } from "./series-metrics.js";

/** The server's Prometheus metrics, served at /metrics. Label values are passed in labelNames order. */
export class Metrics {
  readonly registry = new Registry();
  /** service, method, protocol, code */
  readonly requests = new SeriesCounter(
    "platform_requests_total",
    "RPCs handled, by service, method, protocol and gRPC status code name",
    ["service", "method", "protocol", "code"],
    this.registry,
  );
  /** service, method, protocol */
  readonly latency = new SeriesHistogram(
    "platform_request_duration_seconds",
    "RPC handling time, by service, method and protocol",
    ["service", "method", "protocol"],
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    this.registry,
  );
  /** protocol */
  readonly inFlight = new SeriesGauge("platform_requests_in_flight", "RPCs being handled now, by protocol", ["protocol"], this.registry);
  /** part, operation */
  readonly storeTime = new SeriesHistogram(
    "platform_store_query_duration_seconds",
    "Time spent in store calls, by store part and operation",
    ["part", "operation"],
    [0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25],
    this.registry,
  );
  /** result */
  readonly tokenCache = new SeriesCounter(
    "platform_token_cache_total",
    "API token verifications, by result: hit (served from the verified-token cache) or miss",
    ["result"],
    this.registry,
  );

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "platform_" });
  }
}

/**
 * Whether an Authorization header may read /metrics: always when no metrics
 * token is configured, else only "Bearer <token>". Both sides are hashed
 * first, so the comparison takes the same time whatever the length or the
 * first differing byte of a guess.
 */
export function metricsTokenMatches(authorization: string | undefined, token: string): boolean {
  if (token === "") return true;
  const m = /^Bearer (\S+)$/i.exec(authorization ?? "");
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(m?.[1] ?? ""), digest(token)) && m !== null;
}

/**
 * Wraps every store part so each call's duration lands in the store-time
 * histogram. Parts keep their interface; only functions are wrapped.
 */
export function instrumentStore(store: Store, metrics: Metrics): Store {
  const parts = ["groups", "identities", "roles", "roleBindings", "identityProviders", "accountAssociations", "groupInvites", "repos", "tags", "advisories", "keys"] as const;
  const out: Record<string, unknown> = { ...store };
  for (const part of parts) {
    const target = (store as unknown as Record<string, object | undefined>)[part];
    if (target) out[part] = timedPart(part, target, metrics);
  }
  // Methods of the store itself keep their binding to the real store.
  out.transaction = store.transaction.bind(store);
  out.ready = store.ready.bind(store);
  out.close = store.close.bind(store);
  out.authzVersion = store.authzVersion.bind(store);
  return out as unknown as Store;
}

/** The part with each of its methods timed; other properties read through to it. */
function timedPart(part: string, target: object, metrics: Metrics): object {
  const timed = Object.create(target) as Record<string, unknown>;
  for (let proto = Object.getPrototypeOf(target) as object | null; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as object | null) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      // Methods only (getters and fields read through); the most derived definition wins.
      if (name === "constructor" || typeof Object.getOwnPropertyDescriptor(proto, name)?.value !== "function" || Object.hasOwn(timed, name)) continue;
      // Read through the part itself, which may be a wrapper (a Proxy) of its own.
      const method = (target as Record<string, unknown>)[name];
      timed[name] = (...args: unknown[]) => {
        const start = performance.now();
        try {
          return (method as (...a: unknown[]) => unknown).apply(target, args);
        } finally {
          metrics.storeTime.observe((performance.now() - start) / 1000, part, name);
        }
      };
    }
  }
  return timed;
}
