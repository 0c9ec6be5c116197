import type http2 from "node:http2";
import zlib from "node:zlib";
import { fromBinary, type DescMethod, type Message } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { asMessage, encodeMessage } from "../../codec/binary.js";
import {
  areaErrorDomain,
  grpcMessageHeader,
  grpcStatusDetails,
  toConnectError,
  undecodableRequest,
  type InternalErrorSink,
} from "../errors.js";
import { createClientAddresses, type ClientAddresses } from "../http/client-address.js";
import { HeaderView } from "../http/header-view.js";
import { requestIdFrom } from "../http/request-id.js";
import { callSignal, type WrappedHandler, type WrappedService } from "../wrap.js";
import { grpcCallContext } from "./adapter.js";

/**
 * Native gRPC unary calls of the API services, served on the HTTP/2 stream
 * without grpc-js: its call machinery (interceptor chain, Metadata objects,
 * stream decoder, per-call timers and events) cost more server CPU per call
 * than the whole REST path for the same handler. The call reaches the same
 * wrapped handler with the same context (grpcCallContext), so metrics and
 * the log line are grpc-js's path's; what grpc-js answers on its own (a
 * second message, none, one too large, an unknown compression, a bad
 * grpc-timeout, the deadline) is answered here in the same codes and words,
 * and http2.ts adds the same google.rpc.Status to those. Health, reflection,
 * streaming methods and unknown paths stay with grpc-js.
 */

/**
 * The streams whose call reached its handler (which logs and counts it): a
 * stream answered before that (a malformed message, a bad grpc-timeout, the
 * deadline while the message was still arriving) is logged by the server's
 * request log instead.
 */
export const handledStreams = new WeakSet<http2.ServerHttp2Stream>();

/** Serves one native gRPC stream whose :path is a unary API method. */
export type GrpcUnaryCall = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void;

export interface GrpcUnaryOptions {
  /** The largest request message, counted after decompression. */
  maxMessageBytes: number;
  onInternal?: InternalErrorSink;
  clients?: ClientAddresses;
}

/** The fast path's call for each unary method path of services (undefined for any other path). */
export function grpcUnaryCalls(services: readonly WrappedService[], opts: GrpcUnaryOptions): (path: string) => GrpcUnaryCall | undefined {
  const calls = new Map<string, GrpcUnaryCall>();
  const clients = opts.clients ?? createClientAddresses();
  for (const svc of services) {
    const domain = areaErrorDomain(svc.service.typeName);
    for (const method of svc.service.methods) {
      const handler = svc.handlers[method.localName];
      // Server streams are grpc-js's (adapter.ts).
      if (!handler || handler.kind === "server_streaming" || method.methodKind !== "unary") continue;
      const route: Route = { ...opts, method, handler, domain, path: `/${svc.service.typeName}/${method.name}`, clients };
      // serve answers every error it can; what is left (a write on a stream torn down meanwhile) is reported.
      calls.set(route.path, (stream, headers) => void serve(stream, headers, route).catch((err) => route.onInternal?.(err)));
    }
  }
  return (path) => calls.get(path);
}

interface Route extends GrpcUnaryOptions {
  method: DescMethod;
  handler: WrappedHandler;
  domain: string;
  path: string;
  clients: ClientAddresses;
}

/** What grpc-js's server answers alongside its own headers. */
const RESPONSE_HEADERS = {
  ":status": 200,
  "content-type": "application/grpc+proto",
  "grpc-accept-encoding": "identity,deflate,gzip",
  "grpc-encoding": "identity",
};

const TIMEOUT = /(\d{1,8})\s*([HMSmun])/;
const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

