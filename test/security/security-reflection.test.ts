/**
 * Issue 21, items 2 and 3: gRPC server reflection is open to anyone, so what
 * one stream may cost is bounded. Answers are written with backpressure (a
 * client that stops reading stops being read), a stream takes at most 100
 * requests of at most 4 KiB and lives at most the HTTP/2 idle timeout (reset
 * 10 s later if its client stopped reading even the final status), and
 * every answer is a lookup of descriptors encoded once at start. Also: the
 * answers themselves, as grpcurl-style clients ask for them (file_by_filename
 * used to find nothing).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import v8 from "node:v8";
import vm from "node:vm";
import { create, isMessage } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { ServerReflectionRequestSchema } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { reflectionSchema, Reflector } from "../../src/server/grpc/reflection.js";
import { within } from "../support/assertions.js";
import { grpcStatus } from "../support/grpc.js";
import {
  decodeAnswer,
  fileNames,
  rawReflectionCall,
  REFLECTION_SERVICES,
  reflectionFrame,
  reflectionStream,
  type RawReflectionResult,
} from "../support/reflection-client.js";
import { startTestServer, type TestServer } from "../support/server.js";

const MiB = 1024 * 1024;
const DESCRIPTOR = "google/protobuf/descriptor.proto";
const GROUPS = "platformapi/iam/v2beta1/groups.proto";
const MAX_REQUESTS = 100;

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

/** The memory this process still uses after a full collection: the JavaScript heap and the buffers outside it. */
function liveMemory(): number {
  gc();
  const { heapUsed, external } = process.memoryUsage();
  return heapUsed + external;
}

/**
 * Resolves once this process (the server's) has been nearly idle, and the
 * session's socket has moved no byte, for three intervals in a row: whatever
 * the server does with what it was sent, it has done. CPU alone is not enough
 * on a loaded machine, where a process starved of CPU looks idle while work
 * is still pending; the socket's byte counts move while anything is.
 */
async function quiet(s: http2.ClientHttp2Session): Promise<void> {
  const moved = () => s.socket.bytesRead + s.socket.bytesWritten;
  for (let idle = 0; idle < 3; ) {
    const cpu = process.cpuUsage();
    const bytes = moved();
    await delay(250);
    const used = process.cpuUsage(cpu);
    idle = used.user + used.system < 25_000 && moved() === bytes ? idle + 1 : 0;
  }
}

/** The ErrorInfo reasons of a grpc-js error. */
function reasons(err: grpc.ServiceError | null): string[] {
  assert.ok(err, "the stream ended with an error");
  return grpcStatus(err)
    .details.filter((d) => isMessage(d, ErrorInfoSchema))
    .map((d) => d.reason);
}

/** A refused raw stream: RESOURCE_EXHAUSTED with the reason, or (once answers went out) reset with ENHANCE_YOUR_CALM. */
function assertRefused(r: RawReflectionResult): void {
  if (r.grpcStatus !== undefined) assert.equal(r.grpcStatus, "8", JSON.stringify(r));
  else assert.equal(r.rstCode, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, JSON.stringify(r));
}

async function session(port: number): Promise<http2.ClientHttp2Session> {
  const s = http2.connect(`http://127.0.0.1:${port}`, { maxSessionMemory: 64 });
  s.on("error", () => {});
  await within(30_000, once(s, "remoteSettings"), "server SETTINGS");
  return s;
}

