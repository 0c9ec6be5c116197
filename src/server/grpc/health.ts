import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  HealthCheckResponseSchema,
  HealthListResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type Health,
  type HealthCheckResponse,
  type HealthListResponse,
} from "../../../gen/grpc/health/v1/health_pb.js";

export { ServingStatus };

/** How long a Watch stream lasts by default (PLATFORM_HEALTH_WATCH_MAX_MS). */
export const DEFAULT_WATCH_MAX_MS = 30 * 60_000;

/**
 * The server's health: SERVING from start until the drain begins, then
 * NOT_SERVING for the server and every service at once, so load balancers
 * stop sending calls before the listener closes (PLATFORM_DRAIN_MS later).
 * Read by grpc.health.v1 (Check, Watch, List) and /readyz.
 */
export class HealthState {
  private serving = true;
  private readonly watchers = new Set<(status: ServingStatus) => void>();

  /**
   * watchMaxMs bounds every Watch stream: Health takes no token, and a stream
   * that never ends would keep its connection from ever idling out.
   */
  constructor(
    private readonly serviceNames: readonly string[],
    readonly watchMaxMs: number = DEFAULT_WATCH_MAX_MS,
  ) {}

  /** The status of a service ("" = the whole server), or undefined for an unknown service. */
  status(service: string): ServingStatus | undefined {
    if (service !== "" && !this.serviceNames.includes(service)) return undefined;
    return this.serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  }

  /** Every known service and its status, the server itself under "". */
  all(): Record<string, ServingStatus> {
    const out: Record<string, ServingStatus> = {};
    for (const name of ["", ...this.serviceNames]) out[name] = this.status(name)!;
    return out;
  }

  /** Marks the server and every service NOT_SERVING and tells every watcher. */
  shutdown(): void {
    if (!this.serving) return;
    this.serving = false;
    for (const w of this.watchers) w(ServingStatus.NOT_SERVING);
  }

  /** Calls fn on every change until the returned function is called. */
  watch(fn: (status: ServingStatus) => void): () => void {
    this.watchers.add(fn);
    return () => this.watchers.delete(fn);
  }
}

/**
 * grpc.health.v1.Health over a HealthState: the one implementation both
 * transports serve (Connect and gRPC-Web through the router, native gRPC
 * through grpc-js). Check of an unknown service is NOT_FOUND; Watch of one
 * answers SERVICE_UNKNOWN, as the health protocol says. A Watch stream ends
 * normally after health.watchMaxMs; health-checking clients (grpc-go's, for
 * one) then simply watch again, on a connection that could meanwhile close.
 */
export function healthService(health: HealthState) {
  return {
    check(req: { service: string }): HealthCheckResponse {
      const status = health.status(req.service);
      if (status === undefined) throw new ConnectError(`unknown service ${req.service}`, Code.NotFound);
      return create(HealthCheckResponseSchema, { status });
    },
    /** The status now, then every change, until signal aborts or watchMaxMs has passed. */
    async *watch(req: { service: string }, ctx: { signal: AbortSignal }): AsyncGenerator<HealthCheckResponse> {
      const statusNow = () => health.status(req.service) ?? ServingStatus.SERVICE_UNKNOWN;
      const changes: ServingStatus[] = [];
      let wake: (() => void) | undefined;
      let expired = false;
      const deadline = setTimeout(() => {
        expired = true;
        wake?.();
      }, health.watchMaxMs).unref();
      // A service this server does not know stays SERVICE_UNKNOWN whatever the server's own status.
      const stop = health.watch(() => {
        changes.push(statusNow());
        wake?.();
      });
      const onAbort = () => wake?.();
      ctx.signal.addEventListener("abort", onAbort);
      try {
        let sent = statusNow();
        yield create(HealthCheckResponseSchema, { status: sent });
        while (!ctx.signal.aborted && !expired) {
          if (changes.length === 0) await new Promise<void>((resolve) => (wake = resolve));
          const status = changes.shift();
          if (status === undefined || status === sent) continue;
          sent = status;
          yield create(HealthCheckResponseSchema, { status });
        }
      } finally {
        clearTimeout(deadline);
        stop();
        ctx.signal.removeEventListener("abort", onAbort);
      }
    },
    list(): HealthListResponse {
      const statuses = Object.fromEntries(Object.entries(health.all()).map(([k, status]) => [k, { status }]));
      return create(HealthListResponseSchema, { statuses });
    },
  } satisfies ServiceImpl<typeof Health>;
}
