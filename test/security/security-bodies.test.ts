/**
 * Issue 21, items 1 and 8: what a request body can cost.
 *
 * A unary call's body is one message: on every Connect and gRPC-Web path
 * (fast path, connect-node, binary and text mode) a second envelope is
 * refused as soon as its prefix arrives, so the server reads at most the
 * limit plus framing; a body left open is dropped after the body timeout.
 * A caller without a valid token gets no body read at all on a method that
 * needs one (REST, Connect, gRPC-Web), and a method that needs none reads at
 * most the anonymous limit. Each test asserts the bytes the server had read
 * from the connection when it answered, not how long anything took.
 */
import assert from "node:assert/strict";
import http from "node:http";
import type net from "node:net";
import { after, before, describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { frame } from "../support/grpc-web-frames.js";
import { startTestServer, type TestServer } from "../support/server.js";

const KiB = 1024;
const MiB = 1024 * KiB;
const LIMIT = 4 * MiB;
const CREATE_GROUP = "/platformapi.iam.v2beta1.GroupsService/CreateGroup";
const EXCHANGE = "/platformapi.oidc.v1.SecurityTokenService/Exchange";
/**
 * What the server may read of a connection beyond what it is willing to
 * take: while a caller is judged the socket's reading is held, so only what
 * arrived with the headers (one 64 KiB read) and the request's own buffer.
 * After answering, a lingering close reads and drops the rest so the client
 * sees the answer, not a reset: that is why the figure is taken when the
 * server first writes, not when the client reads the answer.
 */
const SLACK = 1 * MiB;

/** What the server did with one raw request. */
interface Outcome {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** Bytes the server had read from the connection when it began to answer. */
  serverRead: number;
  /** Bytes the client had written by then. */
  written: number;
}

let srv: TestServer;
/** The server side of every connection, by the client's port. */
const serverSockets = new Map<number, net.Socket>();
/** The bytes each server socket had read when the server first wrote to it (began its answer). */
const readWhenAnswering = new WeakMap<net.Socket, number>();

/** Records socket.bytesRead at the server's first write on it. */
function recordFirstWrite(socket: net.Socket): void {
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
  socket.write = ((...args: unknown[]) => {
    if (!readWhenAnswering.has(socket)) readWhenAnswering.set(socket, socket.bytesRead);
    return write(...args);
  }) as typeof socket.write;
}

before(async () => {
  srv = await startTestServer({ env: { PLATFORM_REQUEST_BODY_TIMEOUT_MS: "1000" } });
  srv.server.app.server.on("connection", (socket: net.Socket) => {
    serverSockets.set(socket.remotePort!, socket);
    recordFirstWrite(socket);
  });
});
after(async () => {
  await srv.close();
});

/**
 * POSTs `chunks` (produced lazily, written with backpressure) on a fresh
 * connection until the server answers; never ends the body when leaveOpen.
 */
function post(path: string, headers: Record<string, string>, chunks: Iterable<Buffer>, leaveOpen = false): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    let written = 0;
    let answered = false;
    const req = http.request(`${srv.url}${path}`, { method: "POST", agent: false, headers });
    req.on("response", (res) => {
      answered = true;
      const socket = serverSockets.get(req.socket!.localPort!);
      const serverRead = socket ? (readWhenAnswering.get(socket) ?? socket.bytesRead) : Number.NaN;
      const parts: Buffer[] = [];
      res.on("data", (c: Buffer) => parts.push(c));
      res.on("end", () => {
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts), serverRead, written });
        req.destroy();
      });
      res.on("error", reject);
    });
    req.on("error", (err) => (answered ? undefined : reject(err)));
    const source = chunks[Symbol.iterator]();
    const pump = () => {
      for (let next = source.next(); !answered && !next.done; next = source.next()) {
        written += next.value.byteLength;
        if (!req.write(next.value)) return void req.once("drain", pump);
      }
      if (!answered && !leaveOpen) req.end();
    };
    pump();
  });
}

/** `count` envelopes of `size` zero bytes each; base64 when text. */
function* envelopes(count: number, size: number, text = false): Generator<Buffer> {
  const one = frame(0, Buffer.alloc(size));
  for (let i = 0; i < count; i++) yield text ? Buffer.from(one.toString("base64")) : one;
}

