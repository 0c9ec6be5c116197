import { fromBinary, toBinary, type Message } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  type ServerReflectionRequest,
} from "../../../gen/grpc/reflection/v1/reflection_pb.js";
import { ApiError } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, messageTooLarge, toConnectError, undecodableRequest } from "../errors.js";
import { grpcError, methodDefinition } from "./adapter.js";
import { Reflector, type ReflectionSchema } from "./reflection.js";

/**
 * A reflection stream is open to anyone, so what one stream may cost is
 * bounded here: one answer in flight (the next request is read only once the
 * previous answer was handed to HTTP/2, so a client that stops reading stops
 * being read, its flow-control window closes, and nothing queues), a small
 * request size, a number of requests and a lifetime.
 */
export interface ReflectionStreamLimits {
  /** Requests one stream may make; the next ends it with RESOURCE_EXHAUSTED (REFLECTION_REQUEST_LIMIT). */
  maxRequests: number;
  /** How long one stream may stay open; then it ends with UNAVAILABLE (REFLECTION_STREAM_EXPIRED). */
  lifetimeMs: number;
}

/** ErrorInfo.reason of a reflection stream that made more than maxRequests requests. */
export const REFLECTION_REQUEST_LIMIT = "REFLECTION_REQUEST_LIMIT";
/** ErrorInfo.reason of a reflection stream open longer than its lifetime. */
export const REFLECTION_STREAM_EXPIRED = "REFLECTION_STREAM_EXPIRED";

/**
 * Requests per stream: grpcurl, buf curl and grpcui make one to a few dozen
 * (list, then one per service or symbol not yet answered; every answer brings
 * the file's imports along), and their reflection clients open a new stream
 * when one ends. Each request a client has sent and the server not yet answered
 * is held decoded (about 250 bytes), so this also bounds that queue.
 */
export const DEFAULT_MAX_REFLECTION_REQUESTS = 100;

/**
 * The largest reflection request: symbol and file names are far shorter.
 * The answer echoes the request (and its host), so a larger one would only
 * let a client double its own bytes.
 */
export const MAX_REFLECTION_REQUEST_BYTES = 4096;

/** What the deserializer hands the handler instead of a request it refused. */
const TOO_LARGE = Symbol("too large");
const UNDECODABLE = Symbol("undecodable");
type Incoming = ServerReflectionRequest | typeof TOO_LARGE | typeof UNDECODABLE;

/** The ServerReflectionInfo method served under a service name (v1 and the wire-identical v1alpha use the v1 messages). */
export function reflectionMethod(serviceName: string): grpc.MethodDefinition<Incoming, unknown> {
  const method = ServerReflection.methods[0]!;
  const { responseSerialize, responseDeserialize } = methodDefinition(ServerReflection, method);
  return {
    path: `/${serviceName}/${method.name}`,
    requestStream: true,
    responseStream: true,
    originalName: method.localName,
    responseSerialize,
    responseDeserialize,
    // Clients' side only; the server never encodes a request.
    requestSerialize: (m: Incoming) => Buffer.from(toBinary(ServerReflectionRequestSchema, m as ServerReflectionRequest)),
    requestDeserialize: (buf: Buffer): Incoming => {
      if (buf.length > MAX_REFLECTION_REQUEST_BYTES) return TOO_LARGE;
      try {
        return fromBinary(ServerReflectionRequestSchema, buf);
      } catch {
        return UNDECODABLE;
      }
    },
  };
}

/** The handler of one reflection stream, held to `limits`. */
export function reflectionHandler(
  schema: ReflectionSchema,
  limits: ReflectionStreamLimits,
): grpc.handleBidiStreamingCall<Incoming, Message> {
  return (call) => {
    const reflector = new Reflector(schema);
    let requests = 0;
    let ended = false;
    const finish = (err?: ConnectError) => {
      if (ended) return;
      ended = true;
      clearTimeout(lifetime);
      // Read nothing more: a client still sending meets a closed window instead of being decoded and ignored.
      call.pause();
      // The status follows the answers already written, as gRPC orders them.
      if (err) call.emit("error", grpcError(err));
      else call.end();
    };
    const lifetime = setTimeout(
      () =>
        finish(
          refusal(Code.Unavailable, REFLECTION_STREAM_EXPIRED, `Reflection streams last at most ${limits.lifetimeMs} ms; open a new one`),
        ),
      limits.lifetimeMs,
    );
    lifetime.unref();
    call.on("data", (req: Incoming) => {
      if (ended) return;
      if (req === TOO_LARGE) return finish(messageTooLarge(MAX_REFLECTION_REQUEST_BYTES));
      if (req === UNDECODABLE) return finish(toConnectError(undecodableRequest(ServerReflectionRequestSchema), DEFAULT_ERROR_DOMAIN));
      if (++requests > limits.maxRequests) {
        return finish(
          refusal(
            Code.ResourceExhausted,
            REFLECTION_REQUEST_LIMIT,
            `A reflection stream takes at most ${limits.maxRequests} requests; open a new one`,
          ),
        );
      }
      call.pause();
      call.write(reflector.answer(req), () => {
        if (!ended) call.resume();
      });
    });
    call.on("end", () => finish());
    // A cancelled call writes nothing more; only the timer is left to clear.
    call.on("cancelled", () => {
      ended = true;
      clearTimeout(lifetime);
    });
  };
}

function refusal(code: Code, reason: string, message: string): ConnectError {
  return toConnectError(new ApiError(code, reason, message), DEFAULT_ERROR_DOMAIN);
}
