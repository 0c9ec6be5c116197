import type http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
} from "../../gen/grpc/health/v1/health_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { grpcPrefix } from "./raw-h2.js";

export { ServingStatus };

/** A grpc.health.v1 Watch of one service ("" for the server) over h2c. */
export interface HealthWatch {
  /** Every status the server sent, in order. */
  statuses: ServingStatus[];
  /** Resolves once the server has sent status (at once if it already has). */
  next(status: ServingStatus): Promise<void>;
  /** Cancels the watch and closes its client; safe to call twice. */
  close(): void;
}

/** Watches the health of service on port: what a balancer's gRPC health check sees. */
export function watchHealth(port: number, service = ""): HealthWatch {
  const Ctor = grpc.makeGenericClientConstructor({ watch: methodDefinition(Health, Health.method.watch) }, "Health");
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const statuses: ServingStatus[] = [];
  const waiters: { status: ServingStatus; resolve: () => void }[] = [];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const call = (client as any).watch(create(HealthCheckRequestSchema, { service })) as grpc.ClientReadableStream<{ status: ServingStatus }>;
  call.on("data", (res: { status: ServingStatus }) => {
    statuses.push(res.status);
    for (const w of waiters.filter((w) => w.status === res.status)) w.resolve();
  });
  call.on("error", () => {}); // CANCELLED when we stop watching, UNAVAILABLE when the server goes first
  return {
    statuses,
    next: (status) => (statuses.includes(status) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ status, resolve }))),
    close() {
      call.cancel();
      client.close();
    },
  };
}

/** A raw gRPC Health/Watch of the server ("" service) on an HTTP/2 session, its request sent (errors ignored: the test reads the stream). */
export function requestHealthWatch(session: http2.ClientHttp2Session): http2.ClientHttp2Stream {
  const stream = session.request({
    ":method": "POST",
    ":path": "/grpc.health.v1.Health/Watch",
    "content-type": "application/grpc",
    te: "trailers",
  });
  stream.on("error", () => {});
  const message = toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "" }));
  stream.end(Buffer.concat([grpcPrefix(message.length), message]));
  return stream;
}
