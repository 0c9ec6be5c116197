import { create, createRegistry, fromBinary, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { defaultToken } from "./server.js";

const detailRegistry = createRegistry(file_google_rpc_error_details);

/** A promisified grpc-js client for one service: client.call("getGroup", request); a server stream resolves to its messages. */
export interface GrpcTestClient {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  call(method: string, request: any, metadata?: Record<string, string>): Promise<any>;
  close(): void;
}

/**
 * A real @grpc/grpc-js client over h2c to the one port. Calls send the port's
 * default token (see test/support/server.ts) unless given a token ("" for none).
 */
export function grpcClient(service: DescService, port: number, opts: { token?: string } = {}): GrpcTestClient {
  const definition: grpc.ServiceDefinition = {};
  for (const m of service.methods) (definition as Record<string, unknown>)[m.localName] = methodDefinition(service, m);
  const Ctor = grpc.makeGenericClientConstructor(definition, service.typeName);
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return {
    call(method, request, metadata = {}) {
      const md = new grpc.Metadata();
      const token = opts.token ?? defaultToken(port);
      if (token) md.set("authorization", `Bearer ${token}`);
      for (const [k, v] of Object.entries(metadata)) md.set(k, v);
      const m = service.methods.find((x) => x.localName === method);
      if (!m) throw new Error(`no method ${method}`);
      if (m.methodKind === "server_streaming") {
        // A stream's messages, collected until it ends; its error rejects as a unary call's does.
        return new Promise((resolve, reject) => {
          const messages: unknown[] = [];
          // eslint-disable-next-line @typescript-eslint/no-explicit-any
          const stream = (client as any)[method](createRequest(m.input, request), md) as grpc.ClientReadableStream<unknown>;
          stream.on("data", (message) => messages.push(message));
          stream.on("error", reject);
          stream.on("end", () => resolve(messages));
        });
      }
      return new Promise((resolve, reject) => {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (client as any)[method](createRequest(m.input, request), md, (err: grpc.ServiceError | null, res: unknown) =>
          err ? reject(err) : resolve(res),
        );
      });
    },
    close: () => client.close(),
  };
}

function createRequest(schema: DescMessage, value: unknown) {
  return create(schema, value as never);
}

/** The google.rpc.Status in a grpc-js error's grpc-status-details-bin, with details unpacked. */
export function grpcStatus(err: grpc.ServiceError) {
  const bin = err.metadata.get("grpc-status-details-bin")[0];
  if (!(bin instanceof Buffer)) throw new Error("no grpc-status-details-bin");
  const status = fromBinary(StatusSchema, bin);
  return { code: status.code, message: status.message, details: status.details.map((d) => anyUnpack(d, detailRegistry)!) };
}
