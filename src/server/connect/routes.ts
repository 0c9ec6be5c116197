import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { Health } from "../../../gen/grpc/health/v1/health_pb.js";
import { healthService, type HealthState } from "../grpc/health.js";
import type { WrappedService } from "../wrap.js";

/**
 * Connect and gRPC-Web routes: every wrapped service, and health. (Reflection
 * is a bidi stream, which Connect cannot serve over HTTP/1.1; gRPC clients
 * reach it over h2c through grpc-js.)
 */
export function registerConnect(router: ConnectRouter, services: readonly WrappedService[], health: HealthState): void {
  for (const svc of services) router.service(svc.service as DescService, svc.handlers as never);
  router.service(Health, healthService(health));
}
