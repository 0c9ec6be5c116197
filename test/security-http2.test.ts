/**
 * Issue 11, the h2c side: the limits every HTTP/2 connection is told about
 * and held to (concurrent streams, header-list size, idle time, unfinished
 * request bytes per connection, per client address and per process), and the
 * google.rpc.Status on the errors grpc-js writes itself.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";
import { HealthCheckRequestSchema } from "../gen/grpc/health/v1/health_pb.js";
import { GetGroupRequestSchema } from "../gen/platformapi/iam/v2beta1/groups_pb.js";
import { startServerProcess, stopServerProcess, type ServerProcess } from "../scripts/support/cli-server.js";
import { DEFAULT_TIMEOUTS } from "../src/server/http/one-port.js";
import { within } from "./support/assertions.js";
import { memoryOf } from "./support/bombs.js";
import { checkGrpcResult, rawGrpcClient } from "./support/fuzz-grpc.js";
import { grpcStatus } from "./support/grpc.js";
import { encodeFrame, END_STREAM, FrameType, grpcPrefix, grpcRequestHeaders, headerBlock, rawH2 } from "./support/raw-h2.js";
import { startTestServer, type TestServer } from "./support/server.js";

const MiB = 1024 * 1024;
const HEALTH_CHECK = "/grpc.health.v1.Health/Check";
const GET_GROUP = "/platformapi.iam.v2beta1.GroupsService/GetGroup";
const REFUSED_STREAM = 0x7;
/** How long a test waits for something that must happen: a liveness bound, generous for a loaded machine, never a timing assertion. */
const LIVENESS_MS = 30_000;
const ENHANCE_YOUR_CALM = 0xb;

/**
 * An h2c session to the port, its SETTINGS received (and so acknowledged).
 * maxSessionMemory is in MB: with Node's default (10) a client with many
 * uploads pending drops the server's answers.
 */
async function politeSession(port: number, maxSessionMemory = 10): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`http://127.0.0.1:${port}`, { maxSessionMemory });
  session.on("error", () => {});
  await within(LIVENESS_MS, once(session, "remoteSettings"), "server SETTINGS");
  return session;
}

/** A Health.Check over a raw node:http2 stream with extra headers: the response headers, trailers and the stream's reset code. */
async function healthCheck(session: http2.ClientHttp2Session, extra: http2.OutgoingHttpHeaders = {}) {
  const req = session.request({ ":method": "POST", ":path": HEALTH_CHECK, "content-type": "application/grpc", te: "trailers", ...extra });
  req.on("error", () => {});
  const message = toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "" }));
  req.end(Buffer.concat([grpcPrefix(message.length), message]));
  req.resume();
  let status: string | undefined;
  req.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
  req.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
  await within(LIVENESS_MS, new Promise((resolve) => req.once("close", resolve)), "health check stream closes");
  return { grpcStatus: status, rstCode: req.rstCode };
}

/** How one stream of partialMessages ended up: answered RESOURCE_EXHAUSTED, reset without an answer, or still open. */
interface PartialStream {
  /** Settles once the stream is refused or closed, or all its partial bytes went out (so the server has read them). */
  settled: Promise<void>;
  /** The refusal's status and details, once answered. */
  answer?: { grpcStatus?: string; details?: Buffer };
  /** The reset code, once closed without an answer. */
  rstCode?: number;
  /** The client's side of the stream (to reset it). */
  req: http2.ClientHttp2Stream;
}

/**
 * Opens `count` GetGroup streams, each declaring a `declared`-byte message
 * and sending `partial` bytes of it, never the rest. A write completes only
 * when the server's flow-control window let its bytes out, that is once the
 * server has read all but a window of them: so every stream settles on an
 * event (refused, or sent and held), never on a timer.
 */
function partialMessages(session: http2.ClientHttp2Session, count: number, partial: number, declared = 4 * MiB): PartialStream[] {
  return Array.from({ length: count }, () => {
    const req = session.request({ ":method": "POST", ":path": GET_GROUP, "content-type": "application/grpc", te: "trailers" });
    req.on("error", () => {});
    const stream: PartialStream = { settled: Promise.resolve(), req };
    stream.settled = new Promise<void>((resolve) => {
      req.on("response", (h) => {
        const bin = h["grpc-status-details-bin"];
        stream.answer = {
          grpcStatus: h["grpc-status"] as string | undefined,
          details: typeof bin === "string" ? Buffer.from(bin, "base64") : undefined,
        };
        resolve();
      });
      req.on("close", () => {
        if (!stream.answer) stream.rstCode = req.rstCode;
        resolve();
      });
      req.write(grpcPrefix(declared));
      req.write(Buffer.alloc(partial, 0x61), () => resolve());
    });
    return stream;
  });
}

