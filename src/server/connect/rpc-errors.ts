import { Code, type ConnectError } from "@connectrpc/connect";
import * as connectProtocol from "@connectrpc/connect/protocol-connect";
import * as grpcWebProtocol from "@connectrpc/connect/protocol-grpc-web";
import type { FastifyReply } from "fastify";
import { ApiError, invalidField } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, retryAfterSeconds, toConnectError } from "../errors.js";

/** gRPC-Web's text mode (base64 bodies), which connect-node does not speak itself (see grpc-web-text.ts). */
export const GRPC_WEB_TEXT = /^application\/grpc-web-text(?:\+proto)?\s*(?:;|$)/i;

/** Which of the Connect router's protocols a request speaks, from its Content-Type. */
export type RpcProtocol = "connect" | "connect-stream" | "grpc-web";

/** The protocol of a request to a Connect path; Connect unary for anything unrecognised. */
export function rpcProtocolOf(contentType: string | undefined): RpcProtocol {
  const type = contentType ?? "";
  if (grpcWebProtocol.contentTypeRegExp.test(type) || GRPC_WEB_TEXT.test(type)) return "grpc-web";
  if (connectProtocol.contentTypeStreamRegExp.test(type)) return "connect-stream";
  return "connect";
}

/**
 * Answers a request on a Connect path with err, written the way the client's
 * protocol carries errors: Connect's error JSON with its HTTP status, an
 * end-of-stream message for Connect streaming, or a trailers-only gRPC-Web
 * response (status 200, grpc-status in the headers, which every gRPC-Web
 * client reads). For errors found before connect-node sees the request. A
 * request whose body has not all arrived is answered with Connection:
 * close, so whatever else its client sends is not read.
 */
export function sendRpcError(reply: FastifyReply, err: ConnectError): FastifyReply {
  const contentType = reply.request.headers["content-type"];
  // A body still arriving is not read on: the connection ends with the answer (node would read and drop all of it).
  if (!reply.request.raw.complete) reply.header("connection", "close");
  switch (rpcProtocolOf(contentType)) {
    case "grpc-web": {
      const trailer = new Headers();
      grpcWebProtocol.setTrailerStatus(trailer, err);
      trailer.forEach((value, key) => void reply.header(key, value));
      return reply.code(200).header("content-type", contentType).send();
    }
    case "connect-stream": {
      const json = Buffer.from(JSON.stringify(connectProtocol.endStreamToJson(new Headers(), err, undefined)));
      const prefix = Buffer.alloc(5);
      prefix.writeUInt8(connectProtocol.endStreamFlag, 0);
      prefix.writeUInt32BE(json.byteLength, 1);
      return reply
        .code(200)
        .header("content-type", contentType)
        .send(Buffer.concat([prefix, json]));
    }
    case "connect": {
      const retryAfter = retryAfterSeconds(err);
      if (retryAfter !== undefined) reply.header("retry-after", String(retryAfter));
      return reply
        .code(connectProtocol.codeToHttpStatus(err.code))
        .header("content-type", connectProtocol.contentTypeUnaryJson)
        .send(Buffer.from(connectProtocol.errorToJsonBytes(err, undefined)));
    }
  }
}

/**
 * A request to a Connect route in none of its protocols: HTTP 415 (what
 * connect-node answers, with an empty body), here with Connect's error JSON
 * carrying the same ErrorInfo and BadRequest violation naming Content-Type as
 * REST's 415. The body is not read.
 */
export function sendUnsupportedContentType(reply: FastifyReply, domain: string): FastifyReply {
  const err = toConnectError(
    invalidField(
      "Content-Type",
      "must be application/proto or application/json (Connect), application/grpc-web (gRPC-Web) or application/grpc",
    ),
    domain,
  );
  if (!reply.request.raw.complete) reply.header("connection", "close");
  return reply
    .code(415)
    .header("content-type", connectProtocol.contentTypeUnaryJson)
    .send(Buffer.from(connectProtocol.errorToJsonBytes(err, undefined)));
}

/** UNIMPLEMENTED for a procedure path no service serves (gRPC answers the same over h2c). */
export function unknownProcedure(path: string): ConnectError {
  return toConnectError(
    new ApiError(Code.Unimplemented, "UNKNOWN_METHOD", `The server does not implement the method ${path}`),
    DEFAULT_ERROR_DOMAIN,
  );
}
