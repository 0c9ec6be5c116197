/**
 * Issue 11, the h2c side: the unfinished request bytes every connection of a
 * process holds are bounded in all and per client address (the per-connection
 * bound is in security-http2.test.ts), refused streams get RESOURCE_EXHAUSTED
 * with the scope that was full, other clients keep being served, and every
 * byte counted is given back.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { GetGroupRequestSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { within } from "../support/assertions.js";
import { memoryOf } from "../support/bombs.js";
import { checkGrpcResult, rawGrpcClient } from "../support/fuzz-grpc.js";
import { GET_GROUP, HEALTH_CHECK, healthCheck, heldOf, LIVENESS_MS, MiB, partialMessages, refusalReasons } from "../support/h2-attacks.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { grpcPrefix } from "../support/raw-h2.js";
import { startServeProcess, type ServeProcess } from "../support/serve-process.js";

describe("unfinished request bytes are bounded per process and per client address (a `serve` process)", () => {
  /** Small limits so that a few connections reach them: 1 MiB messages, 8 MiB per process, 3 MiB per address. */
  const MESSAGE = MiB;
  const TOTAL = 8 * MiB;
  const PER_ADDRESS = 3 * MiB;
  /** What each attacking stream sends of its declared 1 MiB message (the server counts the 5-byte prefix too). */
  const PARTIAL = 900 * 1024;
  let dataDir: string;
  let srv: ServeProcess;
  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-h2-server-budget-"));
    srv = await startServeProcess({
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_MAX_MESSAGE_BYTES: String(MESSAGE),
      PLATFORM_MAX_PENDING_REQUEST_BYTES: String(TOTAL),
      PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS: String(PER_ADDRESS),
      ...METRICS_ENV,
    });
  });
  after(async () => {
    assert.equal((await srv.stop()).code, 0, srv.output());
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
    const text = await scrapeMetrics(srv.url);
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
