import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import { test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { GetGroupRequestSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { grpcService, methodDefinition } from "../../src/server/grpc/adapter.js";
import { createOnePortServer, DEFAULT_TIMEOUTS, type OnePortServer, type OnePortTimeouts } from "../../src/server/http/one-port.js";
import { within } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { signalProbe } from "../support/held-create.js";
import { startTestServer } from "../support/server.js";

// ---------------------------------------------------------------------------
// Harness: the one-port listener with a trivial HTTP/1.1 handler and a tiny
// grpc-js server, real sockets on 127.0.0.1, port 0.
// ---------------------------------------------------------------------------

const PEER_PATH = "/test.Probe/Peer";

const bytes = {
  requestSerialize: (b: Buffer) => b,
  requestDeserialize: (b: Buffer) => b,
  responseSerialize: (b: Buffer) => b,
  responseDeserialize: (b: Buffer) => b,
};
const probeDefinition: grpc.ServiceDefinition = {
  peer: { path: PEER_PATH, requestStream: false, responseStream: false, originalName: "peer", ...bytes },
};

/** A grpc-js server whose one unary method answers with call.getPeer(). */
function probeGrpcServer(): grpc.Server {
  const server = new grpc.Server();
  server.addService(probeDefinition, {
    peer: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => callback(null, Buffer.from(call.getPeer())),
  });
  return server;
}

/** A grpc-js client of the probe service at host:port. */
function probeClient(port: number): { peer(): Promise<string>; close(): void } {
  const Ctor = grpc.makeGenericClientConstructor(probeDefinition, "Probe");
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return {
    peer: () =>
      new Promise((resolve, reject) =>
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (client as any).peer(Buffer.alloc(0), (err: grpc.ServiceError | null, res: Buffer) =>
          err ? reject(err) : resolve(res.toString()),
        ),
      ),
    close: () => client.close(),
  };
}

/** Answers every HTTP/1.1 request with "<method> <url>". */
const echoHandler: http.RequestListener = (req, res) => {
  res.setHeader("content-type", "text/plain");
  res.end(`${req.method} ${req.url}`);
};

interface Listening {
  server: OnePortServer;
  port: number;
  close(): Promise<void>;
}

/** createOnePortServer listening on 127.0.0.1:0; close() tears down everything it served. */
async function listen(grpcServer: grpc.Server, timeouts: OnePortTimeouts = DEFAULT_TIMEOUTS, handler = echoHandler): Promise<Listening> {
  const server = createOnePortServer(handler, grpcServer, timeouts);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as net.AddressInfo).port;
  return {
    server,
    port,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      server.drainGrpc(0);
      grpcServer.forceShutdown();
      await within(30_000, closed, "test server close");
    },
  };
}

/**
 * A TCP proxy to 127.0.0.1:targetPort that splits the client's first chunk at
 * `cuts`, writing each piece separately (noDelay, 20 ms apart) so the server
 * reads them as separate TCP segments; the rest is piped through unchanged.
 */
async function splittingProxy(targetPort: number, cuts: number[]): Promise<{ port: number; splits: number[]; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const splits: number[] = [];
  const proxy = net.createServer((down) => {
    const up = net.connect(targetPort, "127.0.0.1");
    up.setNoDelay(true);
    for (const s of [down, up]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => s.destroy());
    }
    down.on("close", () => up.destroy());
    up.on("close", () => down.destroy());
    up.pipe(down);
    down.once("data", (first: Buffer) => {
      down.pause();
      void (async () => {
        if (up.connecting) await once(up, "connect");
        let from = 0;
        for (const at of [...cuts.filter((c) => c < first.length), first.length]) {
          up.write(first.subarray(from, at));
          splits.push(at - from);
          from = at;
          await delay(20);
        }
        down.pipe(up);
      })();
    });
  });
  proxy.listen(0, "127.0.0.1");
  await once(proxy, "listening");
  return {
    port: (proxy.address() as net.AddressInfo).port,
    splits,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}

/** One gRPC unary call over a raw HTTP/2 session: length-prefixed message in, status and message out. */
async function h2Unary(session: http2.ClientHttp2Session, path: string, message: Buffer): Promise<{ grpcStatus?: string; body: Buffer }> {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  message.copy(frame, 5);
  const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
  req.end(frame);
  let grpcStatus: string | undefined;
  const chunks: Buffer[] = [];
  req.on("response", (h) => (grpcStatus ??= h["grpc-status"] as string | undefined));
  req.on("trailers", (t) => (grpcStatus = t["grpc-status"] as string | undefined));
  req.on("data", (c: Buffer) => chunks.push(c));
  await within(30_000, once(req, "end"), "h2 gRPC response");
  const data = Buffer.concat(chunks);
  return { grpcStatus, body: data.subarray(5) };
}

