import type { IncomingHttpHeaders } from "node:http";
import * as connectProtocol from "@connectrpc/connect/protocol-connect";
import * as grpcWebProtocol from "@connectrpc/connect/protocol-grpc-web";
import { GRPC_WEB_TEXT } from "./rpc-errors.js";

/**
 * Which path serves a request on a Connect route. Two paths exist: the fast
 * path (connect-unary.ts), our own code for the request most Connect clients
 * send, and connect-node, which knows every other form of the protocols. The
 * table below is the one place that says which request takes which; every
 * row is named, and the compiler checks that every kind has a row.
 */

/** The two ways a request on a Connect route is served. */
export type ConnectPath = "fast" | "connect-node";

/** Every kind of request a Connect route receives, from its method and headers. */
export type ConnectRequestKind =
  /** POST, Content-Type application/proto or application/json (charset utf-8 allowed), no Content-Encoding, protocol version 1 or none, a timeout of digits or none. */
  | "connect-unary-plain"
  /** Any other Connect unary POST: compressed, another protocol version, a malformed timeout, another Content-Type. */
  | "connect-unary-other"
  /** A Connect GET (message, encoding and compression in the query). */
  | "connect-get"
  /** Connect streaming (application/connect+proto, +json): enveloped messages. */
  | "connect-stream"
  /** gRPC-Web binary mode (application/grpc-web, +proto, +json). */
  | "grpc-web"
  /** gRPC-Web text mode (application/grpc-web-text): base64 around binary mode (grpc-web-text.ts). */
  | "grpc-web-text";

/**
 * The path of each kind of request, for a method the fast path can serve (a
 * wrapped unary method); any other method (Health) always goes to connect-node.
 */
export const PATH_OF_REQUEST = {
  "connect-unary-plain": "fast",
  "connect-unary-other": "connect-node",
  "connect-get": "connect-node",
  "connect-stream": "connect-node",
  "grpc-web": "connect-node",
  "grpc-web-text": "connect-node",
} as const satisfies Record<ConnectRequestKind, ConnectPath>;

/** Content-Types of a plain Connect unary POST, and whether each is JSON. */
const PLAIN_UNARY_TYPES: ReadonlyMap<string, boolean> = new Map([
  ["application/proto", false],
  ["application/json", true],
  ["application/json; charset=utf-8", true],
]);

/** Whether a plain Connect unary request's message is JSON (its Content-Type says so). */
export function isJsonUnary(headers: IncomingHttpHeaders): boolean {
  return PLAIN_UNARY_TYPES.get((headers["content-type"] ?? "").toLowerCase()) === true;
}

/** The kind of a request to a Connect route. */
export function requestKindOf(method: string, headers: IncomingHttpHeaders): ConnectRequestKind {
  const contentType = headers["content-type"] ?? "";
  if (GRPC_WEB_TEXT.test(contentType)) return "grpc-web-text";
  if (grpcWebProtocol.contentTypeRegExp.test(contentType)) return "grpc-web";
  if (connectProtocol.contentTypeStreamRegExp.test(contentType)) return "connect-stream";
  if (method === "GET") return "connect-get";
  const { "content-encoding": coding, "connect-protocol-version": version, "connect-timeout-ms": timeout } = headers;
  const plain =
    method === "POST" &&
    PLAIN_UNARY_TYPES.has(contentType.toLowerCase()) &&
    (coding === undefined || coding === "identity") &&
    (version === undefined || version === "1") &&
    (timeout === undefined || (typeof timeout === "string" && /^\d{1,10}$/.test(timeout)));
  return plain ? "connect-unary-plain" : "connect-unary-other";
}

/** The protocol name a call of this kind reports (HandlerContext.protocolName), as connect-node names it. */
export function protocolNameOf(kind: ConnectRequestKind): string {
  return kind === "grpc-web" || kind === "grpc-web-text" ? "grpc-web" : "connect";
}

/** Milliseconds per unit of a grpc-timeout header (gRPC over HTTP/2: Hours, Minutes, Seconds, millis, micros, nanos). */
const GRPC_TIMEOUT_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * The timeout a request asks for, in milliseconds (connect-timeout-ms, or
 * grpc-timeout for gRPC-Web); undefined when it asks for none or the header
 * is malformed (connect-node answers that itself).
 */
export function requestTimeoutMs(kind: ConnectRequestKind, headers: IncomingHttpHeaders): number | undefined {
  if (kind === "grpc-web" || kind === "grpc-web-text") {
    const m = /^(\d{1,8})([HMSmun])$/.exec(String(headers["grpc-timeout"] ?? ""));
    return m ? Number(m[1]) * GRPC_TIMEOUT_UNITS[m[2]!]! : undefined;
  }
  const raw = headers["connect-timeout-ms"];
  return typeof raw === "string" && /^\d{1,10}$/.test(raw) ? Number(raw) : undefined;
}
