import { fromBinary, toBinary, type DescMethod, type DescService, type Message } from "@bufbuild/protobuf";
import { createContextValues, type ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { clientAddressKey } from "../../auth/principal.js";
import { asMessage, encodeMessage } from "../codec/binary.js";
import { lightContext } from "../context.js";
import { areaErrorDomain, grpcStatusDetails, toConnectError, undecodableRequest, type InternalErrorSink } from "../errors.js";
import { createClientAddresses, type ClientAddresses } from "../http/client-address.js";
import { HeaderView } from "../http/header-view.js";
import { requestIdFrom } from "../http/request-id.js";
import { callSignal, requestIdKey, type UnaryHandler } from "../wrap.js";

/** A request that failed to decode, carried to the handler so it can answer INVALID_ARGUMENT. */
const UNDECODABLE = Symbol("undecodable");
type Decoded = Message | typeof UNDECODABLE;

/** Serializers from protobuf-es descriptors: no copies, and no throw inside grpc-js. */
export function methodDefinition(service: DescService, method: DescMethod): grpc.MethodDefinition<Decoded, unknown> {
  return {
    path: `/${service.typeName}/${method.name}`,
    requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
    responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
    requestSerialize: (m: Decoded) => toBuffer(toBinary(method.input, m as Message)),
    requestDeserialize: (buf: Buffer) => {
      try {
        return fromBinary(method.input, buf);
      } catch {
        return UNDECODABLE;
      }
    },
    responseSerialize: (m: unknown) => toBuffer(encodeMessage(method.output, asMessage(method.output, m))),
    responseDeserialize: (buf: Buffer) => fromBinary(method.output, buf),
    originalName: method.localName,
  };
}

function toBuffer(u8: Uint8Array): Buffer {
  return Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);
}

/** The gRPC form of an error: code, message and google.rpc.Status in grpc-status-details-bin. */
export function grpcError(err: ConnectError): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  metadata.set("grpc-status-details-bin", toBuffer(grpcStatusDetails(err)));
  return { code: err.code as number as grpc.status, details: err.rawMessage, metadata };
}

/** What a native gRPC entry point (grpc-js's or the unary fast path) knows of a call. */
export interface GrpcCallInit {
  method: DescMethod;
  /** The method's path, /package.Service/Method. */
  path: string;
  requestHeader: Headers;
  requestId: string;
  clientAddress: string;
  /** Made only when a handler asks: aborted when the client cancels and at the deadline. */
  signal: () => AbortSignal;
  timeoutMs: number | undefined;
}

/**
 * The handler context of a native gRPC call, the same whichever path
 * serves it, so the handler, the metrics and the log line see one protocol.
 */
export function grpcCallContext(init: GrpcCallInit): ReturnType<typeof lightContext> {
  return lightContext({
    service: init.method.parent,
    method: init.method,
    protocolName: "grpc",
    requestMethod: "POST",
    url: init.path,
    requestHeader: init.requestHeader,
    signal: init.signal,
    timeoutMs: init.timeoutMs,
    values: createContextValues().set(requestIdKey, init.requestId).set(clientAddressKey, init.clientAddress),
  });
}

/**
 * A grpc-js service definition and implementation for one wrapped service:
 * every unary method calls the same wrapped handler as REST and Connect;
 * clients says who each call's client is (clientAddressKey).
 */
export function grpcService(
  svc: { service: DescService; handlers: Record<string, UnaryHandler> },
  onInternal?: InternalErrorSink,
  clients: ClientAddresses = createClientAddresses(),
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<Decoded, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  const domain = areaErrorDomain(svc.service.typeName);
  for (const method of svc.service.methods) {
    const handler = svc.handlers[method.localName];
    if (!handler || method.methodKind !== "unary") continue;
    definition[method.localName] = methodDefinition(svc.service, method);
    const path = `/${svc.service.typeName}/${method.name}`;
    implementation[method.localName] = (call: grpc.ServerUnaryCall<Decoded, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      // grpc-js ≥1.10 emits 'cancelled' at the end of every call, successful
      // ones included: only a call still running is really cancelled.
      let finished = false;
      // The abort signal, and the listener and deadline timer behind it, exist only once a handler asks:
      // aborted when the client cancels and at the call's deadline.
      const signal = () => {
        if (call.cancelled && !finished) return AbortSignal.abort();
        return callSignal(
          ctx.timeoutMs(),
          (end) => call.once("cancelled", end),
          () => finished,
        );
      };
      const fail = (err: unknown) => {
        finished = true;
        callback(grpcError(toConnectError(err, domain, onInternal)));
      };
      if (call.request === UNDECODABLE) {
        fail(undecodableRequest(method.input));
        return;
      }
      const requestId = requestIdFrom(call.metadata.get("x-request-id")[0] as string | undefined);
      const deadline = call.getDeadline();
      const timeoutMs =
        deadline instanceof Date ? deadline.getTime() - Date.now() : Number.isFinite(deadline) ? deadline - Date.now() : undefined;
      const ctx = grpcCallContext({
        method,
        path,
        requestHeader: HeaderView.ofGrpcMetadata(call.metadata),
        requestId,
        clientAddress: clients.ofGrpcCall(call.getPeer(), call.metadata),
        signal,
        timeoutMs,
      });
      const headers = new grpc.Metadata();
      headers.set("x-request-id", requestId);
      call.sendMetadata(headers);
      handler(call.request, ctx).then((result) => {
        finished = true;
        callback(null, asMessage(method.output, result));
      }, fail);
    };
  }
  return { definition, implementation };
}
