import { HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";

export { ServingStatus };

/**
 * The server's health: SERVING from start until shutdown begins, then
 * NOT_SERVING, so load balancers stop sending calls before the listener closes.
 * Read by grpc.health.v1 (Check, Watch, List), /healthz and /readyz.
 */
export class HealthState {
  private serving = true;
  private readonly watchers = new Set<(status: ServingStatus) => void>();

  constructor(private readonly serviceNames: readonly string[]) {}

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

  /** Marks the server NOT_SERVING and tells every watcher. */
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
