import type http2 from "node:http2";
import type { Code } from "@connectrpc/connect";
import { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from "fastify";
import { requestIdKey, type Authenticator } from "../../auth/principal.js";
import { TokenRejectedError } from "../../auth/tokens.js";
import { UnauthenticatedError } from "../../domain/errors.js";
import type { OtherStreamObserver } from "../grpc/server.js";
import { levelEnabled, type ServerLogging } from "../observe/logging.js";
import { codeName, isStreamHandler, type AdmissionContext, type WrappedMethod, type WrappedService } from "../wrap.js";
import type { ClientAddresses } from "./client-address.js";
import { requestIdFrom } from "./request-id.js";

/** The probes of load balancers and orchestrators, called every few seconds: their lines are at debug. */
const PROBE_PATHS = new Set(["/healthz", "/readyz"]);
/** grpc.health.v1 over Connect and gRPC-Web (native gRPC health is served by grpc-js, outside fastify). */
const HEALTH_RPCS = "/grpc.health.v1.Health/";
/** A path longer than this (a scanner's) is cut in the line. */
const MAX_PATH = 512;
/** The status of a request whose client went away before its answer was complete (nginx's). */
const CLIENT_GONE = 499;

/** An HTTP request being served; its id's other open requests hang off `next` (a client reusing its x-request-id). */
class OpenRequest {
  /** A call started for it: its rpc line is the request's line. */
  rpc = false;
  next: OpenRequest | undefined;

  constructor(
    readonly request: FastifyRequest,
    readonly started: number,
  ) {}
}

/** A call whose handler is running, by request id like OpenRequest. */
class RunningCall {
  next: RunningCall | undefined;

  constructor(readonly rpc: string) {}
}

/** What is still being served, for the line that says what the end of the grace period cut. */
export interface InFlight {
  /** How many of each: running calls by rpc ("pkg.Service/Method"), other requests by method and path. */
  what: Record<string, number>;
  /** Their request ids (at most 20). */
  reqIds: string[];
}

/**
 * One line for every HTTP request fastify serves (HTTP/1.1 and HTTP/2, every
 * protocol but native gRPC): a request that carried an RPC is the rpc line
 * its call writes; every other one (a 404 or 405, /docs, /metrics, a probe, a
 * request refused before its call started) writes a "request" line when it
 * ends, with method, path, status, client address and duration, at info
 * (probes at debug). fastify's LogController is the hook that sees every
 * request, including those its router refuses.
 *
 * Calls and requests are matched by request id; two requests in flight at
 * once under one client-chosen x-request-id may swap lines.
 */
export class RequestLog extends LogController {
  private readonly open = new Map<string, OpenRequest>();
  private readonly running = new Map<string, RunningCall>();
  /** Each call's request headers and request id, while debug lines are written (see logRefusals). */
  private readonly idsByHeaders: WeakMap<object, string> | undefined;

  constructor(
    private readonly logging: ServerLogging,
    level: string,
  ) {
    // fastify's own request lines stay off: these replace them.
    super({ disableRequestLogging: true });
    this.idsByHeaders = levelEnabled(level, "debug") ? new WeakMap() : undefined;
  }

  override incomingRequest(request: FastifyRequest, reply: FastifyReply): void {
    const open = new OpenRequest(request, performance.now());
    add(this.open, request.id, open);
    // 'close' comes however the response ends: answered, or its client gone.
    reply.raw.once("close", () => this.ended(open, reply));
  }

  /** A call's handler started (WrappedMethod called, a stream's first message asked for). */
  callStarted(rpc: string, context: AdmissionContext): void {
    const reqId = context.values.get(requestIdKey);
    add(this.running, reqId, new RunningCall(rpc));
    this.markRpc(reqId);
    this.idsByHeaders?.set(context.requestHeader, reqId);
  }

  /** A call finished (CallObserver.finished), its rpc line written: no longer in flight. */
  callFinished(reqId: string, rpc: string): void {
    for (let c = this.running.get(reqId); c !== undefined; c = c.next) {
      if (c.rpc === rpc) return remove(this.running, reqId, c);
    }
    // Refused by admission, before its handler started: its rpc line is its request's line all the same.
    this.markRpc(reqId);
  }

  /** Marks the first open request of reqId that has no call yet as carrying one. */
  private markRpc(reqId: string): void {
    for (let o = this.open.get(reqId); o !== undefined; o = o.next) {
      if (!o.rpc) {
        o.rpc = true;
        return;
      }
    }
  }

  /** The services, each method telling callStarted when its handler starts (and admission, for logRefusals). */
  announcingCalls(services: readonly WrappedService[]): WrappedService[] {
    return services.map(({ service, handlers }) => ({
      service,
      handlers: Object.fromEntries(
        service.methods.map((m) => [m.localName, this.announcing(handlers[m.localName]!, `${service.typeName}/${m.name}`)]),
      ),
    }));
  }

  /**
   * The authenticator, its refusals logged at debug with the request id of
   * their call ("bearer token refused", with the exact reason the client's
   * message leaves out); inner itself when debug lines are not written.
   */
  logRefusals(inner: Authenticator, log: () => FastifyBaseLogger): Authenticator {
    const ids = this.idsByHeaders;
    if (ids === undefined) return inner;
    return {
      async authenticate(headers) {
        try {
          return await inner.authenticate(headers);
        } catch (err) {
          // A refusal; not a store that could not answer (UNAVAILABLE), which is no verdict on the token.
          if (err instanceof UnauthenticatedError) {
            const reason = err instanceof TokenRejectedError ? err.detail : err.message;
            log().debug({ reqId: ids.get(headers) ?? "", reason }, "bearer token refused");
          }
          throw err;
        }
      },
    };
  }

  /** The calls running and the other requests open, for the line of a grace period's end. */
  inFlight(): InFlight {
    const what: Record<string, number> = {};
    const reqIds: string[] = [];
    const count = (name: string, reqId: string) => {
      what[name] = (what[name] ?? 0) + 1;
      if (reqIds.length < 20) reqIds.push(reqId);
    };
    for (const [reqId, head] of this.running) for (let c: RunningCall | undefined = head; c; c = c.next) count(c.rpc, reqId);
    for (const [reqId, head] of this.open) {
      for (let o: OpenRequest | undefined = head; o; o = o.next) if (!o.rpc) count(`${o.request.method} ${pathOf(o.request.url)}`, reqId);
    }
    return { what, reqIds };
  }

  /**
   * The line of every native gRPC stream outside the wrapped services'
   * calls (health at debug; reflection, unknown methods, and API calls
   * answered before their handler ran at info), written when it closes: its
   * code is the grpc-status it was answered, "cancelled" when the client went
   * away first.
   */
  otherGrpcStreams(log: () => FastifyBaseLogger, clients: ClientAddresses): OtherStreamObserver {
    return (stream, headers, handled) => {
      const started = performance.now();
      const path = pathOf(String(headers[":path"] ?? ""));
      const level = path.startsWith(HEALTH_RPCS) ? "debug" : "info";
      if (!levelEnabled(log().level, level)) return;
      const reqId = requestIdFrom(headers["x-request-id"]);
      const session = stream.session;
      const remoteAddress = session ? clients.ofRequest({ socket: session.socket, headers }) : "";
      stream.once("close", () => {
        // A call that reached its handler has its rpc line.
        if (handled?.()) return;
        const status = grpcStatusOf(stream);
        this.logging.request(log(), level, {
          reqId,
          method: String(headers[":method"] ?? "POST"),
          path,
          status: Number(stream.sentHeaders?.[":status"] ?? CLIENT_GONE),
          code: status === undefined ? "cancelled" : codeName(status as Code | 0),
          remoteAddress,
          durationMs: Math.round((performance.now() - started) * 100) / 100,
        });
      });
    };
  }

  private ended(open: OpenRequest, reply: FastifyReply): void {
    const { request } = open;
    remove(this.open, request.id, open);
    if (open.rpc) return;
    const path = pathOf(request.url);
    const level = PROBE_PATHS.has(path) || path.startsWith(HEALTH_RPCS) ? "debug" : "info";
    const log = request.server.log;
    if (!levelEnabled(log.level, level)) return;
    this.logging.request(log, level, {
      reqId: request.id,
      method: request.method,
      path,
      status: reply.raw.writableFinished ? reply.raw.statusCode : CLIENT_GONE,
      remoteAddress: request.clientAddress,
      durationMs: Math.round((performance.now() - open.started) * 100) / 100,
    });
  }

  private announcing(handler: WrappedMethod, rpc: string): WrappedMethod {
    const ids = this.idsByHeaders;
    const admit = ids === undefined ? handler.admit : (context: AdmissionContext) => this.admitting(handler, context);
    const admission = { needsToken: handler.needsToken, admit };
    if (isStreamHandler(handler)) {
      const stream = (request: unknown, context: Parameters<typeof handler>[1]) =>
        onFirstNext(handler(request, context), () => this.callStarted(rpc, context));
      return Object.assign(stream, { kind: "server_streaming" as const }, admission);
    }
    const unary = (request: unknown, context: Parameters<typeof handler>[1]) => {
      this.callStarted(rpc, context);
      return handler(request, context);
    };
    return Object.assign(unary, { kind: "unary" as const }, admission);
  }

  /** Admission authenticates too: its refusals carry the request id (debug only). */
  private admitting(handler: WrappedMethod, context: AdmissionContext): Promise<void> {
    this.idsByHeaders?.set(context.requestHeader, context.values.get(requestIdKey));
    return handler.admit(context);
  }
}

/** The path of a request URL: its query string (which may carry a token) left out, a very long one cut. */
function pathOf(url: string): string {
  const query = url.indexOf("?");
  const path = query < 0 ? url : url.slice(0, query);
  return path.length > MAX_PATH ? `${path.slice(0, MAX_PATH)}…` : path;
}

/** messages, calling onFirst when its first message is asked for (when a wrapped stream's handler starts). */
function onFirstNext(messages: AsyncIterable<unknown>, onFirst: () => void): AsyncIterable<unknown> {
  return {
    [Symbol.asyncIterator]() {
      const inner = messages[Symbol.asyncIterator]();
      let first = true;
      return {
        next(...args: [] | [unknown]) {
          if (first) {
            first = false;
            onFirst();
          }
          return inner.next(...args);
        },
        return: (value?: unknown) => inner.return?.(value) ?? Promise.resolve({ done: true as const, value }),
        throw: (err?: unknown) => inner.throw?.(err) ?? Promise.reject(err),
      };
    },
  };
}

/** Adds item under key, after the items already there. */
function add<T extends { next: T | undefined }>(map: Map<string, T>, key: string, item: T): void {
  const head = map.get(key);
  if (head === undefined) return void map.set(key, item);
  let last = head;
  while (last.next !== undefined) last = last.next;
  last.next = item;
}

/** Removes item from under key. */
function remove<T extends { next: T | undefined }>(map: Map<string, T>, key: string, item: T): void {
  const head = map.get(key);
  if (head === item) {
    if (item.next === undefined) map.delete(key);
    else map.set(key, item.next);
    return;
  }
  for (let prev = head; prev !== undefined; prev = prev.next) {
    if (prev.next === item) {
      prev.next = item.next;
      return;
    }
  }
}

/** The grpc-status a stream was answered (in its trailers, or its headers for a trailers-only answer), if any. */
function grpcStatusOf(stream: http2.ServerHttp2Stream): number | undefined {
  const raw = stream.sentTrailers?.["grpc-status"] ?? stream.sentHeaders?.["grpc-status"];
  const status = Number(raw);
  return raw === undefined || !Number.isInteger(status) || status < 0 || status > 16 ? undefined : status;
}
