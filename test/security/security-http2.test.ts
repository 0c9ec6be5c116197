/**
 * Issue 11, the h2c side: the limits every HTTP/2 connection is told about
 * and held to (concurrent streams, header-list size, idle time, unfinished
 * request bytes per connection), and the google.rpc.Status on the errors
 * grpc-js writes itself. The process-wide and per-address budgets are in
 * security-http2-budget.test.ts.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { GetGroupRequestSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { DEFAULT_TIMEOUTS } from "../../src/server/http/one-port.js";
import { within } from "../support/assertions.js";
import { memoryOf } from "../support/bombs.js";
import { checkGrpcResult, rawGrpcClient } from "../support/fuzz-grpc.js";
import { grpcStatus } from "../support/grpc.js";
import {
  GET_GROUP,
  HEALTH_CHECK,
  healthCheck,
  heldOf,
  LIVENESS_MS,
  MiB,
  partialMessages,
  politeSession,
  refusalReasons,
} from "../support/h2-attacks.js";
import { encodeFrame, END_STREAM, FrameType, grpcPrefix, grpcRequestHeaders, headerBlock, rawH2 } from "../support/raw-h2.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";
import { startTestServer, type TestServer } from "../support/server.js";

const REFUSED_STREAM = 0x7;
const ENHANCE_YOUR_CALM = 0xb;

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
  let srv: ServeProcess;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-h2-budget-"));
    // Both connections come from 127.0.0.1: give that address the whole process budget, so only the connection's bites here.
    srv = await startServeProcess({ PLATFORM_DATA_DIR: dataDir, PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS: String(64 * MiB) });
  });
  after(async () => {
    assert.equal((await srv.stop()).code, 0, srv.output());
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
