import http from "node:http";
import net from "node:net";
import * as grpc from "@grpc/grpc-js";
import { DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, defaultMaxConnections } from "../../config.js";
import { createClientAddresses, type ClientAddresses } from "./client-address.js";
import { createConnectionGate, type ConnectionLimits } from "./connection-limits.js";
import { trackIdleConnections } from "./idle-close.js";
import { lingerOnClose, MAX_LINGER_MS } from "./lingering-close.js";
import { boundPipelining } from "./pipelining.js";
import { readProxyHeader } from "./proxy-protocol.js";
import { isTlsHandshake, refusePlaintext, type TlsTermination } from "./tls.js";

/** The HTTP/2 connection preface every gRPC client sends first (RFC 9113 §3.4). */
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** Timeouts of the one-port listener, in milliseconds. */
export interface OnePortTimeouts {
  /** A connection must send its first bytes within this time. */
  firstBytes: number;
  /** An idle HTTP/1.1 keep-alive connection is closed after this long. */
  keepAlive: number;
  /** A request's headers must be complete this long after its first byte; longer than keepAlive (see timeoutsFor). */
  headers: number;
  /** A whole request must arrive within this time. */
  request: number;
  /** An HTTP/2 connection with no stream open this long is closed (default: the gRPC server's, 5 minutes). */
  http2Idle?: number;
}

/**
 * The listener's timeouts for the configured keep-alive and HTTP/2 idle
 * timeouts. The headers timeout stays above the keep-alive timeout (the
 * usual advice for Node behind a load balancer) and the request timeout
 * above both.
 */
export function timeoutsFor(keepAliveMs: number, http2IdleMs: number): OnePortTimeouts {
  const headers = keepAliveMs + 1_000;
  return { firstBytes: 10_000, keepAlive: keepAliveMs, headers, request: Math.max(120_000, headers + 1_000), http2Idle: http2IdleMs };
}

export const DEFAULT_TIMEOUTS: OnePortTimeouts = timeoutsFor(65_000, 300_000);

/** The connection caps when none are given: the settings' defaults (see connection-limits.ts). */
function defaultConnectionLimits(): ConnectionLimits {
  return { total: defaultMaxConnections(), perAddress: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS };
}

/** The front listener plus the hooks fastify and our shutdown call. */
export interface OnePortServer extends net.Server {
  /** Closes each HTTP/1.1 keep-alive connection once it has been idle a moment (idle-close.ts), until none is left. */
  closeIdleConnections(): void;
  /** Destroys every connection, HTTP/1.1 and HTTP/2 alike. */
  closeAllConnections(): void;
  closeHttp2Sessions(): void;
  /** Sends GOAWAY on every gRPC connection; they close once their calls finish or after graceMs. */
  drainGrpc(graceMs: number): void;
}

/**
 * One TCP listener for every protocol. It peeks at each connection's first
 * bytes: the HTTP/2 preface (prior knowledge) goes to grpc-js through its
 * connection injector, which serves native gRPC streams and hands every other
 * stream to fastify's handler (grpc/http2.ts); anything else goes to an
 * HTTP/1.1 server running the same handler. So REST, Connect, gRPC-Web and
 * the plain routes answer on both, gRPC on HTTP/2. Connections
 * over the caps are reset before any of that, and with PROXY protocol on
 * (clients.proxyProtocol) its header is read first; an HTTP/1.1 connection may have
 * at most MAX_PIPELINED_REQUESTS requests waiting for answers.
 */
