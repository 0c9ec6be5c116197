/**
 * Issue 11: one limit on the decompressed size of a request message on every
 * protocol, enforced while the body streams in, so compression bombs and
 * oversized frames cost the server no memory (a caller without a token gets
 * no body read at all: issue 21, test/security/security-bodies.test.ts); /docs
 * forbids framing and foreign content; /metrics is private unless the
 * operator sets a token (test/operations/metrics-access.test.ts has every mode).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { mintAdminToken, startServerProcess, stopServerProcess, type ServerProcess } from "../../scripts/support/cli-server.js";
import { assertRestError, connectError } from "../support/assertions.js";
import {
  bombCompression,
  carrierTransport,
  memoryOf,
  zeroBomb,
  type BombCarrier,
  type Coding,
  type MemorySample,
} from "../support/bombs.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
/** Bombs sent at once in each burst. */
const BURST = 4;
/** How far the server's peak RSS may rise above its warmed-up peak while it refuses every bomb. */
const PEAK_GROWTH_MiB = 100;

/** RESOURCE_EXHAUSTED with exactly one ErrorInfo, reason MESSAGE_TOO_LARGE. */
function assertTooLarge(err: ConnectError, what: string): void {
  // Refused by the transport, but on a call to a service: its area's domain (health has none).
  const domain = what.includes("Health") ? "platform.api" : "iam.platform.api";
  assert.equal(err.code, Code.ResourceExhausted, `${what}: ${err.message}`);
  const infos = err.findDetails(ErrorInfoSchema);
  assert.equal(infos.length, 1, `${what}: exactly one ErrorInfo`);
  assert.equal(infos[0]!.reason, "MESSAGE_TOO_LARGE", what);
  assert.equal(infos[0]!.domain, domain, what);
}

/**
 * GetGroup over `carrier` with `token`, its message replaced on the wire by a bomb of `coding` (or sent as is when coding is undefined).
 */
async function bombedGetGroup(
  carrier: BombCarrier,
  baseUrl: string,
  token: string,
  uid: string,
  coding?: Coding,
  bomb?: Buffer,
): Promise<unknown> {
  const { transport, close } = carrierTransport(carrier, baseUrl, {
    compression: coding && bomb ? bombCompression(coding, bomb) : undefined,
    token,
  });
  try {
    return await createClient(GroupsService, transport).getGroup({ uid });
  } finally {
    close();
  }
}

/** A server-streaming Health.Watch over the Connect protocol (enveloped request), its message replaced by a bomb. */
async function bombedWatch(baseUrl: string, coding: Coding, bomb: Buffer): Promise<void> {
  const { transport, close } = carrierTransport("connect-proto", baseUrl, { compression: bombCompression(coding, bomb) });
  try {
    for await (const _ of createClient(Health, transport).watch({ service: "" })) assert.fail("the watch was served");
  } finally {
    close();
  }
}

/**
 * The bombs come from an authenticated caller: without a token, the body of
 * a method that needs one is not read at all (test/security/security-bodies.test.ts).
 */