/** The gRPC status a gRPC-Web answer carries (trailers-only answers carry it in the headers). */
function grpcWebStatus(outcome: Outcome): { code: number; message: string } {
  const inHeaders = outcome.headers["grpc-status"];
  if (inHeaders !== undefined)
    return { code: Number(inHeaders), message: decodeURIComponent(String(outcome.headers["grpc-message"] ?? "")) };
  const text = outcome.body.toString("latin1");
  const trailer = outcome.headers["content-type"]?.includes("text") ? Buffer.from(text, "base64").toString("latin1") : text;
  const code = /grpc-status:\s*(\d+)/.exec(trailer);
  const message = /grpc-message:\s*([^\r\n]*)/.exec(trailer);
  return { code: Number(code?.[1] ?? Number.NaN), message: decodeURIComponent(message?.[1] ?? "") };
}

const GRPC_WEB = { binary: "application/grpc-web+proto", text: "application/grpc-web-text+proto" } as const;
/** 200 envelopes just under the 4 MiB limit: 800 MiB, each envelope acceptable on its own. */
const HUGE = { count: 200, size: LIMIT - KiB };

describe("item 1: a unary call's body is one message, bounded on every Connect and gRPC-Web path", () => {
  for (const mode of ["binary", "text"] as const) {
    test(`gRPC-Web ${mode}, no token, 200 envelopes of ~4 MiB (800 MiB): UNAUTHENTICATED before the body is read`, async () => {
      const out = await post(CREATE_GROUP, { "content-type": GRPC_WEB[mode] }, envelopes(HUGE.count, HUGE.size, mode === "text"));
      assert.equal(grpcWebStatus(out).code, Code.Unauthenticated);
      assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes before answering`);
      assert.equal(out.headers.connection, "close", "the rest of the body is not read");
    });

    test(`gRPC-Web ${mode}, with a token, 200 envelopes of ~4 MiB: the second envelope is refused from its prefix`, async () => {
      const headers = { "content-type": GRPC_WEB[mode], authorization: `Bearer ${srv.adminToken}` };
      const out = await post(CREATE_GROUP, headers, envelopes(HUGE.count, HUGE.size, mode === "text"));
      const status = grpcWebStatus(out);
      assert.equal(status.code, Code.InvalidArgument, status.message);
      assert.match(status.message, /more than one message/);
      // One message and a prefix, plus what arrived alongside; text mode's base64 is 4/3 of it.
      const bound = (mode === "text" ? (4 / 3) * (LIMIT + 10) : LIMIT + 10) + SLACK;
      assert.ok(out.serverRead < bound, `the server read ${out.serverRead} bytes (bound ${Math.round(bound)})`);
      assert.ok(out.written < 200 * MiB, `the client was stopped after ${out.written} of 800 MiB`);
    });
  }

  test("gRPC-Web, with a token: a Content-Length over one message and its prefix is refused before the body is read", async () => {
    const headers = { "content-type": GRPC_WEB.binary, authorization: `Bearer ${srv.adminToken}`, "content-length": String(2 * LIMIT) };
    const out = await post(CREATE_GROUP, headers, envelopes(2, LIMIT - KiB));
    assert.equal(grpcWebStatus(out).code, Code.ResourceExhausted);
    assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes`);
  });

  test("Connect unary (fast path), no token, a 64 MiB body: 401 before the body is read", async () => {
    const chunks = (function* () {
      for (let i = 0; i < 64; i++) yield Buffer.alloc(MiB, 0x20);
    })();
    const out = await post(CREATE_GROUP, { "content-type": "application/json" }, chunks);
    assert.equal(out.status, 401);
    assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes before answering`);
  });

  test("Connect unary (connect-node path: gzip), no token: 401 before the body is read", async () => {
    const headers = { "content-type": "application/json", "content-encoding": "gzip" };
    const out = await post(CREATE_GROUP, headers, envelopes(64, MiB));
    assert.equal(out.status, 401);
    assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes before answering`);
  });

  test("a body left open after one whole message is dropped with its connection at the body timeout (1 s here)", async () => {
    const req = http.request(`${srv.url}${CREATE_GROUP}`, {
      method: "POST",
      agent: false,
      headers: { "content-type": GRPC_WEB.binary, authorization: `Bearer ${srv.adminToken}` },
    });
    const closed = new Promise<string>((resolve) => {
      req.on("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      req.on("response", (res) => resolve(`answered ${res.statusCode}`));
    });
    req.write(frame(0, Buffer.alloc(LIMIT - KiB)));
    // Generous: the timeout is 1 s; the listener's own request timeout (2 minutes) would fail this.
    const outcome = await Promise.race([closed, new Promise<string>((r) => setTimeout(() => r("still open"), 60_000).unref())]);
    req.destroy();
    assert.equal(outcome, "ECONNRESET", "the server closed the connection");
  });
});

