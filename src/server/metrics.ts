import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { Store } from "../store/store.js";

/** The server's Prometheus metrics, served at /metrics. */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: "platform_requests_total",
    help: "RPCs handled, by service, method, protocol and gRPC status code name",
    labelNames: ["service", "method", "protocol", "code"] as const,
    registers: [this.registry],
  });
  readonly latency = new Histogram({
    name: "platform_request_duration_seconds",
    help: "RPC handling time, by service, method and protocol",
    labelNames: ["service", "method", "protocol"] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [this.registry],
  });
  readonly inFlight = new Gauge({
    name: "platform_requests_in_flight",
    help: "RPCs being handled now, by protocol",
    labelNames: ["protocol"] as const,
    registers: [this.registry],
  });
  readonly storeTime = new Histogram({
    name: "platform_store_query_duration_seconds",
    help: "Time spent in store calls, by store part and operation",
    labelNames: ["part", "operation"] as const,
    buckets: [0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25],
    registers: [this.registry],
  });
  readonly tokenCache = new Counter({
    name: "platform_token_cache_total",
    help: "API token verifications, by result: hit (served from the verified-token cache) or miss",
    labelNames: ["result"] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: "platform_" });
  }
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
    if (!target) continue;
    out[part] = new Proxy(target, {
      get(obj, prop, receiver) {
        const value = Reflect.get(obj, prop, receiver);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          const end = metrics.storeTime.startTimer({ part, operation: String(prop) });
          try {
            return value.apply(obj, args);
          } finally {
            end();
          }
        };
      },
    });
  }
  // Methods of the store itself keep their binding to the real store.
  out.transaction = store.transaction.bind(store);
  out.ready = store.ready.bind(store);
  out.close = store.close.bind(store);
  out.authzVersion = store.authzVersion.bind(store);
  return out as unknown as Store;
}
