import { Code, ConnectError, createConnectRouter, type ConnectRouter, type ContextValues } from "@connectrpc/connect";
import * as connectProtocol from "@connectrpc/connect/protocol-connect";
import * as grpcProtocol from "@connectrpc/connect/protocol-grpc";
import * as grpcWebProtocol from "@connectrpc/connect/protocol-grpc-web";
import { universalRequestFromNodeRequest, universalResponseToNodeResponse } from "@connectrpc/connect-node";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { boundedCompressions, limitedBody, oversizedGetMessage } from "./message-limit.js";

/** What the Connect side needs from the server. */
export interface ConnectPluginOptions {
  routes(router: ConnectRouter): void;
  contextValues(req: FastifyRequest): ContextValues;
  /** After fastify starts closing, handlers still running see their signal abort this much later. */
  shutdownTimeoutMs: number;
  /** The largest request message, counted after decompression. */
  maxMessageBytes: number;
}

/**
 * Connect and gRPC-Web routes on fastify: @connectrpc/connect-fastify's
 * plugin, plus the message limit on the body before connect-node reads it
 * (see message-limit.ts). That plugin builds the request body itself and
 * offers no hook for this, hence our own copy of its thirty lines.
 */
export async function connectPlugin(app: FastifyInstance, opts: ConnectPluginOptions): Promise<void> {
  const limit = opts.maxMessageBytes;
  const shutdown = new AbortController();
  app.addHook("preClose", (done) => {
    setTimeout(() => shutdown.abort(), opts.shutdownTimeoutMs).unref();
    done();
  });
  const router = createConnectRouter({ readMaxBytes: limit, acceptCompression: boundedCompressions(limit), shutdownSignal: shutdown.signal });
  opts.routes(router);
  addNoopContentTypeParsers(app);
  for (const handler of router.handlers) {
    app.all(handler.requestPath, async (req, reply) => {
      const oversized = req.method === "GET" ? oversizedGetMessage(req.url, limit) : undefined;
      if (oversized) return sendConnectUnaryError(reply, oversized);
      const uReq = { ...universalRequestFromNodeRequest(req.raw, reply.raw, undefined, opts.contextValues(req)), body: limitedBody(req.raw, limit) };
      // limitedBody checks Content-Length itself, with an ErrorInfo and without destroying the request.
      uReq.header.delete("content-length");
      try {
        const uRes = await handler(uReq);
        // fastify keeps headers set by hooks (CORS, x-request-id) on the reply until send, which this path never calls.
        for (const [key, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(key, value);
        await universalResponseToNodeResponse(uRes, reply.raw);
      } catch (err) {
        if (ConnectError.from(err).code === Code.Aborted) return;
        req.log.error({ err }, `handler for rpc ${handler.method.name} of ${handler.service.typeName} failed`);
      }
    });
  }
}

function sendConnectUnaryError(reply: FastifyReply, err: ConnectError): FastifyReply {
  return reply
    .code(connectProtocol.codeToHttpStatus(err.code))
    .type(connectProtocol.contentTypeUnaryJson)
    .send(Buffer.from(connectProtocol.errorToJsonBytes(err, undefined)));
}

/** Leaves every body connect-node reads to connect-node: fastify must not consume it first. */
function addNoopContentTypeParsers(app: FastifyInstance): void {
  const noop = (_req: unknown, _payload: unknown, done: (err: null, body: undefined) => void) => done(null, undefined);
  app.addContentTypeParser(
    [
      connectProtocol.contentTypeUnaryJson,
      connectProtocol.contentTypeStreamJson,
      grpcWebProtocol.contentTypeProto,
      grpcWebProtocol.contentTypeJson,
      grpcProtocol.contentTypeProto,
      grpcProtocol.contentTypeJson,
    ],
    noop,
  );
  for (const type of [grpcProtocol.contentTypeRegExp, grpcWebProtocol.contentTypeRegExp, connectProtocol.contentTypeRegExp]) app.addContentTypeParser(type, noop);
}