describe("item 8: a caller without a valid token costs no body read", () => {
  /** 400,000 unknown keys (3.4 MiB of JSON). */
  const unknownKeys = () => {
    const keys: string[] = [];
    for (let i = 0; i < 400_000; i++) keys.push(`"${i.toString(36)}":0`);
    return Buffer.from(`{${keys.join(",")}}`);
  };

  test("REST: 3.4 MiB of 400k unknown keys without a token is 401 before the body is read", async () => {
    const body = unknownKeys();
    assert.ok(body.byteLength > 3 * MiB && body.byteLength < LIMIT);
    const out = await post("/iam/v2beta1/groups", { "content-type": "application/json" }, [body]);
    assert.equal(out.status, 401);
    assert.equal(JSON.parse(out.body.toString()).details[0].reason, "UNAUTHENTICATED");
    assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} of ${body.byteLength} bytes`);
  });

  test("REST and Connect: with a token, 400k unknown keys are refused naming at most 20 of them", async () => {
    const body = unknownKeys();
    const rest = await post("/iam/v2beta1/groups", { "content-type": "application/json", authorization: `Bearer ${srv.adminToken}` }, [
      body,
    ]);
    assert.equal(rest.status, 400);
    const violations = JSON.parse(rest.body.toString()).details.find((d: { fieldViolations?: unknown[] }) => d.fieldViolations);
    assert.equal(violations.fieldViolations.length, 20);
    const connect = await post(CREATE_GROUP, { "content-type": "application/json", authorization: `Bearer ${srv.adminToken}` }, [body]);
    assert.equal(connect.status, 400);
    const err = errorFromJsonBytes(new Uint8Array(connect.body), undefined, new ConnectError("no error body"));
    assert.equal(err.code, Code.InvalidArgument);
  });

  test("a method that needs no token (token exchange) reads at most 64 KiB: REST 413, Connect and gRPC-Web RESOURCE_EXHAUSTED", async () => {
    const form = Buffer.from(`aud=${"a".repeat(100 * KiB)}`);
    const rest = await post("/sts/exchange", { "content-type": "application/x-www-form-urlencoded" }, [form]);
    assert.equal(rest.status, 413);
    assert.match(JSON.parse(rest.body.toString()).message, /65536 bytes/);
    const connect = await post(EXCHANGE, { "content-type": "application/json" }, [
      Buffer.from(JSON.stringify({ aud: ["a".repeat(100 * KiB)] })),
    ]);
    assert.equal(connect.status, 429);
    const err = errorFromJsonBytes(new Uint8Array(connect.body), undefined, new ConnectError("no error body"));
    assert.equal(err.code, Code.ResourceExhausted);
    const grpcWeb = await post(EXCHANGE, { "content-type": GRPC_WEB.binary }, envelopes(1, 100 * KiB));
    assert.equal(grpcWebStatus(grpcWeb).code, Code.ResourceExhausted);
    for (const out of [rest, connect, grpcWeb]) assert.ok(out.serverRead < SLACK, `the server read ${out.serverRead} bytes`);
  });

  test("a small exchange request without a token is still read and answered by the method itself", async () => {
    const res = await fetch(`${srv.url}/sts/exchange`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "aud=x",
    });
    assert.equal(res.status, 401, "the exchange wants its upstream bearer token");
  });
});
