import { fromBinary, toBinary, type DescMethod, type DescService, type Message } from "@bufbuild/protobuf";
import { createContextValues, type ConnectError } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { clientAddressKey } from "../../auth/principal.js";
import { asMessage, encodeMessage } from "../../codec/binary.js";
import { lightContext } from "../context.js";
import { areaErrorDomain, grpcStatusDetails, toConnectError, undecodableRequest, type InternalErrorSink } from "../errors.js";
import { createClientAddresses, type ClientAddresses } from "../http/client-address.js";
import { HeaderView } from "../http/header-view.js";
import { requestIdFrom } from "../http/request-id.js";
import { callSignal, isStreamHandler, requestIdKey, type UnaryHandler, type WrappedStreamHandler } from "../wrap.js";

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
 * every unary and server-streaming method calls the same wrapped handler as
 * REST and Connect; clients says who each call's client is (clientAddressKey).
 */
export function grpcService(
  svc: { service: DescService; handlers: Record<string, UnaryHandler | WrappedStreamHandler> },
  onInternal?: InternalErrorSink,
  clients: ClientAddresses = createClientAddresses(),
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<Decoded, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  const domain = areaErrorDomain(svc.service.typeName);
  for (const method of svc.service.methods) {
    const handler = svc.handlers[method.localName];
    if (!handler) continue;
    const path = `/${svc.service.typeName}/${method.name}`;
    if (isStreamHandler(handler)) {
      if (method.methodKind !== "server_streaming") continue;
      definition[method.localName] = methodDefinition(svc.service, method);
      implementation[method.localName] = serverStream(method, path, handler, { domain, onInternal, clients });
      continue;
    }
    if (method.methodKind !== "unary") continue;
    definition[method.localName] = methodDefinition(svc.service, method);
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
      const ctx = callContext(call, method, path, clients, signal);
      handler(call.request, ctx).then((result) => {
        finished = true;
        callback(null, asMessage(method.output, result));
      }, fail);
    };
  }
  return { definition, implementation };
}

/**
 * The context of a grpc-js call (unary or server-streaming), its request id
 * sent back first in the response headers, as on every protocol.
 */
function callContext(
  call: grpc.ServerUnaryCall<Decoded, unknown> | grpc.ServerWritableStream<Decoded, unknown>,
  method: DescMethod,
  path: string,
  clients: ClientAddresses,
  signal: () => AbortSignal,
): ReturnType<typeof lightContext> {
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
  return ctx;
}

/**
 * A server-streaming method on grpc-js: each message is asked of the
 * handler only once the one before is taken by HTTP/2 (write() returned
 * true, or 'drain'), so a client that stops reading stops the handler after
 * grpc-js's buffer of 16 messages, never a page more.
 */
function serverStream(
  method: DescMethod,
  path: string,
  handler: WrappedStreamHandler,
  opts: { domain: string; onInternal?: InternalErrorSink; clients: ClientAddresses },
): grpc.handleServerStreamingCall<Decoded, unknown> {
  return (call) => {
    let finished = false;
    const gone = () => finished || call.cancelled || call.destroyed;
    const fail = (err: unknown) => {
      if (gone()) return;
      finished = true;
      call.emit("error", grpcError(toConnectError(err, opts.domain, opts.onInternal)));
    };
    if (call.request === UNDECODABLE) return fail(undecodableRequest(method.input));
    const signal = () => {
      if (gone()) return AbortSignal.abort();
      return callSignal(
        ctx.timeoutMs(),
        (end) => call.once("cancelled", end),
        () => finished,
      );
    };
    const ctx = callContext(call, method, path, opts.clients, signal);
    const messages = handler(call.request, ctx)[Symbol.asyncIterator]();
    void (async () => {
      try {
        for (let next = await messages.next(); !next.done; next = await messages.next()) {
          if (gone()) break;
          if (!call.write(asMessage(method.output, next.value))) await drained(call);
          if (gone()) break;
        }
      } catch (err) {
        return fail(err);
      }
      if (gone()) {
        // The client went away: the handler is told (its call is recorded canceled).
        await messages.return?.(undefined);
        return;
      }
      finished = true;
      call.end();
    })().catch((err: unknown) => opts.onInternal?.(err));
  };
}

/** Resolves once the call's buffer has room again, or the call is over. */
function drained(call: grpc.ServerWritableStream<Decoded, unknown>): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      call.off("drain", done);
      call.off("cancelled", done);
      call.off("close", done);
      resolve();
    };
    call.once("drain", done);
    call.once("cancelled", done);
    call.once("close", done);
  });
}
