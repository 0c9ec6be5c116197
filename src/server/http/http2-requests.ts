import http2 from "node:http2";
import { MAX_LINGER_BYTES, MAX_LINGER_MS } from "./lingering-close.js";

/**
 * HTTP/2 streams served by an ordinary request handler (fastify's), the way
 * Node's own HTTP/2 server serves them (its onServerStream): through the
 * compatibility objects Http2ServerRequest and Http2ServerResponse. That is
 * how REST, Connect, gRPC-Web and the plain routes answer on an HTTP/2
 * connection whose sessions grpc-js owns (see grpc/http2.ts).
 */

/** A request handler for HTTP/2 streams: fastify's, whose types name HTTP/1.1's objects. */
export type Http2RequestHandler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void;

/**
 * A response that has no connection to close. Code written for HTTP/1.1
 * (fastify on a body parse error, our refusals of a body still arriving)
 * sets `Connection: close` so that the rest of a body is not read; HTTP/2
 * forbids the header and Node would drop it with a process warning. On
 * HTTP/2 the same intent is served per stream: once the answer is out, a
 * request still sending is reset (serveHttp2Request), whatever the header said.
 */
class StreamResponse extends http2.Http2ServerResponse {
  override setHeader(name: string, value: number | string | readonly string[]): void {
    if (name.length === 10 && name.toLowerCase() === "connection") return;
    super.setHeader(name, value);
  }

  override writeHead(statusCode: number, ...rest: unknown[]): this {
    const headers = rest[rest.length - 1];
    if (headers !== null && typeof headers === "object" && !Array.isArray(headers)) {
      for (const name of Object.keys(headers)) if (name.toLowerCase() === "connection") delete (headers as Record<string, unknown>)[name];
    }
    return (super.writeHead as (code: number, ...args: unknown[]) => this)(statusCode, ...rest);
  }
}

/**
 * Serves one stream with handler, and returns its request (whose body the
 * caller may count: see Http2ServerRequest.push). A request still arriving
 * requestTimeoutMs after its headers is reset (CANCEL). When the answer is
 * complete and the client is still sending, a little more is read and
 * dropped, then the stream is reset (NO_ERROR, lingerOnStream): nothing more
 * of that body would be read, and HTTP/2 flow control would otherwise leave
 * the stream open, its unread bytes held, until the client gave up (RFC 9113
 * §8.1 lets a server answer before the request is complete).
 */
export function serveHttp2Request(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  rawHeaders: string[],
  handler: Http2RequestHandler,
  requestTimeoutMs: number,
): http2.Http2ServerRequest {
  const req = new http2.Http2ServerRequest(stream, headers, {}, rawHeaders);
  const res = new StreamResponse(stream);
  // A request without a body (END_STREAM on its headers, as most GETs) has nothing left to time or cut off.
  if (!stream.endAfterHeaders) {
    // A body trickled or left open is cut off, as HTTP/1.1's requestTimeout does; a slow answer is not.
    const timer = setTimeout(() => {
      if (stream.state.remoteClose !== 1) stream.close(http2.constants.NGHTTP2_CANCEL);
    }, requestTimeoutMs).unref();
    stream.once("close", () => clearTimeout(timer));
    // The stream's own 'finish' (the response's comes only when the stream closes).
    stream.once("finish", () => {
      if (!stream.closed && !stream.destroyed && stream.state.remoteClose !== 1) lingerOnStream(stream, req);
    });
  }
  // As node's server does when it has no 'checkContinue' listener.
  if (headers.expect === "100-continue") res.writeContinue();
  handler(req, res);
  return req;
}

/**
 * The stream of a complete answer whose client is still sending: the rest of
 * a small body (what was in flight with the headers) is read and dropped,
 * so the client sees its stream end cleanly (curl reports a reset stream as
 * an error, however complete the answer); past MAX_LINGER_BYTES or
 * MAX_LINGER_MS, as a lingering HTTP/1.1 close, the stream is reset.
 */
function lingerOnStream(stream: http2.ServerHttp2Stream, req: http2.Http2ServerRequest): void {
  const reset = () => {
    if (!stream.closed && !stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
  };
  const timer = setTimeout(reset, MAX_LINGER_MS).unref();
  stream.once("close", () => clearTimeout(timer));
  let dropped = 0;
  stream.on("data", (chunk: Buffer) => {
    dropped += chunk.byteLength;
    if (dropped > MAX_LINGER_BYTES) reset();
  });
  // Nobody reads the request any more: what reaches it is dropped, and the stream flows.
  req.resume();
  stream.resume();
}