/** Streams neither answered nor reset: their partial bytes are held by the server. */
const heldOf = (streams: PartialStream[]) => streams.filter((s) => !s.answer && s.rstCode === undefined);

/** The reasons of the refused streams' ErrorInfo, after checking each is RESOURCE_EXHAUSTED with exactly one. */
function refusalReasons(streams: PartialStream[]): string[] {
  return streams
    .filter((s) => s.answer)
    .map((o) => {
      assert.equal(o.answer!.grpcStatus, "8");
      const status = fromBinary(StatusSchema, o.answer!.details!);
      assert.equal(status.code, 8);
      const infos = status.details.filter((d) => d.typeUrl.endsWith("google.rpc.ErrorInfo")).map((d) => anyUnpack(d, ErrorInfoSchema)!);
      assert.equal(infos.length, 1);
      return infos[0]!.reason;
    });
}

describe("HTTP/2 SETTINGS and stream limits", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  test("the server's SETTINGS carry MAX_CONCURRENT_STREAMS 100 and MAX_HEADER_LIST_SIZE 16384", async () => {
    const session = await politeSession(srv.port);
    try {
      assert.equal(session.remoteSettings.maxConcurrentStreams, 100);
      assert.equal(session.remoteSettings.maxHeaderListSize, 16384);
    } finally {
      session.destroy();
    }
  });

  test("a 101st concurrent stream is refused (REFUSED_STREAM) while the first 100 stay served", async () => {
    // A raw client that has not acknowledged the SETTINGS yet: nghttp2 refuses the stream alone.
    const client = await rawH2(srv.port);
    try {
      await client.waitFor((f) => f.type === FrameType.SETTINGS, LIVENESS_MS, "server SETTINGS");
      for (let i = 0; i < 101; i++) client.write(grpcRequestHeaders(1 + 2 * i, HEALTH_CHECK));
      const reset = await client.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 201, LIVENESS_MS, "stream 201 reset");
      assert.equal(reset.payload.readUInt32BE(0), REFUSED_STREAM);
      assert.deepEqual(
        client.frames.filter((f) => f.type === FrameType.RST_STREAM).map((f) => f.streamId),
        [201],
        "only the 101st is refused",
      );
      // Stream 1 finishes its request and is answered.
      client.write(encodeFrame(FrameType.DATA, END_STREAM, 1, grpcPrefix(0)));
      await client.waitFor(
        (f) => f.type === FrameType.HEADERS && f.streamId === 1 && (f.flags & END_STREAM) !== 0,
        LIVENESS_MS,
        "stream 1 trailers",
      );
    } finally {
      client.close();
    }
    // Once the SETTINGS are acknowledged, exceeding them is a connection error.
    const acked = await rawH2(srv.port);
    try {
      await acked.ackSettings();
      for (let i = 0; i < 101; i++) acked.write(grpcRequestHeaders(1 + 2 * i, HEALTH_CHECK));
      const goaway = await acked.waitFor((f) => f.type === FrameType.GOAWAY, LIVENESS_MS, "GOAWAY");
      assert.ok(goaway.payload.readUInt32BE(0) < 201, "stream 201 was never accepted");
      assert.equal(
        acked.frames.some((f) => f.type === FrameType.HEADERS && f.streamId === 201),
        false,
      );
    } finally {
      acked.close();
    }
  });

  test("a header list over 16 KiB is refused (ENHANCE_YOUR_CALM), acknowledged or not; 12 KiB is served", async () => {
    const session = await politeSession(srv.port);
    try {
      assert.deepEqual(await healthCheck(session, { "x-big": "a".repeat(12 * 1024) }), { grpcStatus: "0", rstCode: 0 });
      const big = await healthCheck(session, { "x-big": "a".repeat(17 * 1024) });
      assert.equal(big.rstCode, ENHANCE_YOUR_CALM);
      assert.equal(big.grpcStatus, undefined, "never answered");
      assert.deepEqual(await healthCheck(session), { grpcStatus: "0", rstCode: 0 }, "the connection keeps serving");
    } finally {
      session.destroy();
    }
    // Before its SETTINGS are acknowledged, nghttp2 alone would allow 64 KiB.
    const raw = await rawH2(srv.port);
    try {
      await raw.waitFor((f) => f.type === FrameType.SETTINGS, LIVENESS_MS, "server SETTINGS");
      const block = headerBlock([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", HEALTH_CHECK],
        [":authority", "localhost"],
        ["content-type", "application/grpc"],
        ["x-big", "a".repeat(16 * 1024)],
      ]);
      const END_HEADERS = 0x4;
      raw.write(
        encodeFrame(FrameType.HEADERS, 0, 1, block.subarray(0, 16_000)),
        encodeFrame(FrameType.CONTINUATION, END_HEADERS, 1, block.subarray(16_000)),
      );
      raw.write(encodeFrame(FrameType.DATA, END_STREAM, 1, grpcPrefix(0)));
      const reset = await raw.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 1, LIVENESS_MS, "stream 1 reset");
      assert.equal(reset.payload.readUInt32BE(0), ENHANCE_YOUR_CALM);
    } finally {
      raw.close();
    }
  });
});