describe("reflection answers, through @grpc/grpc-js as grpcurl asks", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  for (const service of REFLECTION_SERVICES) {
    test(`${service}: file_by_filename finds descriptor.proto and the API's own files by name`, async () => {
      const stream = reflectionStream(srv.port, service);
      try {
        assert.deepEqual(fileNames(await stream.ask({ messageRequest: { case: "fileByFilename", value: DESCRIPTOR } })), [DESCRIPTOR]);
        const groups = fileNames(await stream.ask({ messageRequest: { case: "fileByFilename", value: GROUPS } }));
        assert.equal(groups[0], GROUPS);
        assert.ok(groups.includes("google/api/annotations.proto"), groups.join());
        assert.ok(!groups.includes(DESCRIPTOR), "a file already sent on this stream is not sent again as an import");
        assert.equal(new Set(groups).size, groups.length, "no file twice");
        // The requested file always comes back, even when sent before.
        assert.deepEqual(fileNames(await stream.ask({ messageRequest: { case: "fileByFilename", value: DESCRIPTOR } })), [DESCRIPTOR]);
        const missing = (await stream.ask({ messageRequest: { case: "fileByFilename", value: "google/protobuf/descriptor" } }))
          .messageResponse;
        assert.equal(missing.case, "errorResponse");
        assert.equal(missing.value.errorCode, grpc.status.NOT_FOUND);
      } finally {
        stream.close();
      }
    });
  }

  test("file_containing_symbol resolves services, methods, types, fields and enum values; list_services and extensions", async () => {
    const stream = reflectionStream(srv.port);
    const fileOf = async (symbol: string) =>
      fileNames(await stream.ask({ messageRequest: { case: "fileContainingSymbol", value: symbol } }))[0];
    try {
      const list = (await stream.ask({ messageRequest: { case: "listServices", value: "" } })).messageResponse;
      assert.equal(list.case, "listServicesResponse");
      const services = list.value.service.map((s) => s.name);
      for (const name of ["platformapi.iam.v2beta1.GroupsService", Health.typeName, ...REFLECTION_SERVICES])
        assert.ok(services.includes(name), name);
      assert.equal(await fileOf("platformapi.iam.v2beta1.GroupsService"), GROUPS);
      assert.equal(await fileOf("platformapi.iam.v2beta1.GroupsService.GetGroup"), GROUPS);
      assert.equal(await fileOf("google.protobuf.FileDescriptorProto"), DESCRIPTOR);
      assert.equal(await fileOf("google.protobuf.FileDescriptorProto.name"), DESCRIPTOR);
      assert.equal(await fileOf("google.protobuf.FieldDescriptorProto.Type"), DESCRIPTOR);
      // protobuf scopes enum values next to their enum; the enum-qualified form is answered too.
      assert.equal(await fileOf("google.protobuf.FieldDescriptorProto.TYPE_STRING"), DESCRIPTOR);
      assert.equal(await fileOf("google.protobuf.FieldDescriptorProto.Type.TYPE_STRING"), DESCRIPTOR);
      const unknown = (await stream.ask({ messageRequest: { case: "fileContainingSymbol", value: "no.such.Symbol" } })).messageResponse;
      assert.equal(unknown.case, "errorResponse");
      assert.equal(unknown.value.errorCode, grpc.status.NOT_FOUND);

      // google.api.http extends MethodOptions with field 72295728.
      const extension = { containingType: "google.protobuf.MethodOptions", extensionNumber: 72295728 };
      assert.deepEqual(
        fileNames(await stream.ask({ messageRequest: { case: "fileContainingExtension", value: extension } }))[0],
        "google/api/annotations.proto",
      );
      const numbers = (await stream.ask({ messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.MethodOptions" } }))
        .messageResponse;
      assert.equal(numbers.case, "allExtensionNumbersResponse");
      assert.ok(numbers.value.extensionNumber.includes(72295728), String(numbers.value.extensionNumber));
      const notAType = (await stream.ask({ messageRequest: { case: "allExtensionNumbersOfType", value: "no.such.Type" } })).messageResponse;
      assert.equal(notAType.case, "errorResponse");
    } finally {
      stream.close();
    }
  });

  test("answers are lookups: every stream's answer for a file carries the bytes encoded once at start", () => {
    const schema = reflectionSchema([Health.file], [Health.typeName]);
    const request = create(ServerReflectionRequestSchema, { messageRequest: { case: "fileContainingSymbol", value: Health.typeName } });
    const encoded = schema.files.get("grpc/health/v1/health.proto")!.bytes;
    for (const reflector of [new Reflector(schema), new Reflector(schema)]) {
      const answer = reflector.answer(request).messageResponse;
      assert.equal(answer.case, "fileDescriptorResponse");
      assert.equal(answer.value.fileDescriptorProto[0], encoded, "the same Uint8Array, not a new encoding");
    }
  });
});

describe("what one reflection stream may cost", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(() => srv.close());

  test(`the ${MAX_REQUESTS + 1}st request on a stream ends it with RESOURCE_EXHAUSTED (REFLECTION_REQUEST_LIMIT) after ${MAX_REQUESTS} answers`, async () => {
    const stream = reflectionStream(srv.port);
    try {
      for (let i = 0; i < MAX_REQUESTS; i++) {
        assert.equal(
          (await stream.ask({ messageRequest: { case: "listServices", value: "" } })).messageResponse.case,
          "listServicesResponse",
        );
      }
      await assert.rejects(stream.ask({ messageRequest: { case: "listServices", value: "" } }));
      const err = await stream.ended;
      assert.equal(err?.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.deepEqual(reasons(err), ["REFLECTION_REQUEST_LIMIT"]);
    } finally {
      stream.close();
    }
    const next = reflectionStream(srv.port);
    try {
      assert.deepEqual(
        fileNames(await next.ask({ messageRequest: { case: "fileByFilename", value: DESCRIPTOR } })),
        [DESCRIPTOR],
        "a new stream serves",
      );
    } finally {
      next.close();
    }
  });

  test("a request over 4 KiB is RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE); one that is not protobuf is INVALID_ARGUMENT", async () => {
    const big = reflectionStream(srv.port);
    try {
      await assert.rejects(big.ask({ host: "h".repeat(8192), messageRequest: { case: "listServices", value: "" } }));
      const err = await big.ended;
      assert.equal(err?.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.deepEqual(reasons(err), ["MESSAGE_TOO_LARGE"]);
    } finally {
      big.close();
    }
    const s = await session(srv.port);
    try {
      const { closed } = rawReflectionCall(s, Buffer.from([0, 0, 0, 0, 2, 0xff, 0xff]), { read: true });
      const r = await within(30_000, closed, "malformed request answered");
      assert.equal(r.grpcStatus, String(grpc.status.INVALID_ARGUMENT), JSON.stringify(r));
    } finally {
      s.destroy();
    }
  });

  test("100 streams × 100 descriptor.proto requests, answers never read: the server holds about one answer per stream, not 130 MB", async (t) => {
    const s = await session(srv.port);
    const request = reflectionFrame({ messageRequest: { case: "fileContainingSymbol", value: "google.protobuf.FileDescriptorProto" } });
    const base = liveMemory();
    const calls = Array.from({ length: 100 }, () =>
      rawReflectionCall(s, Buffer.concat(Array.from({ length: MAX_REQUESTS }, () => request)), { read: false, end: false }),
    );
    try {
      await within(60_000, Promise.all(calls.map((c) => c.sent)), "requests sent");
      await within(60_000, quiet(s), "the server done with what it was sent");
      const grown = (liveMemory() - base) / MiB;
      t.diagnostic(`live memory grew ${grown.toFixed(1)} MiB (client and server, one process) for 100 × 100 × 13 KB answers asked`);
      assert.ok(grown < 48, `live memory grew ${grown.toFixed(1)} MiB`);
    } finally {
      s.destroy();
    }
  });

  test("2.1 MB of pipelined list_services on one stream that never reads: refused at the first frame past the limit, about one window read", async (t) => {
    const s = await session(srv.port);
    try {
      const body = Buffer.concat(
        Array.from({ length: 300_000 }, () => reflectionFrame({ messageRequest: { case: "listServices", value: "" } })),
      );
      const { closed } = rawReflectionCall(s, body, { read: false });
      const r = await within(60_000, closed, "the server ends the stream");
      const carried = s.socket.bytesWritten;
      t.diagnostic(`wrote ${body.length} bytes; the connection carried ${carried}; grpc-status ${r.grpcStatus}, reset ${r.rstCode}`);
      assertRefused(r);
      // The server stopped reading at once: at most one stream window (64 KiB) and a frame more got through.
      assert.ok(carried < 256 * 1024, `${carried} bytes carried`);
    } finally {
      s.destroy();
    }
  });

  test("1,500 descriptor.proto requests (63 KB) in 15 streams: well under a millisecond of CPU each, /healthz answers throughout", async (t) => {
    const s = await session(srv.port);
    const symbol = reflectionFrame({ messageRequest: { case: "fileContainingSymbol", value: "google.protobuf.FileDescriptorProto" } });
    const byName = reflectionFrame({ messageRequest: { case: "fileByFilename", value: DESCRIPTOR } });
    const healthz: number[] = [];
    let loading = true;
    const poller = (async () => {
      while (loading) {
        const res = await fetch(`${srv.url}/healthz`);
        await res.text();
        healthz.push(res.status);
        await delay(50);
      }
    })();
    const cpu = process.cpuUsage();
    try {
      const results = await within(
        120_000,
        Promise.all(
          Array.from({ length: 15 }, (_, i) => {
            const body = Buffer.concat(Array.from({ length: MAX_REQUESTS }, (_, j) => ((i + j) % 2 ? symbol : byName)));
            return rawReflectionCall(s, body, { read: true }).closed;
          }),
        ),
        "1,500 answers",
      );
      const used = process.cpuUsage(cpu);
      loading = false;
      await poller;
      const answers = results.flatMap((r) => r.answers.map(decodeAnswer));
      const perRequestUs = (used.user + used.system) / answers.length;
      t.diagnostic(
        `${answers.length} answers; CPU ${perRequestUs.toFixed(0)} µs per request (server and client); /healthz answered ${healthz.length} times`,
      );
      assert.equal(answers.length, 1500);
      for (const a of answers) assert.deepEqual(fileNames(a), [DESCRIPTOR]);
      for (const r of results) assert.equal(r.grpcStatus, "0");
      // Encoding descriptor.proto per request cost 1.4–3.7 ms of server CPU alone.
      assert.ok(perRequestUs < 1000, `${perRequestUs} µs per request`);
      assert.ok(healthz.length >= 1 && healthz.every((status) => status === 200), String(healthz));
    } finally {
      loading = false;
      s.destroy();
    }
  });
});

describe("a reflection stream lives at most the HTTP/2 idle timeout", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_HTTP2_IDLE_TIMEOUT_MS: "1000" } });
  });
  after(() => srv.close());

  test("an open stream is ended with UNAVAILABLE (REFLECTION_STREAM_EXPIRED); grpcurl-style clients reopen one", async () => {
    const stream = reflectionStream(srv.port);
    try {
      assert.equal(
        (await stream.ask({ messageRequest: { case: "listServices", value: "" } })).messageResponse.case,
        "listServicesResponse",
      );
      const err = await within(30_000, stream.ended, "the stream ends");
      assert.equal(err?.code, grpc.status.UNAVAILABLE);
      assert.deepEqual(reasons(err), ["REFLECTION_STREAM_EXPIRED"]);
    } finally {
      stream.close();
    }
  });

  test("a stream whose client stopped reading (answers and status unread) is reset shortly after its lifetime", async (t) => {
    const s = await session(srv.port);
    try {
      const request = reflectionFrame({ messageRequest: { case: "fileContainingSymbol", value: "google.protobuf.FileDescriptorProto" } });
      const { closed } = rawReflectionCall(s, Buffer.concat(Array.from({ length: MAX_REQUESTS }, () => request)), {
        read: false,
        end: false,
      });
      const r = await within(60_000, closed, "the stream is reset");
      t.diagnostic(`grpc-status ${r.grpcStatus}, reset ${r.rstCode}`);
      assert.equal(r.rstCode, http2.constants.NGHTTP2_CANCEL);
    } finally {
      s.destroy();
    }
  });
});
