/**
 * gRPC fuzzing: a grpc-js client that sends payload bytes untouched (so
 * garbage reaches the server's decoder), the API's served services, and the
 * check every call's outcome must pass.
 */
import assert from "node:assert/strict";
import type { DescService } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { CONTRACT_FILES } from "../../src/services/index.js";
import { LEAK } from "./fuzz-http.js";
import { grpcStatus } from "./grpc.js";
import type { TestServer } from "./server.js";

/** The outcome of one raw call. */
export interface RawGrpcResult {
  err: grpc.ServiceError | null;
  response?: Buffer;
}

/** A client that sends bytes as they are to any method path. */
export interface RawGrpcClient {
  /** Calls path ("/pkg.Service/Method") with payload; authorization is sent when given. */
  call(path: string, payload: Uint8Array, authorization?: string, deadlineMs?: number): Promise<RawGrpcResult>;
  close(): void;
}

const identity = (b: Buffer) => b;

/** A real grpc-js client over h2c to the one port, with identity (de)serializers. */
export function rawGrpcClient(port: number): RawGrpcClient {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return {
    call(path, payload, authorization, deadlineMs = 15_000) {
      const md = new grpc.Metadata();
      if (authorization !== undefined) md.set("authorization", authorization);
      return new Promise((resolve) => {
        client.makeUnaryRequest(
          path,
          identity,
          identity,
          Buffer.from(payload),
          md,
          { deadline: Date.now() + deadlineMs },
          (err, response) => resolve({ err: err ?? null, response }),
        );
      });
    },
    close: () => client.close(),
  };
}

/** The API services the server serves (health lists each by name), from the contract's files. */
export function servedServices(srv: TestServer): DescService[] {
  const served = new Set(Object.keys(srv.server.health.all()).filter((name) => name !== ""));
  const services = CONTRACT_FILES.flatMap((f) => f.services).filter((s) => served.has(s.typeName));
  assert.deepEqual(services.map((s) => s.typeName).sort(), [...served].sort(), "every served service has a descriptor in CONTRACT_FILES");
  return services;
}

/** Codes that mean the server failed rather than the request. */
const SERVER_FAULTS = new Set([
  grpc.status.UNKNOWN,
  grpc.status.INTERNAL,
  grpc.status.DATA_LOSS,
  grpc.status.UNAVAILABLE,
  grpc.status.DEADLINE_EXCEEDED,
]);

/**
 * Asserts what every gRPC outcome must be: never a server fault (INTERNAL,
 * UNKNOWN, DATA_LOSS, nor UNAVAILABLE or a missed deadline), and every error
 * carrying grpc-status-details-bin: a google.rpc.Status with the same code
 * and exactly one ErrorInfo. Returns the code (0 on success).
 */
export function checkGrpcResult(result: RawGrpcResult): number {
  const { err } = result;
  if (!err) return 0;
  assert.ok(!SERVER_FAULTS.has(err.code), `gRPC ${grpc.status[err.code]}: ${err.details}`);
  let status: ReturnType<typeof grpcStatus>;
  try {
    status = grpcStatus(err);
  } catch (e) {
    assert.fail(`gRPC ${grpc.status[err.code]} (${err.details}) without a decodable grpc-status-details-bin: ${String(e)}`);
  }
  assert.equal(status.code, err.code, "the Status code is the call's code");
  assert.equal(status.message, err.details, "the Status message is the call's message");
  const infos = status.details.filter((d) => d.$typeName === "google.rpc.ErrorInfo");
  assert.equal(infos.length, 1, `exactly one ErrorInfo in ${JSON.stringify(status.details.map((d) => d.$typeName))}`);
  assert.ok(!LEAK.test(err.details), `internals in a gRPC error message: ${err.details}`);
  return err.code;
}
