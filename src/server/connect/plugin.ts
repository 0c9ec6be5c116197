import type { Registry } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ContextValues } from "@connectrpc/connect";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import * as connectProtocol from "@connectrpc/connect/protocol-connect";
import * as grpcProtocol from "@connectrpc/connect/protocol-grpc";
import * as grpcWebProtocol from "@connectrpc/connect/protocol-grpc-web";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ApiError } from "../../domain/errors.js";
import { areaErrorDomain, toConnectError } from "../errors.js";
import { HeaderView } from "../http/header-view.js";
import { holdBody } from "../http/socket-reading.js";
import { bearerChallenge } from "../http/www-authenticate.js";
import type { WrappedMethod } from "../wrap.js";
import { connectUnary } from "./connect-unary.js";
import { decodeBase64Body, encodeBase64Body, GRPC_WEB_BINARY_TYPE, GRPC_WEB_TEXT_TYPE } from "./grpc-web-text.js";
import { boundedCompressions, isEnveloped, limitedBody, oversizedGetMessage } from "./message-limit.js";
import { PATH_OF_REQUEST, protocolNameOf, requestKindOf, requestTimeoutMs } from "./paths.js";
import { checkedUnaryBody, checkGetMessage, requestMessageCheck } from "./request-check.js";
import {
  GRPC_WEB_TEXT,
  rpcProtocolOf,
  sendRpcError,
  sendUnsupportedContentType,
  unknownProcedure,
  type RpcProtocol,
} from "./rpc-errors.js";

/** What the Connect side needs from the server. */
export interface ConnectPluginOptions {
  routes(router: ConnectRouter): void;
  contextValues(req: FastifyRequest): ContextValues;
  /** After fastify starts closing, handlers still running see their signal abort this much later. */
  shutdownTimeoutMs: number;
  /** The largest request message, counted after decompression. */
  maxMessageBytes: number;
  /**
   * The largest request message of a method that needs no token (and of
   * Health): what anyone may make the server hold and decode.
   */
  anonymousMessageBytes: number;
  /** How long a unary request body may take to arrive (BodyLimits.timeoutMs). */
  bodyTimeoutMs: number;
  /** Resolves the types inside JSON request messages (google.protobuf.Any). */
  registry: Registry;
  /**
   * Wrapped handlers by request path ("/package.Service/Method"): they admit
   * each call before its body is read, unary and server-streaming alike, and
   * the unary ones serve plain Connect POSTs without connect-node
   * (connect-unary.ts; which request takes which path is the table in
   * paths.ts). A server stream is always connect-node's.
   */
  unaryHandlers: ReadonlyMap<string, WrappedMethod>;
}

/**
 * Connect and gRPC-Web routes on fastify: @connectrpc/connect-fastify's
 * plugin, plus what must happen before connect-node reads a body: the
 * call's admission (its caller authenticated from the headers, see
 * WrappedHandler.admit) and the limits on the body (see message-limit.ts).
 * That plugin builds the request body itself and offers no hook for this,
 * hence our own copy of its thirty lines.
 */