describe("bombs against a `serve` process from an authenticated caller: refused while reading, memory flat", () => {
  let dataDir: string;
  let srv: ServerProcess;
  let token: string;
  let baseline: MemorySample;
  const figures: string[] = [];

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "platform-bombs-"));
    srv = await startServerProcess(dataDir, { env: METRICS_ENV });
    token = await mintAdminToken(dataDir);
    // Warm every path once (zlib, both HTTP stacks, Connect, gRPC-Web, gRPC) with calls that are no bombs.
    for (const carrier of ["connect-json", "connect-proto", "grpc-web", "grpc"] as const) {
      // grpc-js decompresses gzip and deflate only; it answers br with UNIMPLEMENTED.
      for (const compression of carrier === "grpc" ? [undefined, compressionGzip] : [undefined, compressionGzip, compressionBrotli]) {
        const { transport, close } = carrierTransport(carrier, srv.url, { compression });
        const res = await createClient(Health, transport).check({ service: "" }).finally(close);
        assert.equal(res.status, 1, "SERVING");
      }
    }
    assert.equal((await fetch(`${srv.url}/healthz`)).status, 200);
    baseline = memoryOf(srv.pid);
    figures.push(`baseline after warm-up: RSS ${baseline.rssMiB} MiB, peak ${baseline.peakMiB} MiB`);
  });

  after(async () => {
    await stopServerProcess(srv);
    rmSync(dataDir, { recursive: true, force: true });
  });

  /**
   * Sends BURST bombs at once, checks each refusal, that the server still
   * answers, and that its peak RSS stayed within PEAK_GROWTH_MiB of the
   * warmed-up peak; records the figures.
   */
  async function burst(t: TestContext, label: string, bomb: () => Promise<unknown>, check: (err: unknown) => void): Promise<void> {
    const start = performance.now();
    const outcomes = await Promise.allSettled(Array.from({ length: BURST }, bomb));
    const ms = Math.round(performance.now() - start);
    const mem = memoryOf(srv.pid);
    const line = `${label}: ${BURST} at once refused in ${ms} ms; RSS ${mem.rssMiB} MiB, peak ${mem.peakMiB} MiB (+${mem.peakMiB - baseline.peakMiB} MiB)`;
    figures.push(line);
    t.diagnostic(line);
    for (const outcome of outcomes) {
      assert.equal(outcome.status, "rejected", `${label}: the bomb was served`);
      check((outcome as PromiseRejectedResult).reason);
    }
    assert.equal((await fetch(`${srv.url}/healthz`)).status, 200, "the server still answers");
    assert.ok(mem.peakMiB - baseline.peakMiB < PEAK_GROWTH_MiB, `${label}: peak RSS grew ${mem.peakMiB - baseline.peakMiB} MiB`);
  }

  const tooLarge = (what: string) => (err: unknown) => {
    assert.ok(err instanceof ConnectError, `${what}: ${String(err)}`);
    assertTooLarge(err, what);
  };

  for (const carrier of ["connect-json", "connect-proto"] as const) {
    for (const coding of ["gzip", "br"] as const) {
      test(`${carrier} unary, Content-Encoding ${coding}: a body inflating to 1 GiB`, async (t) => {
        const bomb = await zeroBomb(coding, GiB);
        await burst(
          t,
          `${carrier} ${coding} (${bomb.length} bytes → 1 GiB)`,
          () => bombedGetGroup(carrier, srv.url, token, "x", coding, bomb),
          tooLarge(carrier),
        );
      });
    }
  }

  test("Connect GET: a compressed message in the query inflating to 1 GiB (br) and 8 MiB (gzip)", async (t) => {
    for (const [coding, size] of [
      ["br", GiB],
      ["gzip", 8 * MiB],
    ] as const) {
      const bomb = await zeroBomb(coding, size);
      await burst(
        t,
        `connect GET ${coding} (${bomb.length} bytes → ${size / MiB} MiB)`,
        () => bombedGetGroup("connect-get", srv.url, token, "x", coding, bomb),
        tooLarge("GET"),
      );
    }
  });

  test("Connect streaming (Health.Watch): a compressed envelope inflating to 1 GiB", async (t) => {
    for (const coding of ["gzip", "br"] as const) {
      const bomb = await zeroBomb(coding, GiB);
      await burst(
        t,
        `connect streaming ${coding} envelope`,
        () => bombedWatch(srv.url, coding, bomb),
        tooLarge("connect streaming (Health.Watch)"),
      );
    }
  });

  test("gRPC-Web: a compressed envelope inflating to 1 GiB", async (t) => {
    for (const coding of ["gzip", "br"] as const) {
      const bomb = await zeroBomb(coding, GiB);
      await burst(
        t,
        `gRPC-Web ${coding} envelope`,
        () => bombedGetGroup("grpc-web", srv.url, token, "x", coding, bomb),
        tooLarge("gRPC-Web"),
      );
    }
  });

  test("gRPC-Web and Connect unary: a 32 MiB uncompressed message is refused from its length, not read whole", async (t) => {
    const uid = "a".repeat(32 * MiB);
    await burst(t, "gRPC-Web 32 MiB frame", () => bombedGetGroup("grpc-web", srv.url, token, uid), tooLarge("gRPC-Web 32 MiB"));
    await burst(t, "Connect unary 32 MiB body", () => bombedGetGroup("connect-proto", srv.url, token, uid), tooLarge("Connect 32 MiB"));
  });

  test("native gRPC, grpc-encoding gzip: a message inflating to 1 GiB", async (t) => {
    const bomb = await zeroBomb("gzip", GiB);
    await burst(t, "gRPC gzip (grpc-js)", () => bombedGetGroup("grpc", srv.url, token, "x", "gzip", bomb), tooLarge("gRPC"));
  });

  test("REST: a 32 MiB body and a gzip body inflating to 1 GiB get the same 413; an unknown coding 415", async (t) => {
    const big = Buffer.alloc(32 * MiB, 0x20);
    const gzip = await zeroBomb("gzip", GiB);
    const post = (body: Buffer, headers: Record<string, string>) => async () => {
      const res = await fetch(`${srv.url}/iam/v2beta1/groups`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}`, ...headers },
        body: new Uint8Array(body),
      });
      return Promise.reject({ status: res.status, body: await res.json(), headers: res.headers });
    };
    await burst(t, "REST 32 MiB body", post(big, {}), (res) => void assertRestError(res as never, 413, 8, "BODY_TOO_LARGE"));
    // Inflated only up to the limit: the memory check of burst() holds for it too.
    await burst(
      t,
      "REST gzip body",
      post(gzip, { "content-encoding": "gzip" }),
      (res) => void assertRestError(res as never, 413, 8, "BODY_TOO_LARGE"),
    );
    await burst(
      t,
      "REST compress body",
      post(gzip, { "content-encoding": "compress" }),
      (res) => void assertRestError(res as never, 415, 3, "UNSUPPORTED_CONTENT_ENCODING"),
    );
  });

  test("no bomb reached a handler: the per-RPC metrics never counted GetGroup or CreateGroup", async (t) => {
    const metrics = await scrapeMetrics(srv.url);
    assert.match(metrics, /platform_requests_total/, "the counter is exported");
    assert.doesNotMatch(metrics, /platform_requests_total\{[^}]*method="(GetGroup|CreateGroup)"/);
    for (const line of figures) t.diagnostic(line);
  });
});

describe("the limit is the configured one, on every protocol, and a refused call changes nothing", () => {
  let srv: TestServer;
  const LIMIT = 1024;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_MAX_MESSAGE_BYTES: String(LIMIT), ...METRICS_ENV } });
  });
  after(() => srv.close());

  const carriers: BombCarrier[] = ["connect-json", "connect-proto", "connect-get", "grpc-web", "grpc"];
  const codings = [
    { label: "uncompressed", compression: undefined },
    { label: "gzip", compression: compressionGzip },
    { label: "br", compression: compressionBrotli },
  ];
  for (const carrier of carriers) {
    // grpc-js decompresses gzip and deflate only; it answers br with UNIMPLEMENTED.
    for (const { label, compression } of codings.filter((c) => carrier !== "grpc" || c.label !== "br")) {
      test(`${carrier}, ${label}: a message over ${LIMIT} bytes is RESOURCE_EXHAUSTED, one under is served`, async () => {
        const admin = carrierTransport(carrier, srv.url, { compression, token: srv.adminToken });
        const anonymous = carrierTransport(carrier, srv.url, { compression });
        try {
          const groups = createClient(GroupsService, admin.transport);
          // Not authenticated: refused from the headers before the body is read (issue 21, item 8), except
          // over native gRPC, whose transport reads the message before any handler and refuses its size.
          const anonymousError = await connectError(
            createClient(GroupsService, anonymous.transport).getGroup({ uid: "a".repeat(2 * LIMIT) }),
          );
          if (carrier === "grpc") assertTooLarge(anonymousError, "anonymous");
          else assert.equal(anonymousError.code, Code.Unauthenticated, `anonymous: ${anonymousError.message}`);
          assertTooLarge(await connectError(groups.getGroup({ uid: "a".repeat(LIMIT) })), "just over");
          // Under the limit the message reaches the handler, which finds the uid malformed.
          const served = await connectError(groups.getGroup({ uid: "a".repeat(LIMIT - 100) }));
          assert.equal(served.code, Code.InvalidArgument, served.message);
          if (carrier === "connect-get") return;
          const name = `${carrier} ${label} big`;
          assertTooLarge(await connectError(groups.createGroup({ group: { name, description: "d".repeat(2 * LIMIT) } })), "create");
          const listed = await groups.listGroups({ name });
          assert.deepEqual(listed.groups, [], "the refused create made nothing");
        } finally {
          admin.close();
          anonymous.close();
        }
      });
    }
  }

  test("REST: a body over the limit is 413 RESOURCE_EXHAUSTED naming the limit, and creates nothing", async () => {
    const res = await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "rest big", description: "d".repeat(2 * LIMIT) });
    const body = assertRestError(res, 413, 8, "BODY_TOO_LARGE");
    assert.match(body.message, new RegExp(`${LIMIT} bytes`));
    assert.deepEqual((await rest(srv.url, "GET", "/iam/v2beta1/groups?name=rest%20big")).body.groups, []);
    assert.equal((await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "rest small" })).status, 200);
  });

  test("refused calls never reached the per-RPC metrics; served ones did", async () => {
    const metrics = await scrapeMetrics(srv.url);
    assert.match(metrics, /platform_requests_total\{[^}]*method="GetGroup"[^}]*code="invalid_argument"/);
    assert.doesNotMatch(metrics, /platform_requests_total\{[^}]*code="resource_exhausted"/);
  });
});

describe("/docs and /metrics exposure", () => {
  let open: TestServer;
  let guarded: TestServer;
  const METRICS_TOKEN = "metrics-secret-0123456789";
  before(async () => {
    open = await startTestServer();
    guarded = await startTestServer({ env: { PLATFORM_METRICS_TOKEN: METRICS_TOKEN } });
  });
  after(async () => {
    await open.close();
    await guarded.close();
  });

  test("/docs, its script and its assets forbid framing and anything not from the server itself", async () => {
    for (const path of ["/docs", "/docs/init.js", "/docs/swagger-ui.css", "/docs/swagger-ui-bundle.js", "/docs/favicon-32x32.png"]) {
      const res = await fetch(`${open.url}${path}`);
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get("x-frame-options"), "DENY", path);
      const csp = res.headers.get("content-security-policy") ?? "";
      assert.match(csp, /(^|;\s*)default-src 'self'(;|$)/, `${path}: ${csp}`);
      assert.match(csp, /frame-ancestors 'none'/, `${path}: ${csp}`);
      assert.doesNotMatch(csp, /script-src[^;]*'unsafe-inline'/, `${path}: no inline scripts`);
      await res.arrayBuffer();
    }
  });

  test("/metrics is private by default: 403 in the error shape, with no numbers, whatever the caller sends", async () => {
    for (const authorization of [undefined, "Bearer guess", `Bearer ${open.adminToken}`]) {
      const res = await fetch(`${open.url}/metrics`, { headers: authorization ? { authorization } : {} });
      const text = await res.text();
      assert.doesNotMatch(text, /platform_/);
      assertRestError({ status: res.status, body: JSON.parse(text), headers: res.headers }, 403, 7, "METRICS_NOT_PUBLIC");
    }
  });

  test("with PLATFORM_METRICS_TOKEN, /metrics wants that bearer token: 401 in the error shape otherwise", async () => {
    for (const authorization of [
      undefined,
      "Bearer wrong",
      `Bearer ${METRICS_TOKEN}x`,
      `Bearer ${METRICS_TOKEN.slice(1)}`,
      METRICS_TOKEN,
      `Basic ${METRICS_TOKEN}`,
    ]) {
      const res = await fetch(`${guarded.url}/metrics`, { headers: authorization ? { authorization } : {} });
      assertRestError({ status: res.status, body: await res.json(), headers: res.headers }, 401, 16, "UNAUTHENTICATED");
    }
    // An API token of the administrator is no metrics token.
    const admin = await fetch(`${guarded.url}/metrics`, { headers: { authorization: `Bearer ${guarded.adminToken}` } });
    assert.equal(admin.status, 401);
    await admin.arrayBuffer();
    const res = await fetch(`${guarded.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /platform_requests_in_flight/);
  });
});