describe("HTTP/2 idle timeout", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer({ timeouts: { ...DEFAULT_TIMEOUTS, keepAlive: 500, http2Idle: 300 } });
  });
  after(() => srv.close());

  test("an idle session gets GOAWAY and is closed; a peer that never closes is cut off", async () => {
    const session = await politeSession(srv.port);
    const goaway = once(session, "goaway");
    await within(LIVENESS_MS, once(session, "close"), "the idle session closes");
    const [code] = (await goaway) as [number];
    assert.equal(code, http2.constants.NGHTTP2_NO_ERROR);

    // A peer that never closes: after GOAWAY and the server's FIN it gets
    // keepAlive ms; then the server drops the socket, so what the peer still
    // sends is answered with a TCP reset.
    const silent = await rawH2(srv.port);
    const closed = new Promise((resolve) => silent.socket.once("close", resolve));
    const pings = setInterval(() => silent.write(encodeFrame(FrameType.PING, 0, 0, Buffer.alloc(8))), 100);
    try {
      await within(LIVENESS_MS, once(silent.socket, "end"), "GOAWAY and the server's FIN");
      assert.ok(
        silent.frames.some((f) => f.type === FrameType.GOAWAY),
        "it was told first",
      );
      await within(LIVENESS_MS, closed, "the server drops a connection whose peer never closes");
    } finally {
      clearInterval(pings);
      silent.close();
    }
  });
});

describe("errors grpc-js writes itself carry a google.rpc.Status with one ErrorInfo", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  const infoOf = (err: grpc.ServiceError) =>
    grpcStatus(err).details.find((d) => d.$typeName === "google.rpc.ErrorInfo") as unknown as { reason: string; domain: string };

  test("an unknown method: UNIMPLEMENTED", async () => {
    const client = rawGrpcClient(srv.port);
    try {
      const { err } = await client.call("/platformapi.iam.v2beta1.GroupsService/NoSuchMethod", new Uint8Array(0));
      assert.equal(checkGrpcResult({ err }), grpc.status.UNIMPLEMENTED);
      assert.deepEqual(infoOf(err!), { $typeName: "google.rpc.ErrorInfo", reason: "UNKNOWN_METHOD", domain: "platform.api", metadata: {} });
      assert.match(grpcStatus(err!).message, /NoSuchMethod/);
    } finally {
      client.close();
    }
  });

  test("a message over 4 MiB, plain or gzip-compressed: RESOURCE_EXHAUSTED, reason MESSAGE_TOO_LARGE", async () => {
    const plain = rawGrpcClient(srv.port);
    const uid = "a".repeat(5 * MiB);
    const request = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid }));
    // A real grpc-js client that compresses: 5 MiB of "a" travel as a few KiB.
    const gzip = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure(), {
      "grpc.default_compression_algorithm": grpc.compressionAlgorithms.gzip,
    });
    try {
      const { err } = await plain.call(GET_GROUP, request, `Bearer ${srv.adminToken}`);
      assert.equal(checkGrpcResult({ err }), grpc.status.RESOURCE_EXHAUSTED);
      assert.equal(infoOf(err!).reason, "MESSAGE_TOO_LARGE");
      const zipped = await new Promise<grpc.ServiceError | null>((resolve) =>
        gzip.makeUnaryRequest(
          GET_GROUP,
          (b: Buffer) => b,
          (b: Buffer) => b,
          Buffer.from(request),
          new grpc.Metadata(),
          (e) => resolve(e),
        ),
      );
      assert.equal(checkGrpcResult({ err: zipped }), grpc.status.RESOURCE_EXHAUSTED);
      assert.equal(infoOf(zipped!).reason, "MESSAGE_TOO_LARGE");
      assert.match(zipped!.details, /decompresses/);
    } finally {
      plain.close();
      gzip.close();
    }
  });

  test("our own errors keep their details unchanged", async () => {
    const client = rawGrpcClient(srv.port);
    try {
      const { err } = await client.call(
        GET_GROUP,
        toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: "0".repeat(40) })),
        `Bearer ${srv.adminToken}`,
      );
      assert.equal(checkGrpcResult({ err }), grpc.status.NOT_FOUND);
      assert.equal(infoOf(err!).reason, "NOT_FOUND");
      assert.equal(infoOf(err!).domain, "iam.platform.api");
    } finally {
      client.close();
    }
  });
});

