import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { DescService } from "@bufbuild/protobuf";
import type { ServiceError } from "@grpc/grpc-js";
import type { BadRequest } from "../../gen/google/rpc/error_details_pb.js";
import { grpcClient, grpcStatus, type GrpcTestClient } from "./grpc.js";
import { createGroup, type TestServer } from "./server.js";

/**
 * Declares a resource service's round trip over native gRPC: one test,
 * called what, given a client of the service (closed afterwards, whatever
 * happens) and a fresh organization.
 */
export function describeOverGrpc(
  srv: TestServer,
  service: DescService,
  what: string,
  run: (client: GrpcTestClient, org: string) => Promise<void>,
): void {
  describe(`${service.name} over native gRPC`, () => {
    test(what, async () => {
      const client = grpcClient(service, srv.port);
      try {
        await run(client, (await createGroup(srv.url, null, `grpc ${service.name.toLowerCase()}`)).uid);
      } finally {
        client.close();
      }
    });
  });
}

/** Awaits a gRPC call that must fail and returns its error. */
export function grpcError(call: Promise<unknown>): Promise<ServiceError> {
  return call.then(
    () => assert.fail("the call succeeded"),
    (e: ServiceError) => e,
  );
}

/** The fields a gRPC error's BadRequest detail names. */
export function grpcViolations(err: ServiceError): string[] | undefined {
  const badRequest = grpcStatus(err).details.find((d) => d.$typeName === "google.rpc.BadRequest") as BadRequest | undefined;
  return badRequest?.fieldViolations.map((v) => v.field);
}