export async function connectPlugin(app: FastifyInstance, opts: ConnectPluginOptions): Promise<void> {
  const limit = opts.maxMessageBytes;
  const shutdown = new AbortController();
  app.addHook("preClose", (done) => {
    setTimeout(() => shutdown.abort(), opts.shutdownTimeoutMs).unref();
    done();
  });
  const router = createConnectRouter({
    readMaxBytes: limit,
    acceptCompression: boundedCompressions(limit),
    shutdownSignal: shutdown.signal,
  });
  // Each service's decompression errors carry its area's ErrorInfo domain.
  opts.routes({
    get handlers() {
      return router.handlers;
    },
    service(service, impl, options) {
      router.service(service, impl, { acceptCompression: boundedCompressions(limit, areaErrorDomain(service.typeName)), ...options });
      return this;
    },
    rpc(method, impl, options) {
      router.rpc(method, impl, { acceptCompression: boundedCompressions(limit, areaErrorDomain(method.parent.typeName)), ...options });
      return this;
    },
  });
  leaveBodiesUnread(app);
  for (const handler of router.handlers) {
    const domain = areaErrorDomain(handler.service.typeName);
    const wrapped = opts.unaryHandlers.get(handler.requestPath);
    const messageLimit = wrapped?.needsToken ? opts.maxMessageBytes : opts.anonymousMessageBytes;
    const compressions = boundedCompressions(messageLimit, domain);
    const fast =
      wrapped !== undefined &&
      wrapped.kind !== "server_streaming" &&
      connectUnary(handler.method, wrapped, {
        limit: messageLimit,
        domain,
        registry: opts.registry,
        contextValues: opts.contextValues,
        bodyTimeoutMs: opts.bodyTimeoutMs,
      });
    app.all(handler.requestPath, async (req, reply) => {
      if (!speaksServedProtocol(req)) return sendUnsupportedContentType(reply, domain);
      const kind = requestKindOf(req.method, req.headers);
      if (fast && PATH_OF_REQUEST[kind] === "fast") return fast(req, reply);
      const values = opts.contextValues(req);
      if (wrapped) {
        // The caller and the deadline are judged from the headers, before the body is read.
        const timeout = requestTimeoutMs(kind, req.headers);
        const deadline = timeout === undefined ? undefined : Date.now() + timeout;
        const admission = {
          requestHeader: HeaderView.ofNode(req.headers),
          values,
          protocolName: protocolNameOf(kind),
          timeoutMs: () => (deadline === undefined ? undefined : deadline - Date.now()),
        };
        const release = holdBody(req.raw);
        try {
          await wrapped.admit(admission);
        } catch (err) {
          const rpcError = ConnectError.from(err);
          // A Connect unary 401 is an HTTP 401: it carries the RFC 6750 challenge, as REST's does.
          if (rpcError.code === Code.Unauthenticated) reply.header("www-authenticate", bearerChallenge(req.headers.authorization));
          return sendRpcError(reply, rpcError);
        } finally {
          release();
        }
      }
      // A Connect GET carries its message (and its compression) in the query.
      const query = req.method === "GET" ? new URL(req.url, "http://localhost").searchParams : undefined;
      const coding = messageCoding(req, query);
      if (coding !== undefined && !COMPRESSIONS.includes(coding)) return sendRpcError(reply, unsupportedCoding(reply, coding, domain));
      const oversized = query && oversizedGetMessage(query, messageLimit, domain);
      if (oversized) return sendRpcError(reply, oversized);
      const contentType = req.headers["content-type"];
      const text = kind === "grpc-web-text";
      const unary = handler.method.methodKind === "unary";
      let body = limitedBody(req.raw, reply.raw, {
        limit: messageLimit,
        domain,
        // One request message (a server stream's too); only a unary body is read whole here, so only it gets the timeout.
        unary: unary || handler.method.methodKind === "server_streaming",
        timeoutMs: unary ? opts.bodyTimeoutMs : undefined,
        decode: text ? (wire: AsyncIterable<Uint8Array>) => decodeBase64Body(wire, domain) : undefined,
      });
      if (unary) {
        const json = query ? query.get("encoding") === "json" : /[/+]json\s*(;|$)/i.test(contentType ?? "");
        const compression = compressions.find((c) => c.name === coding);
        const check = requestMessageCheck(
          handler.method.input,
          { json, compression },
          { registry: opts.registry, domain, limit: messageLimit },
        );
        if (query) {
          try {
            await checkGetMessage(query, check);
          } catch (err) {
            return sendRpcError(reply, ConnectError.from(err));
          }
        } else body = checkedUnaryBody(body, isEnveloped(contentType), check);
      }
      const uReq = {
        ...universalRequestFromNodeRequest(req.raw, reply.raw, undefined, values),
        body,
      };
      // limitedBody checks Content-Length itself, with an ErrorInfo and without destroying the request.
      uReq.header.delete("content-length");
      if (text) uReq.header.set("content-type", GRPC_WEB_BINARY_TYPE);
      try {
        let uRes = await handler(uReq);
        if (text) uRes = { ...uRes, header: textModeHeader(uRes.header), body: uRes.body && encodeBase64Body(uRes.body) };
        // A Connect unary 401 is an HTTP 401: it carries the RFC 6750 challenge, as REST's does.
        if (uRes.status === 401) reply.header("www-authenticate", bearerChallenge(req.headers.authorization));
        // fastify keeps headers set by hooks (CORS, x-request-id) on the reply until send, which this path never calls.
        for (const [key, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(key, value);
        await universalResponseToNodeResponse(uRes, reply.raw);
      } catch (err) {
        if (ConnectError.from(err).code === Code.Aborted) return;
        req.log.error({ err }, `handler for rpc ${handler.method.name} of ${handler.service.typeName} failed`);
      }
    });
  }
  // Any other /package.Service/Method path: UNIMPLEMENTED in the caller's protocol, not a REST 404 or 415.
  app.all("/:service(^\\w+\\.[\\w.]+$)/:method(^\\w+$)", async (req, reply) =>
    sendRpcError(reply, unknownProcedure(req.url.split("?")[0] ?? "")),
  );
}

/** The compressions the router accepts, besides identity. */
const COMPRESSIONS = boundedCompressions(0).map((c) => c.name);

/** The header each protocol lists the accepted compressions in. */
const ACCEPT_HEADER: Record<RpcProtocol, string> = {
  connect: "accept-encoding",
  "connect-stream": "connect-accept-encoding",
  "grpc-web": "grpc-accept-encoding",
};

/** The compression a request's message says it uses (a GET's in its query), lower-cased; undefined for none. */
function messageCoding(req: FastifyRequest, query: URLSearchParams | undefined): string | undefined {
  const protocol = rpcProtocolOf(req.headers["content-type"]);
  const raw =
    query !== undefined
      ? query.get("compression")
      : req.headers[
          protocol === "connect" ? "content-encoding" : protocol === "connect-stream" ? "connect-content-encoding" : "grpc-encoding"
        ];
  const coding = (Array.isArray(raw) ? raw[0] : raw)?.trim().toLowerCase();
  return coding === undefined || coding === "" || coding === "identity" ? undefined : coding;
}

/** UNIMPLEMENTED for a compression the router does not have, listing those it has in the protocol's accept header. */
function unsupportedCoding(reply: FastifyReply, coding: string, domain: string): ConnectError {
  reply.header(ACCEPT_HEADER[rpcProtocolOf(reply.request.headers["content-type"])], COMPRESSIONS.join(","));
  const message = `Content-Encoding ${coding} is not supported: use one of identity, ${COMPRESSIONS.join(", ")}`;
  return toConnectError(new ApiError(Code.Unimplemented, "UNSUPPORTED_CONTENT_ENCODING", message), domain);
}

/** Response headers of a text-mode call: its Content-Type, and no length (base64 is longer). */
function textModeHeader(header: Headers | undefined): Headers {
  const out = new Headers(header);
  out.set("content-type", GRPC_WEB_TEXT_TYPE);
  out.delete("content-length");
  return out;
}

/**
 * Leaves every body to the routes: fastify must not consume it first (nor
 * answer a type it has no parser for with REST's 415). A type no protocol
 * of the router speaks is answered by the route (unsupportedContentType).
 */
function leaveBodiesUnread(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", (_req: unknown, _payload: unknown, done: (err: null, body: undefined) => void) => done(null, undefined));
}

/** Content-Types of the router's protocols: Connect (unary and streaming), gRPC-Web (binary and text), gRPC. */
const SERVED_CONTENT_TYPES = [
  connectProtocol.contentTypeRegExp,
  grpcWebProtocol.contentTypeRegExp,
  GRPC_WEB_TEXT,
  grpcProtocol.contentTypeRegExp,
];

/** Whether a request to a Connect route speaks one of its protocols (a Connect GET carries no Content-Type). */
function speaksServedProtocol(req: FastifyRequest): boolean {
  if (req.method === "GET") return true;
  const contentType = req.headers["content-type"] ?? "";
  return SERVED_CONTENT_TYPES.some((type) => type.test(contentType));
}