async function serve(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, route: Route): Promise<void> {
  const { method, handler, path } = route;
  const answer = new Answer(stream);
  const body = new UnaryBody(stream, route.maxMessageBytes, path);
  const timeout = headers["grpc-timeout"];
  let timeoutMs: number | undefined;
  if (timeout !== undefined) {
    const match = TIMEOUT.exec(String(timeout));
    if (match === null) {
      body.stop();
      return answer.status(Code.Internal, `Invalid grpc-timeout value "${timeout}"`);
    }
    timeoutMs = (Number(match[1]) * TIMEOUT_UNIT_MS[match[2]!]!) | 0;
    // grpc-js ends the call at its deadline, whatever the handler is doing; so does this.
    const timer = setTimeout(() => answer.status(Code.DeadlineExceeded, "Deadline exceeded"), timeoutMs);
    stream.once("close", () => clearTimeout(timer));
  }
  const requestId = requestIdFrom(headers["x-request-id"]);
  const session = stream.session;
  // The handler's own answer, not the deadline's: a stream that closes while the handler runs aborts its signal.
  let handled = false;
  const ctx = grpcCallContext({
    method,
    path,
    requestHeader: HeaderView.ofNode(headers),
    requestId,
    clientAddress: session ? route.clients.ofRequest({ socket: session.socket, headers }) : "",
    signal: () =>
      callSignal(
        ctx.timeoutMs(),
        (end) => stream.once("close", end),
        () => handled,
      ),
    timeoutMs,
  });
  try {
    // No admission before the body (handler.admit): grpc-js's path reads the message first, and clients
    // count on that order (a message over the limit is RESOURCE_EXHAUSTED, token or not); the
    // per-connection and per-address byte budgets bound what is read. The handler authenticates.
    const envelope = await body.message;
    if (envelope === undefined) return;
    // Almost every message is uncompressed: no promise for those.
    const bytes =
      envelope[0] === 1 ? await inflated(envelope, firstOf(headers["grpc-encoding"]), route.maxMessageBytes) : envelope.subarray(5);
    let request: Message;
    try {
      request = fromBinary(method.input, bytes);
    } catch {
      return answer.error(toConnectError(undecodableRequest(method.input), route.domain, route.onInternal));
    }
    let result: unknown;
    handledStreams.add(stream);
    try {
      result = await handler(request, ctx);
    } finally {
      handled = true;
    }
    const output = encodeMessage(method.output, asMessage(method.output, result));
    answer.message(output, requestId, ctx.setResponseHeaders());
  } catch (err) {
    if (isStatus(err)) return answer.status(err.code, err.message, err.headers);
    answer.error(toConnectError(err, route.domain, route.onInternal), requestId);
  } finally {
    body.stop();
  }
}

/** A status grpc-js's transport would answer on its own (http2.ts adds its details). */
interface TransportStatus {
  code: Code;
  message: string;
  headers?: http2.OutgoingHttpHeaders;
}

function isStatus(err: unknown): err is TransportStatus & { [TRANSPORT]: true } {
  return typeof err === "object" && err !== null && TRANSPORT in err;
}

const TRANSPORT = Symbol("transport status");

function transportStatus(code: Code, message: string, headers?: http2.OutgoingHttpHeaders): TransportStatus {
  return { [TRANSPORT]: true, code, message, headers } as TransportStatus;
}

/**
 * The request's one message envelope, read as it arrives: rejects with the
 * status grpc-js answers for a message over the limit, a second message or
 * none at all.
 */
class UnaryBody {
  readonly message: Promise<Buffer | undefined>;
  private readonly chunks: Buffer[] = [];
  private received = 0;
  private expected = -1;
  private onData: (chunk: Buffer) => void = () => {};
  private onEnd: () => void = () => {};

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    maxBytes: number,
    path: string,
  ) {
    this.message = new Promise((resolve, reject) => {
      this.onData = (chunk) => {
        this.chunks.push(chunk);
        this.received += chunk.byteLength;
        if (this.expected < 0 && this.received >= 5) {
          const head = this.chunks.length === 1 ? chunk : Buffer.concat(this.chunks);
          this.expected = 5 + head.readUInt32BE(1);
          if (this.expected - 5 > maxBytes)
            reject(transportStatus(Code.ResourceExhausted, `Received message larger than max (${this.expected - 5} vs ${maxBytes})`));
        }
        if (this.expected >= 0 && this.received > this.expected)
          reject(transportStatus(Code.Unimplemented, `Received a second request message for server streaming method ${path}`));
      };
      this.onEnd = () => {
        if (this.expected < 0 || this.received < this.expected)
          return reject(transportStatus(Code.Unimplemented, `Received no request message for server streaming method ${path}`));
        resolve(this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.received));
      };
      // A stream closed before its end: the call is cancelled and nothing is answered.
      stream.once("close", () => resolve(undefined));
    });
    // Awaited a microtask after it is made, or never when the call is answered before: never unhandled.
    this.message.catch(() => {});
    stream.on("data", this.onData);
    stream.once("end", this.onEnd);
  }

  /** Stops reading the message: whatever else arrives is dropped, as grpc-js does once it has answered. */
  stop(): void {
    this.stream.off("data", this.onData);
    this.stream.off("end", this.onEnd);
    this.chunks.length = 0;
    // Flowing already when the byte budget's listener reads it (http2.ts's boundUnfinished).
    if (this.stream.readableFlowing !== true) this.stream.resume();
  }
}