/** An h2c session to the port, connected. */
async function h2Connect(port: number): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  await within(30_000, once(session, "connect"), "h2c connect");
  return session;
}

/** A raw TCP connection; `closed` resolves with every byte the server sent once it closes the connection. */
async function rawSocket(port: number): Promise<{ socket: net.Socket; closed: Promise<string> }> {
  const socket = net.connect(port, "127.0.0.1");
  const chunks: Buffer[] = [];
  socket.on("data", (c: Buffer) => chunks.push(c));
  socket.on("error", () => {});
  const closed = once(socket, "close").then(() => Buffer.concat(chunks).toString("latin1"));
  await once(socket, "connect");
  return { socket, closed };
}

/** An HTTP/1.1 GET through `agent`; resolves with status, body and whether the socket was reused. */
function h1Get(
  port: number,
  path: string,
  agent: http.Agent | false,
): Promise<{ status: number; body: string; reused: boolean; localPort?: number }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode!, body, reused: req.reusedSocket, localPort: res.socket?.localPort }));
    });
    req.on("error", reject);
  });
}

// ---------------------------------------------------------------------------
// Pitfall 1: the h2 preface must reach nghttp2 even though we peeked at it.
// Node 20.20's Http2Session also replays bytes already buffered on the socket
// (nodejs/node#35475), so these guard the behaviour, whichever mechanism
// delivers it.
// ---------------------------------------------------------------------------

test("pitfall 1: gRPC over h2c succeeds when the preface arrives in three TCP segments", async () => {
  const srv = await listen(probeGrpcServer());
  const proxy = await splittingProxy(srv.port, [8, 16]);
  const direct = probeClient(srv.port);
  const split = probeClient(proxy.port);
  try {
    // Unsplit first: the peeked preface is replayed to grpc-js at all.
    assert.match(await direct.peer(), /^127\.0\.0\.1:\d+$/);
    assert.match(await split.peer(), /^127\.0\.0\.1:\d+$/);
    assert.deepEqual(proxy.splits.slice(0, 2), [8, 8], "the proxy really split the preface");
    assert.ok(proxy.splits.length >= 3);
  } finally {
    direct.close();
    split.close();
    await proxy.close();
    await srv.close();
  }
});