describe("unfinished request bytes are bounded per connection (a `serve` process)", () => {
  /** The server's budget per connection (16 MiB at the default 4 MiB message limit), and what each stream sends. */
  const BUDGET = 16 * MiB;
  const PARTIAL = 3 * MiB;
  let dataDir: string;
  let srv: ServerProcess;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-h2-budget-"));
    // Both connections come from 127.0.0.1: give that address the whole process budget, so only the connection's bites here.
    srv = await startServerProcess(dataDir, { env: { PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS: String(64 * MiB) } });
  });
  after(async () => {
    await stopServerProcess(srv);
    rmSync(dataDir, { recursive: true, force: true });
  });

  test("200 streams × 3 MiB of unfinished messages (600 MiB): past 16 MiB per connection they get RESOURCE_EXHAUSTED; memory stays flat", async (t) => {
    const warm = rawGrpcClient(srv.port);
    assert.equal(checkGrpcResult(await warm.call(HEALTH_CHECK, new Uint8Array(0))), 0);
    warm.close();
    const baseline = memoryOf(srv.pid);
    const sessions = [await politeSession(srv.port, 1024), await politeSession(srv.port, 1024)];
    try {
      const perSession = sessions.map((s) => partialMessages(s, 100, PARTIAL));
      // A liveness bound only: on a loaded machine the 600 MiB take their time.
      await within(300_000, Promise.all(perSession.flat().map((s) => s.settled)), "every stream refused or its bytes read");
      // A call sent after every byte above is answered after every refusal those bytes caused.
      for (const session of sessions)
        assert.deepEqual(await healthCheck(session), { grpcStatus: "0", rstCode: 0 }, "the connection keeps serving");
      const mem = memoryOf(srv.pid);
      const held = perSession.map((streams) => heldOf(streams).length);
      const refused = perSession.flat().filter((s) => s.answer);
      t.diagnostic(
        `200 streams × 3 MiB unfinished: ${refused.length} refused, ${held.join(" + ")} held; RSS ${baseline.rssMiB} → ${mem.rssMiB} MiB, peak ${baseline.peakMiB} → ${mem.peakMiB} MiB`,
      );
      // The bound: what a connection holds of unfinished messages (PARTIAL per open stream) stays within its budget.
      for (const n of held) assert.ok(n * PARTIAL <= BUDGET, `${n} streams × 3 MiB held on one connection`);
      assert.deepEqual(
        perSession.flat().filter((s) => s.rstCode !== undefined),
        [],
        "no stream reset without an answer",
      );
      assert.deepEqual(new Set(refusalReasons(refused)), new Set(["CONNECTION_BUDGET_EXCEEDED"]));
      // What a connection holds is bounded; what passed through before the refusals is garbage not yet collected.
      assert.ok(mem.peakMiB - baseline.peakMiB < 150, `peak RSS grew ${mem.peakMiB - baseline.peakMiB} MiB`);
    } finally {
      for (const s of sessions) s.destroy();
    }
  });
});

