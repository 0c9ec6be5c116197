import diagnostics from "node:diagnostics_channel";
import http from "node:http";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { defaultToken } from "./server.js";

/** The connect-node client transports the one port serves. */
export type TransportKind =
  | "connect-h1"
  | "connect-get-h1"
  | "grpc-web-h1"
  | "grpc-h2c"
  | "connect-h2c"
  | "connect-get-h2c"
  | "grpc-web-h2c";

/** A transport plus the connections it owns, closed by the test that made it. */
export interface TestTransport {
  kind: TransportKind;
  transport: Transport;
  /** HTTP/1.1 requests sent so far, in order, as "METHOD /path" (e.g. Connect GET). Empty for h2c. */
  requests: string[];
  close(): void;
}

/**
 * A connect-node transport to baseUrl. HTTP/1.1 transports get their own
 * keep-alive agent and the h2c one its own session, so close() leaves no
 * socket behind.
 */
export function testTransport(kind: TransportKind, baseUrl: string, token: string | undefined = defaultToken(baseUrl)): TestTransport {
  // Sends the bearer token, by default the port's administrator token.
  const interceptors: Interceptor[] = token ? [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))] : [];
  if (kind === "grpc-h2c") {
    const sessionManager = new Http2SessionManager(baseUrl);
    // connect-node 2.x gRPC transports always speak HTTP/2 (here h2c, prior knowledge).
    const transport = createGrpcTransport({ baseUrl, sessionManager, interceptors });
    return { kind, transport, requests: [], close: () => sessionManager.abort() };
  }
  if (kind === "connect-h2c" || kind === "connect-get-h2c" || kind === "grpc-web-h2c") {
    // HTTP/2 with prior knowledge, as connect-web's HTTP/2 transports and proxies with an h2c upstream speak it.
    const sessionManager = new Http2SessionManager(baseUrl);
    const transport =
      kind === "grpc-web-h2c"
        ? createGrpcWebTransport({ baseUrl, httpVersion: "2", sessionManager, interceptors })
        : createConnectTransport({ baseUrl, httpVersion: "2", sessionManager, interceptors, useHttpGet: kind === "connect-get-h2c" });
    return { kind, transport, requests: [], close: () => sessionManager.abort() };
  }
  const agent = new http.Agent({ keepAlive: true });
  // What went on the wire: interceptors run before connect-node turns a POST into a GET.
  const requests: string[] = [];
  const seen = new WeakSet<http.ClientRequest>(); // Node may publish a request twice (flushHeaders, then end)
  const onStart = (message: unknown) => {
    const { request } = message as { request: http.ClientRequest & { agent?: http.Agent } };
    if (request.agent !== agent || seen.has(request)) return;
    seen.add(request);
    requests.push(`${request.method} ${request.path.split("?")[0]}`);
  };
  diagnostics.subscribe("http.client.request.start", onStart);
  const nodeOptions = { agent };
  const transport =
    kind === "grpc-web-h1"
      ? createGrpcWebTransport({ baseUrl, httpVersion: "1.1", nodeOptions, interceptors })
      : createConnectTransport({ baseUrl, httpVersion: "1.1", nodeOptions, interceptors, useHttpGet: kind === "connect-get-h1" });
  return {
    kind,
    transport,
    requests,
    close() {
      diagnostics.unsubscribe("http.client.request.start", onStart);
      agent.destroy();
    },
  };
}
