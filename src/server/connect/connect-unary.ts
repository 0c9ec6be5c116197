import { toJsonString, type DescMethod, type Registry } from "@bufbuild/protobuf";
import { Code, type ContextValues } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { asMessage, encodeMessage } from "../../codec/binary.js";
import { lightContext } from "../context.js";
import { toConnectError } from "../errors.js";
import { compress, MIN_COMPRESS_BYTES, responseCoding } from "../http/compression.js";
import { HeaderView } from "../http/header-view.js";
import { holdBody } from "../http/socket-reading.js";
import { bearerChallenge } from "../http/www-authenticate.js";
import { callSignal, type WrappedHandler } from "../wrap.js";
import { readUnaryMessage } from "./message-limit.js";
import { isJsonUnary, requestTimeoutMs } from "./paths.js";
import { decodeRequest } from "./request-check.js";
import { sendRpcError } from "./rpc-errors.js";

/**
 * The Connect protocol's plain unary POST, served without connect-node: the
 * body is the message (protobuf or JSON), the response body is the answer,
 * an error is Connect's error JSON with the gRPC code's HTTP status. It is
 * what connect-web and most Connect clients send, and connect-node's
 * general machinery (web Headers, async iterables, linked abort controllers
 * and two DOMExceptions per call) costs it about three times what the REST
 * path costs for the same handler. The request goes to the same wrapped
 * handler as every other protocol. Which requests come here is the table
 * in paths.ts ("connect-unary-plain").
 */

export interface ConnectUnaryOptions {
  /** The largest request message of this method. */
  limit: number;
  domain: string;
  registry: Registry;
  contextValues(req: FastifyRequest): ContextValues;
  /** How long the body may take to arrive (BodyLimits.timeoutMs). */
  bodyTimeoutMs: number;
}

/** The fast path's handler for `method`: serves a "connect-unary-plain" request. */
export function connectUnary(method: DescMethod, handler: WrappedHandler, opts: ConnectUnaryOptions) {
  return (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const timeoutMs = requestTimeoutMs("connect-unary-plain", req.headers);
    return serve(req, reply, method, handler, isJsonUnary(req.headers), timeoutMs, opts);
  };
}

async function serve(
  req: FastifyRequest,
  reply: FastifyReply,
  method: DescMethod,
  handler: WrappedHandler,
  json: boolean,
  timeoutMs: number | undefined,
  opts: ConnectUnaryOptions,
): Promise<FastifyReply> {
  let finished = false;
  try {
    const ctx = lightContext({
      service: method.parent,
      method,
      protocolName: "connect",
      requestMethod: "POST",
      url: req.url,
      requestHeader: HeaderView.ofNode(req.headers),
      values: opts.contextValues(req),
      timeoutMs,
      // Made only when a handler asks: aborted when the client goes away before the answer, or at the deadline.
      signal: () =>
        callSignal(
          ctx.timeoutMs(),
          (end) => reply.raw.once("close", end),
          () => finished,
        ),
    });
    // The caller and the deadline are judged from the headers, before a byte of the body is read.
    const release = holdBody(req.raw);
    await handler.admit(ctx).finally(release);
    const wire = await readUnaryMessage(req.raw, reply.raw, { limit: opts.limit, domain: opts.domain, timeoutMs: opts.bodyTimeoutMs });
    const request = decodeRequest(method.input, wire, json, opts.registry);
    const result = await handler(request, ctx);
    const headers = ctx.setResponseHeaders();
    headers?.forEach((value, key) => void reply.header(key, value));
    reply.code(200).header("content-type", json ? "application/json" : "application/proto");
    const answer = asMessage(method.output, result);
    // JSON as connect-node writes it (protobuf-es's; REST's own writer adds the fields left at their defaults).
    const body = json
      ? Buffer.from(toJsonString(method.output, answer, { registry: opts.registry }))
      : asBuffer(encodeMessage(method.output, answer));
    // Compressed as connect-node would: at 1 KiB and over, in a coding the client accepts.
    const coding = body.byteLength >= MIN_COMPRESS_BYTES ? responseCoding(req.headers["accept-encoding"]) : null;
    if (coding === null) return reply.send(body);
    const compressed = await compress(body, body.byteLength, coding);
    return reply.header("content-encoding", coding).send(compressed);
  } catch (err) {
    const rpcError = toConnectError(err, opts.domain, (e) => req.log.error({ err: e }, "internal error"));
    // A Connect unary 401 is an HTTP 401: it carries the RFC 6750 challenge, as REST's does.
    if (rpcError.code === Code.Unauthenticated) reply.header("www-authenticate", bearerChallenge(req.headers.authorization));
    return sendRpcError(reply, rpcError);
  } finally {
    finished = true;
  }
}

/** The bytes as a Buffer over the same memory (Buffer.from(Uint8Array) would copy them, byte by byte). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