export function createOnePortServer(
  handler: http.RequestListener,
  grpcServer: grpc.Server,
  timeouts: OnePortTimeouts = DEFAULT_TIMEOUTS,
  limits: ConnectionLimits = defaultConnectionLimits(),
  clients: ClientAddresses = createClientAddresses(),
  tls?: TlsTermination,
): OnePortServer {
  const h1 = http.createServer(
    {
      keepAliveTimeout: timeouts.keepAlive,
      headersTimeout: timeouts.headers,
      requestTimeout: timeouts.request,
      // Node checks those two deadlines only every connectionsCheckingInterval
      // (default 30 s), so a 10 s headers timeout would fire after up to 40 s.
      connectionsCheckingInterval: Math.max(50, Math.min(30_000, timeouts.headers / 4, timeouts.request / 4)),
      noDelay: true,
    },
    boundPipelining(handler),
  );
  const injector = grpcServer.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const linger = Math.min(timeouts.keepAlive, MAX_LINGER_MS);
  const h2Sockets = new Set<net.Socket>();
  const trackHttp2 = (socket: net.Socket) => {
    h2Sockets.add(socket);
    // grpc-js closes an idle or drained session politely: GOAWAY, our FIN,
    // then it waits for the peer's. A peer that never sends one would hold
    // the socket, and a shutdown, forever: it gets `linger` ms to do so.
    socket.once("finish", () => setTimeout(() => socket.destroy(), linger).unref());
    socket.once("close", () => h2Sockets.delete(socket));
  };

  /** Hands a connection speaking HTTP/2 (h2c by its preface, or h2 by ALPN) to grpc-js. */
  const toHttp2 = (socket: net.Socket) => {
    trackHttp2(socket);
    injector.injectConnection(socket);
  };
  /** Hands a connection speaking HTTP/1.x (plaintext, or TLS with ALPN http/1.1 or none) to the HTTP/1.1 server. */
  const idle = trackIdleConnections(h1);
  const toHttp1 = (socket: net.Socket) => {
    lingerOnClose(socket, linger);
    idle.track(socket);
    h1.emit("connection", socket);
  };
  const startTls = tls?.handler((secure) => (secure.alpnProtocol === "h2" ? toHttp2(secure) : toHttp1(secure)), timeouts.firstBytes);

  const gate = createConnectionGate(limits, clients);
  const front = net.createServer((socket) => {
    if (!gate.admit(socket)) return;
    // The PROXY header comes first: the client it names is who the per-address cap and everything after see.
    if (clients.proxyProtocol) readProxyHeader(socket, clients, timeouts.firstBytes, () => gate.admitClient(socket) && peek(socket));
    else peek(socket);
  }) as OnePortServer;
  /** Reads a connection's first bytes and hands it to HTTP/2 (gRPC) or HTTP/1.1 by what they are. */
  function peek(socket: net.Socket): void {
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), timeouts.firstBytes);
    const onError = () => socket.destroy();
    socket.on("error", onError);
    const onReadable = () => {
      let chunk: Buffer | null;
      while ((chunk = socket.read() as Buffer | null) !== null) buf = Buffer.concat([buf, chunk]);
      if (buf.length === 0) return;
      const n = Math.min(buf.length, PREFACE.length);
      const isH2 = buf.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isH2 && buf.length < PREFACE.length) return;
      clearTimeout(timer);
      socket.off("readable", onReadable);
      socket.off("error", onError);
      // Without this, Nagle plus delayed ACK holds small h2 frames ~40 ms.
      socket.setNoDelay(true);
      socket.unshift(buf);
      if (startTls !== undefined) {
        // TLS sits between the PROXY header and the protocols: ALPN picks HTTP/2 or HTTP/1.1 instead of the first bytes.
        if (isTlsHandshake(buf)) startTls(socket);
        else refusePlaintext(socket, isH2);
      } else if (isH2) {
        // Node's Http2Session (20.20 and later) replays bytes left in the socket's read
        // buffer, so the unshifted preface reaches nghttp2 on the native
        // handle (no JSStreamSocket wrapper, which cost ~10% and lost the peer
        // address). test/protocols/one-port.test.ts guards a preface split across writes.
        toHttp2(socket);
      } else {
        toHttp1(socket);
      }
    };
    socket.on("readable", onReadable);
    socket.on("close", () => clearTimeout(timer));
  }

  // http.Server tracks connections (idle close, header and request timeouts)
  // only after its own 'listening' event, which a never-bound server lacks.
  front.on("listening", () => h1.emit("listening"));
  front.on("close", () => h1.close());
  h1.on("clientError", (err, socket) => {
    if (front.listenerCount("clientError") > 0) front.emit("clientError", err, socket);
    else socket.destroy();
  });
  front.closeIdleConnections = () => idle.closeWhenQuiet();
  front.closeAllConnections = () => {
    h1.closeAllConnections();
    for (const socket of h2Sockets) socket.destroy();
  };
  // fastify calls this on close, right after shutdown's drainGrpc(graceMs).
  // drain(0) here would cut the in-flight calls that grace period protects;
  // the request timeout only bounds a close() made without drainGrpc.
  front.closeHttp2Sessions = () => injector.drain(timeouts.request);
  front.drainGrpc = (graceMs) => injector.drain(graceMs);
  return front;
}