/**
 * The message of an envelope whose flag says compressed, decompressed as
 * grpc-encoding says, within the limit; throws grpc-js's statuses for a
 * coding it does not know, a failed decompression and a message over the limit.
 */
async function inflated(envelope: Buffer, encoding: string | undefined, maxBytes: number): Promise<Buffer> {
  const message = envelope.subarray(5);
  const coding = encoding ?? "identity";
  if (coding === "identity") return message;
  if (coding !== "gzip" && coding !== "deflate")
    throw transportStatus(Code.Unimplemented, `Received message compressed with unsupported encoding "${coding}"`, {
      "grpc-accept-encoding": RESPONSE_HEADERS["grpc-accept-encoding"],
    });
  const inflate = coding === "gzip" ? zlib.gunzip : zlib.inflate;
  return new Promise((resolve, reject) =>
    inflate(message, { maxOutputLength: Math.max(1, maxBytes) }, (err, out) => {
      if (err === null) return resolve(out);
      if ((err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE")
        return reject(transportStatus(Code.ResourceExhausted, `Received message that decompresses to a size larger than ${maxBytes}`));
      reject(transportStatus(Code.Internal, "Failed to decompress message"));
    }),
  );
}

/** The one answer of a call: nothing is written once it is given or the stream is gone. */
class Answer {
  done = false;

  constructor(private readonly stream: http2.ServerHttp2Stream) {}

  private open(): boolean {
    if (this.done || this.stream.closed || this.stream.destroyed || this.stream.headersSent) {
      this.done = true;
      return false;
    }
    this.done = true;
    return true;
  }

  /** The message, in one envelope, then status OK. */
  message(output: Uint8Array, requestId: string, handlerHeaders: Headers | undefined): void {
    if (!this.open()) return;
    const frame = Buffer.allocUnsafe(5 + output.byteLength);
    frame[0] = 0;
    frame.writeUInt32BE(output.byteLength, 1);
    frame.set(output, 5);
    this.respond(requestId, handlerHeaders, { "grpc-status": "0", "grpc-message": "OK" }, frame);
  }

  /** A handler's error: headers (with the request id, as grpc-js's path sends them first), then its status and details. */
  error(err: ConnectError, requestId?: string): void {
    if (!this.open()) return;
    const trailers = {
      "grpc-status": String(err.code),
      "grpc-message": grpcMessageHeader(err.rawMessage),
      "grpc-status-details-bin": Buffer.from(grpcStatusDetails(err)).toString("base64"),
    };
    if (requestId === undefined) this.stream.respond({ ...RESPONSE_HEADERS, ...trailers }, { endStream: true });
    else this.respond(requestId, undefined, trailers);
  }

  /** A status grpc-js's transport answers on its own, trailers-only (http2.ts's respond adds its details). */
  status(code: Code, message: string, headers?: http2.OutgoingHttpHeaders): void {
    if (!this.open()) return;
    const trailers = { ":status": 200, "content-type": "application/grpc+proto", ...headers };
    this.stream.respond({ ...trailers, "grpc-status": String(code), "grpc-message": grpcMessageHeader(message) }, { endStream: true });
  }

  private respond(requestId: string, handlerHeaders: Headers | undefined, trailers: http2.OutgoingHttpHeaders, data?: Buffer): void {
    const headers: http2.OutgoingHttpHeaders = { ...RESPONSE_HEADERS, "x-request-id": requestId };
    handlerHeaders?.forEach((value, key) => (headers[key] = value));
    this.stream.respond(headers, { waitForTrailers: true });
    this.stream.once("wantTrailers", () => this.stream.sendTrailers(trailers));
    this.stream.end(data);
  }
}

function firstOf(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}