describe("unfinished request bytes are bounded per process and per client address (a `serve` process)", () => {
  /** Small limits so that a few connections reach them: 1 MiB messages, 8 MiB per process, 3 MiB per address. */
  const MESSAGE = MiB;
  const TOTAL = 8 * MiB;
  const PER_ADDRESS = 3 * MiB;
  /** What each attacking stream sends of its declared 1 MiB message (the server counts the 5-byte prefix too). */
  const PARTIAL = 900 * 1024;
  let dataDir: string;
  let srv: ServerProcess;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-h2-server-budget-"));
    srv = await startServerProcess(dataDir, {
      env: {
        PLATFORM_MAX_MESSAGE_BYTES: String(MESSAGE),
        PLATFORM_MAX_PENDING_REQUEST_BYTES: String(TOTAL),
        PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS: String(PER_ADDRESS),
      },
    });
  });
  after(async () => {
    await stopServerProcess(srv);
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** An h2c session to the port from a loopback address of our choosing (Linux routes all of 127/8 to lo). */
  async function sessionFrom(localAddress: string): Promise<http2.ClientHttp2Session> {
    const session = http2.connect(`http://127.0.0.1:${srv.port}`, {
      maxSessionMemory: 1024,
      createConnection: () => net.connect({ host: "127.0.0.1", port: srv.port, localAddress }),
    });
    session.on("error", () => {});
    await within(LIVENESS_MS, once(session, "remoteSettings"), `SETTINGS to ${localAddress}`);
    return session;
  }

  /** platform_pending_request_bytes as /metrics reports it. */
  async function pendingGauge(): Promise<number> {
    const text = await (await fetch(`${srv.url}/metrics`)).text();
    const m = /^platform_pending_request_bytes (\d+)$/m.exec(text);
    assert.ok(m, "/metrics has platform_pending_request_bytes");
    return Number(m[1]);
  }

  /** Waits until the gauge is back to 0 once every stream has closed: a leak would keep it above for ever. */
  async function gaugeReturnsToZero(): Promise<void> {
    let last = await pendingGauge();
    const deadline = Date.now() + LIVENESS_MS;
    while (last !== 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      last = await pendingGauge();
    }
    assert.equal(last, 0, "every byte counted was given back");
  }

  test("4 addresses × 2 connections × 20 streams × 900 KiB (144 MiB): at most 8 MiB held in all and 3 MiB per address; other clients are served; the gauge returns to 0", async (t) => {
    const warm = rawGrpcClient(srv.port);
    assert.equal(checkGrpcResult(await warm.call(HEALTH_CHECK, new Uint8Array(0))), 0);
    warm.close();
    assert.equal(await pendingGauge(), 0);
    const baseline = memoryOf(srv.pid);
    const addresses = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
    const sessions = await Promise.all(addresses.flatMap((a) => [sessionFrom(a), sessionFrom(a)]));
    try {
      const perAddress = addresses.map((_, i) => [0, 1].flatMap((j) => partialMessages(sessions[2 * i + j]!, 20, PARTIAL, MESSAGE)));
      await within(300_000, Promise.all(perAddress.flat().map((s) => s.settled)), "every stream refused or its bytes read");
      // Calls sent after every byte above are answered after every refusal those bytes caused.
      for (const session of sessions)
        assert.deepEqual(await healthCheck(session), { grpcStatus: "0", rstCode: 0 }, "the connection keeps serving");
      const gauge = await pendingGauge();
      const mem = memoryOf(srv.pid);
      const held = perAddress.map((streams) => heldOf(streams).length);
      const reasons = refusalReasons(perAddress.flat());
      t.diagnostic(
        `144 MiB unfinished from 4 addresses: ${reasons.length} refused (${[...new Set(reasons)].join(", ")}), held ${held.join(" + ")} streams; gauge ${gauge} B; RSS ${baseline.rssMiB} → ${mem.rssMiB} MiB, peak ${baseline.peakMiB} → ${mem.peakMiB} MiB`,
      );
      // The bounds: PARTIAL (+ its prefix) per open stream, per address and in all.
      for (const n of held) assert.ok(n * PARTIAL <= PER_ADDRESS, `${n} streams × 900 KiB held for one address`);
      assert.ok(held.reduce((a, b) => a + b, 0) * PARTIAL <= TOTAL, `${held.join(" + ")} streams × 900 KiB held in all`);
      assert.ok(gauge > 0 && gauge <= TOTAL, `the gauge (${gauge}) counts what is held, within the budget`);
      assert.deepEqual(
        perAddress.flat().filter((s) => s.rstCode !== undefined),
        [],
        "no stream reset without an answer",
      );
      assert.ok(reasons.length > 0);
      for (const reason of reasons) assert.ok(["SERVER_BUDGET_EXCEEDED", "ADDRESS_BUDGET_EXCEEDED"].includes(reason), reason);
      // Another client, while the budget is taken: a call whose message arrives whole holds nothing and is served.
      const other = await sessionFrom("127.0.0.9");
      sessions.push(other);
      assert.deepEqual(await healthCheck(other), { grpcStatus: "0", rstCode: 0 });
      assert.ok(mem.peakMiB - baseline.peakMiB < 100, `peak RSS grew ${mem.peakMiB - baseline.peakMiB} MiB`);
    } finally {
      for (const s of sessions) s.destroy();
    }
    await gaugeReturnsToZero();
  });

  test("one address cannot take the whole budget: past 3 MiB its streams get ADDRESS_BUDGET_EXCEEDED, another address's large message is read; refused and aborted streams leak nothing", async (t) => {
    const attacker = await Promise.all([0, 1, 2, 3].map(() => sessionFrom("127.0.0.6")));
    const sessions = [...attacker];
    try {
      const streams = attacker.flatMap((s) => partialMessages(s, 10, PARTIAL, MESSAGE));
      await within(300_000, Promise.all(streams.map((s) => s.settled)), "every stream refused or its bytes read");
      for (const session of attacker) assert.deepEqual(await healthCheck(session), { grpcStatus: "0", rstCode: 0 });
      const held = heldOf(streams);
      const reasons = refusalReasons(streams);
      const gauge = await pendingGauge();
      t.diagnostic(`36 MiB unfinished from one address: ${reasons.length} refused, ${held.length} held; gauge ${gauge} B`);
      assert.ok(held.length * PARTIAL <= PER_ADDRESS, `${held.length} streams × 900 KiB held for one address`);
      assert.ok(gauge <= PER_ADDRESS, `gauge ${gauge}`);
      assert.deepEqual(new Set(reasons), new Set(["ADDRESS_BUDGET_EXCEEDED"]));

      // Another address sends a whole 1 MiB message (many DATA frames, so it is counted while it arrives): the
      // budget lets it through to the handler, which refuses it for want of a token, not for want of memory.
      const other = await sessionFrom("127.0.0.7");
      sessions.push(other);
      const request = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: "a".repeat(MESSAGE - 16) }));
      const req = other.request({ ":method": "POST", ":path": GET_GROUP, "content-type": "application/grpc", te: "trailers" });
      req.on("error", () => {});
      req.end(Buffer.concat([grpcPrefix(request.length), request]));
      req.resume();
      let status: string | undefined;
      req.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
      req.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
      await within(LIVENESS_MS, once(req, "close"), "the large call is answered");
      assert.equal(status, String(grpc.status.UNAUTHENTICATED));

      // Streams the client aborts halfway, on a connection that stays open: each gives its bytes back.
      const aborted = partialMessages(other, 10, 200 * 1024, MESSAGE);
      await within(300_000, Promise.all(aborted.map((s) => s.settled)), "aborted streams' bytes read");
      assert.deepEqual(heldOf(aborted).length, 10, "2 MiB fit in this address's share");
      for (const s of aborted) s.req.close(http2.constants.NGHTTP2_CANCEL);
      await Promise.all(
        aborted.map((s) =>
          within(
            LIVENESS_MS,
            once(s.req, "close").catch(() => {}),
            "stream closes",
          ),
        ),
      );
      assert.deepEqual(await healthCheck(other), { grpcStatus: "0", rstCode: 0 }, "a call after the resets is answered after them");
      assert.equal(await pendingGauge(), gauge, "what the aborted streams held is released; the attacker's streams still hold theirs");
    } finally {
      for (const s of sessions) s.destroy();
    }
    await gaugeReturnsToZero();
  });
});
