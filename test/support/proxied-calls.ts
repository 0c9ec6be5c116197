import { once } from "node:events";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { Writable } from "node:stream";
import tls from "node:tls";
import type { RawResponse } from "./from-address.js";

/**
 * Calls made the way a client behind a proxy, or the proxy itself, makes
 * them: from a chosen loopback address (all of 127.0.0.0/8 is loopback on
 * Linux, so each is another peer to the server) and optionally starting the
 * connection with a PROXY protocol header, as HAProxy's send-proxy does.
 */
export interface Origin {
  port: number;
  /** The local address to connect from (default 127.0.0.1). */
  from?: string;
  /** Bytes written before anything else on the connection (a PROXY header). */
  proxyHeader?: Buffer;
  /** TLS after the PROXY header, trusting this CA certificate (the server's is for localhost). */
  tlsCa?: Buffer;
}

/** A TCP connection to the server from origin, its PROXY header (if any) already written, then TLS offering alpn if origin asks. */
export function connectFrom(origin: Origin, alpn = "http/1.1"): net.Socket {
  const socket = net.connect({ host: "127.0.0.1", port: origin.port, localAddress: origin.from ?? "127.0.0.1" });
  if (origin.proxyHeader) socket.write(origin.proxyHeader);
  if (origin.tlsCa === undefined) return socket;
  return tls.connect({ socket, ca: origin.tlsCa, servername: "localhost", ALPNProtocols: [alpn] });
}

/** One HTTP/1.1 request on a connection of its own from origin. */
export function http1From(
  origin: Origin,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: Buffer | string,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      // No agent: only then does node use createConnection. One request per connection.
      {
        host: "127.0.0.1",
        port: origin.port,
        method,
        path,
        headers: { connection: "close", ...headers },
        createConnection: () => connectFrom(origin),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), headers: res.headers }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** A native gRPC (h2c) answer: its grpc-status (from the trailers, or the headers of a trailers-only answer). */
export interface GrpcAnswer {
  grpcStatus: number;
  headers: http2.IncomingHttpHeaders;
}

/** One native gRPC unary call over h2c on a session of its own from origin; message is the encoded request. */
export async function grpcFrom(origin: Origin, path: string, metadata: Record<string, string>, message: Uint8Array): Promise<GrpcAnswer> {
  const scheme = origin.tlsCa === undefined ? "http" : "https";
  const session = http2.connect(`${scheme}://127.0.0.1:${origin.port}`, { createConnection: () => connectFrom(origin, "h2") });
  session.on("error", () => {});
  try {
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers", ...metadata });
    const framed = Buffer.alloc(5 + message.length);
    framed.writeUInt32BE(message.length, 1);
    framed.set(message, 5);
    stream.end(framed);
    const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    let trailers: http2.IncomingHttpHeaders = {};
    stream.on("trailers", (t: http2.IncomingHttpHeaders) => (trailers = t));
    stream.resume();
    await once(stream, "close");
    return { grpcStatus: Number(trailers["grpc-status"] ?? headers["grpc-status"]), headers };
  } finally {
    session.close();
  }
}

/** One HTTP/2 request (h2c, or h2 over TLS) on a session of its own from origin; resolves its status. */
export async function http2From(origin: Origin, headers: http2.OutgoingHttpHeaders, body?: Buffer | string): Promise<number> {
  const scheme = origin.tlsCa === undefined ? "http" : "https";
  const session = http2.connect(`${scheme}://127.0.0.1:${origin.port}`, { createConnection: () => connectFrom(origin, "h2") });
  session.on("error", () => {});
  try {
    const stream = session.request(headers);
    stream.end(body);
    const [response] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    stream.resume();
    await once(stream, "close");
    return Number(response[":status"]);
  } finally {
    session.close();
  }
}

/** The JSON log lines of a server (LOG_LEVEL=info), and a wait for the "rpc" line of a request id. */
export class LogLines {
  private readonly lines: Record<string, unknown>[] = [];
  private readonly waiters = new Map<string, (line: Record<string, unknown>) => void>();
  /** Pass as startTestServer's logStream. */
  readonly stream = new Writable({
    write: (chunk: Buffer, _encoding, done) => {
      for (const text of chunk.toString("utf8").split("\n")) {
        if (text.trim() === "") continue;
        const line = JSON.parse(text) as Record<string, unknown>;
        this.lines.push(line);
        if (line.msg === "rpc") this.waiters.get(String(line.reqId))?.(line);
      }
      done();
    },
  });

  /** The rpc line of the call with this request id, once it is written. */
  rpc(reqId: string): Promise<Record<string, unknown>> {
    const found = this.lines.find((l) => l.msg === "rpc" && l.reqId === reqId);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.waiters.set(reqId, resolve));
  }
}

/** A TCP relay to a server that starts every connection it opens with a fixed header, as HAProxy's send-proxy does. */
export interface HeaderRelay {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Starts a relay on a free loopback port to the server on port, writing header first on each connection. */
export async function headerRelay(port: number, header: Buffer): Promise<HeaderRelay> {
  const sockets = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    const upstream = connectFrom({ port, proxyHeader: header });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => s.destroy());
      s.on("close", () => sockets.delete(s));
    }
    client.pipe(upstream).on("close", () => client.destroy());
    upstream.pipe(client).on("close", () => upstream.destroy());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  relay.listen(0, "127.0.0.1");
  await once(relay, "listening");
  const relayPort = (relay.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${relayPort}`,
    port: relayPort,
    close: async () => {
      for (const s of sockets) s.destroy();
      relay.close();
      await once(relay, "close");
    },
  };
}

/** Resolves true at the socket's first answer byte, false when it closes before any (an 'error' first is a close too). */
export function answeredOrClosed(socket: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    socket.once("data", () => resolve(true));
    socket.once("close", () => resolve(false));
    socket.on("error", () => {});
  });
}
