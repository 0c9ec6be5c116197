import http from "node:http";
import type { Socket } from "node:net";
import { Code } from "@connectrpc/connect";
import { ApiError } from "../../domain/errors.js";
import { DEFAULT_ERROR_DOMAIN, restErrorBody, toConnectError } from "../errors.js";

/** How a connection-level HTTP/1.1 error is answered: status, code, reason and message. */
function classify(code: string | undefined): [number, Code, string, string] {
  if (code === "ERR_HTTP_REQUEST_TIMEOUT") return [408, Code.DeadlineExceeded, "REQUEST_TIMEOUT", "The request was not received in time"];
  if (code === "HPE_HEADER_OVERFLOW") return [431, Code.ResourceExhausted, "HEADERS_TOO_LARGE", "The request headers exceed 16 KiB"];
  return [400, Code.InvalidArgument, "MALFORMED_REQUEST", "The request is not valid HTTP/1.1"];
}

/**
 * Answers HTTP/1.1 parse errors, oversized headers and timeouts (before any
 * route runs) with the same error body as every other failure (code,
 * message, and details holding one ErrorInfo), then
 * closes the connection.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const [status, code, reason, message] = classify(err.code);
  const { body } = restErrorBody(toConnectError(new ApiError(code, reason, message), DEFAULT_ERROR_DOMAIN));
  const text = `${JSON.stringify(body)}\n`;
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroy();
}