test("pitfall 1: an HTTP/1.1 request split after its first byte is answered intact", async () => {
  const srv = await listen(probeGrpcServer());
  const proxy = await splittingProxy(srv.port, [1]);
  try {
    const res = await within(30_000, h1Get(proxy.port, "/split/path?x=1", false), "split HTTP/1.1 request");
    assert.equal(res.status, 200);
    assert.equal(res.body, "GET /split/path?x=1");
    assert.equal(proxy.splits[0], 1);
  } finally {
    await proxy.close();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// Pitfall 2: Nagle. The server end of an h2c connection gets TCP_NODELAY.
// ---------------------------------------------------------------------------

test("pitfall 2: the server socket of an h2c connection has noDelay set on its TCP handle", async () => {
  const srv = await listen(probeGrpcServer());
  const calls: { remotePort?: number; enable: boolean; tcpHandle: boolean }[] = [];
  const original = net.Socket.prototype.setNoDelay;
  net.Socket.prototype.setNoDelay = function (this: net.Socket, enable?: boolean) {
    // Http2Session's own setNoDelay reaches only the JSStreamSocket wrapper,
    // whose handle cannot set TCP_NODELAY: count calls on the real TCP handle.
    const handle = (this as unknown as { _handle?: { setNoDelay?: unknown } })._handle;
    calls.push({ remotePort: this.remotePort, enable: enable !== false, tcpHandle: typeof handle?.setNoDelay === "function" });
    return original.call(this, enable);
  };
  let session: http2.ClientHttp2Session | undefined;
  try {
    session = await h2Connect(srv.port);
    const clientPort = session.socket.localPort;
    const res = await h2Unary(session, PEER_PATH, Buffer.alloc(0));
    assert.equal(res.grpcStatus, "0");
    const serverEnd = calls.filter((c) => c.remotePort === clientPort);
    assert.ok(
      serverEnd.some((c) => c.enable && c.tcpHandle),
      `no setNoDelay(true) on the server's TCP socket for client port ${clientPort}: ${JSON.stringify(serverEnd)}`,
    );
  } finally {
    net.Socket.prototype.setNoDelay = original;
    session?.destroy();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// Pitfall 3: grpc-js sees the real peer address through the JS stream wrapper.
// ---------------------------------------------------------------------------

test("pitfall 3: call.getPeer() is the client's 127.0.0.1:<port>", async () => {
  const srv = await listen(probeGrpcServer());
  const client = probeClient(srv.port);
  let session: http2.ClientHttp2Session | undefined;
  try {
    session = await h2Connect(srv.port);
    const res = await h2Unary(session, PEER_PATH, Buffer.alloc(0));
    assert.equal(res.grpcStatus, "0");
    assert.equal(res.body.toString(), `127.0.0.1:${session.socket.localPort}`);

    const peer = await client.peer();
    const m = /^127\.0\.0\.1:(\d+)$/.exec(peer);
    assert.ok(m, `peer is ${peer}`);
    assert.notEqual(Number(m[1]), srv.port, "the peer is the client end, not the listener");
  } finally {
    session?.destroy();
    client.close();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// Pitfall 4: 'listening'/'close' forwarding, hence timeouts and graceful close.
// ---------------------------------------------------------------------------

const SHORT: OnePortTimeouts = { firstBytes: 500, keepAlive: 500, headers: 500, request: 2000 };

test("pitfall 4: a partial HTTP/1.1 request head is timed out by headersTimeout", async () => {
  const srv = await listen(probeGrpcServer(), SHORT);
  const clientErrors: string[] = [];
  srv.server.on("clientError", (err: NodeJS.ErrnoException, socket: net.Socket) => {
    clientErrors.push(err.code ?? String(err));
    if (err.code === "ERR_HTTP_REQUEST_TIMEOUT" && socket.writable) socket.end("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n");
    else socket.destroy();
  });
  const { socket, closed } = await rawSocket(srv.port);
  try {
    socket.write("GET /slow HTTP/1.1\r\nHost: x\r\nX-Partial: ");
    const received = await within(30_000, closed, "server closes a connection stuck in its request head");
    assert.match(received, /^HTTP\/1\.1 408 /);
    assert.equal(clientErrors[0], "ERR_HTTP_REQUEST_TIMEOUT");
  } finally {
    socket.destroy();
    await srv.close();
  }
});

test("pitfall 4: a connection that sends nothing is closed after firstBytes", async () => {
  const srv = await listen(probeGrpcServer(), SHORT);
  const { socket, closed } = await rawSocket(srv.port);
  try {
    assert.equal(await within(30_000, closed, "server closes a silent connection"), "");
  } finally {
    socket.destroy();
    await srv.close();
  }
});

test("pitfall 4: close() completes with an idle HTTP/1.1 keep-alive and an idle h2c gRPC connection open", async () => {
  // Long keep-alive: only closeIdleConnections (which needs 'listening') and
  // the gRPC drain can let close() finish within the bound.
  const grpcServer = probeGrpcServer();
  const srv = await listen(grpcServer, { ...SHORT, keepAlive: 60_000 });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const client = probeClient(srv.port);
  try {
    const first = await h1Get(srv.port, "/a", agent);
    assert.equal(first.status, 200);
    assert.match(await client.peer(), /^127\.0\.0\.1:\d+$/);
    const idleSockets = Object.values(agent.freeSockets).flat();
    assert.equal(idleSockets.length, 1, "the HTTP/1.1 connection stays open and idle");
    const h1Closed = once(idleSockets[0]!, "close");

    // What app.ts's shutdown does, minus the grace timers.
    const closed = new Promise<void>((resolve, reject) => srv.server.close((err) => (err ? reject(err) : resolve())));
    srv.server.closeIdleConnections();
    srv.server.drainGrpc(1000);
    await within(30_000, closed, "close() with idle connections open");
    await within(30_000, h1Closed, "the idle keep-alive connection is closed by the server");
  } finally {
    client.close();
    agent.destroy();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// Pitfall 5: clientError reaches fastify's clientErrorHandler (ours: the API's error shape).
// ---------------------------------------------------------------------------

test("pitfall 5: garbage on HTTP/1.1 gets a 400 in the API's error shape and the server keeps serving", async () => {
  const srv = await startTestServer();
  try {
    for (const garbage of ["BLAH /\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"]) {
      const { socket, closed } = await rawSocket(srv.port);
      try {
        socket.write(garbage);
        const received = await within(30_000, closed, "server answers garbage");
        assert.match(received, /^HTTP\/1\.1 400 Bad Request\r\n/, JSON.stringify(received));
        const body = JSON.parse(received.slice(received.indexOf("\r\n\r\n") + 4));
        assert.equal(body.code, 3);
        assert.equal(body.details.length, 1);
        assert.equal(body.details[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
        assert.equal(body.details[0].reason, "MALFORMED_REQUEST");
      } finally {
        socket.destroy();
      }
    }
    const { socket, closed } = await rawSocket(srv.port);
    try {
      socket.write(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
      const received = await within(30_000, closed, "server answers oversized headers");
      assert.match(received, /^HTTP\/1\.1 431 /);
      assert.equal(JSON.parse(received.slice(received.indexOf("\r\n\r\n") + 4)).code, 8);
    } finally {
      socket.destroy();
    }
    const res = await fetch(`${srv.url}/healthz`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { status: "ok" });
  } finally {
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// grpc-js emits 'cancelled' at the end of every call; only a real cancel aborts ctx.signal.
// ---------------------------------------------------------------------------

test("grpc adapter: ctx.signal stays unaborted after a successful call, aborts when the client cancels", async () => {
  const { signals, getGroup, slowStarted, release } = signalProbe();
  const { definition, implementation } = grpcService({ service: GroupsService, handlers: { getGroup } });
  assert.deepEqual(Object.keys(definition), ["getGroup"]);

  // Observe grpc-js's own end-of-call 'cancelled' so the check below runs after it.
  const endOfCall = new Map<string, Promise<void>>();
  const grpcServer = new grpc.Server();
  const inner = implementation.getGroup as grpc.handleUnaryCall<{ uid: string }, unknown>;
  grpcServer.addService(definition, {
    getGroup: (call: grpc.ServerUnaryCall<{ uid: string }, unknown>, callback: grpc.sendUnaryData<unknown>) => {
      endOfCall.set(
        call.request.uid,
        once(call, "cancelled").then(() => undefined),
      );
      inner(call, callback);
    },
  });
  const srv = await listen(grpcServer);
  const Ctor = grpc.makeGenericClientConstructor({ getGroup: methodDefinition(GroupsService, GroupsService.method.getGroup) }, "Groups");
  const client = new Ctor(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    getGroup(req: unknown, cb: (err: grpc.ServiceError | null, res?: { uid: string }) => void): grpc.ClientUnaryCall;
  };
  try {
    const fast = await new Promise<{ uid: string }>((resolve, reject) =>
      client.getGroup(create(GetGroupRequestSchema, { uid: "fast" }), (err, res) => (err ? reject(err) : resolve(res!))),
    );
    assert.equal(fast.uid, "fast");
    await within(30_000, endOfCall.get("fast")!, "grpc-js emits 'cancelled' at the end of a successful call");
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(signals.get("fast")!.aborted, false, "a successful call's signal must not be aborted");

    const outcome = new Promise<grpc.ServiceError | null>((resolve) => {
      const call = client.getGroup(create(GetGroupRequestSchema, { uid: "slow" }), (err) => resolve(err));
      void slowStarted.then(() => call.cancel());
    });
    await within(30_000, slowStarted, "slow handler starts");
    const signal = signals.get("slow")!;
    if (!signal.aborted) await within(30_000, once(signal, "abort"), "the handler's signal aborts on client cancel");
    assert.equal(signal.aborted, true);
    assert.equal((await outcome)?.code, grpc.status.CANCELLED);
  } finally {
    release();
    client.close();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// Deliberate limit: every h2c connection is gRPC; REST over h2c gets grpc-js's 415.
// ---------------------------------------------------------------------------

test("REST over h2c on the one port: GET /healthz is 200 as over HTTP/1.1 (test/protocols/http2-protocols.test.ts has the rest)", async () => {
  const srv = await startTestServer();
  let session: http2.ClientHttp2Session | undefined;
  try {
    assert.equal((await fetch(`${srv.url}/healthz`)).status, 200);
    session = await h2Connect(srv.port);
    const req = session.request({ ":method": "GET", ":path": "/healthz" });
    req.end();
    req.resume();
    const [headers] = (await within(30_000, once(req, "response"), "h2c response")) as [http2.IncomingHttpHeaders];
    assert.equal(headers[":status"], 200);
    await within(30_000, once(req, "close"), "h2c stream close");
  } finally {
    session?.destroy();
    await srv.close();
  }
});

// ---------------------------------------------------------------------------
// HTTP/1.1 keep-alive and h2c gRPC share the port at the same time.
// ---------------------------------------------------------------------------

test("HTTP/1.1 keep-alive reuses one connection while h2c gRPC works on the same port", async () => {
  const srv = await startTestServer();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const health = grpcClient(Health, srv.port);
  try {
    const first = await h1Get(srv.port, "/healthz", agent);
    assert.equal(first.status, 200);
    assert.equal(first.reused, false);

    // gRPC while the HTTP/1.1 connection is open, and concurrently with the next request.
    const [check, second] = await Promise.all([health.call("check", { service: "" }), h1Get(srv.port, "/readyz", agent)]);
    assert.equal(check.status, 1, "SERVING");
    assert.equal(second.status, 200);
    assert.deepEqual(JSON.parse(second.body), { status: "ready" });
    assert.equal(second.reused, true, "the second request reuses the first connection");
    assert.equal(second.localPort, first.localPort);
  } finally {
    health.close();
    agent.destroy();
    await srv.close();
  }
});
