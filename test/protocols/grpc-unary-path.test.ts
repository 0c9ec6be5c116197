/**
 * Issue 22: native gRPC unary calls of the API services are served on the
 * HTTP/2 stream without grpc-js (src/server/grpc/unary.ts). What only that
 * path has to get right: compressed request messages, the one-message rule,
 * the message limit, cancellation; and what must stay with grpc-js (unknown
 * methods, server streaming).
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { HealthCheckResponseSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { GetGroupRequestSchema, GroupSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { grpcUnaryCalls } from "../../src/server/grpc/unary.js";
import type { WrappedHandler } from "../../src/server/wrap.js";
import { within } from "../support/assertions.js";
import { requestHealthWatch } from "../support/health-watch.js";
import { signalProbe } from "../support/held-create.js";
import { createGroup, defaultToken, startTestServer, type TestServer } from "../support/server.js";

const GET_GROUP = "/platformapi.iam.v2beta1.GroupsService/GetGroup";

/** What a raw HTTP/2 gRPC call got back: headers, the message bytes and the trailers (the headers, when trailers-only). */
interface RawAnswer {
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
  trailers: http2.IncomingHttpHeaders;
}

/** One gRPC call over a raw HTTP/2 stream, so the request's bytes are exactly the test's. */
async function rawCall(port: number, path: string, body: Buffer, extra: http2.OutgoingHttpHeaders = {}): Promise<RawAnswer> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  try {
    const token = defaultToken(port);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...extra,
    });
    const chunks: Buffer[] = [];
    stream.on("data", (c: Buffer) => chunks.push(c));
    let trailers: http2.IncomingHttpHeaders | undefined;
    stream.on("trailers", (t) => (trailers = t));
    stream.end(body);
    const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
    if (!stream.closed) await once(stream, "close");
    return { headers, body: Buffer.concat(chunks), trailers: trailers ?? headers };
  } finally {
    session.close();
  }
}

/** A gRPC envelope: compressed flag, length, message. */
function envelope(message: Uint8Array, compressed = false): Buffer {
  const head = Buffer.alloc(5);
  head[0] = compressed ? 1 : 0;
  head.writeUInt32BE(message.byteLength, 1);
  return Buffer.concat([head, message]);
}

/** The google.rpc.Status of an answer's trailers: code and the ErrorInfo reason. */
function statusOf(trailers: http2.IncomingHttpHeaders): { code: number; message: string; reason: string | undefined } {
  const bin = trailers["grpc-status-details-bin"];
  assert.equal(typeof bin, "string", "grpc-status-details-bin is present");
  const status = fromBinary(StatusSchema, Buffer.from(bin as string, "base64"));
  const info = status.details.find((d) => d.typeUrl.endsWith("google.rpc.ErrorInfo"));
  const reason = info ? /\n.([A-Z_]+)/.exec(Buffer.from(info.value).toString("latin1"))?.[1] : undefined;
  return { code: status.code, message: status.message, reason };
}

describe("native gRPC unary calls on the fast path", () => {
  let srv: TestServer;
  let uid: string;
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_MAX_MESSAGE_BYTES: "65536" } });
    uid = (await createGroup(srv.url, null, "unary path")).uid;
  });
  after(() => srv.close());

  const getGroup = () => toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid }));

  test("a plain call is answered with headers (x-request-id), one message and grpc-status 0", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(getGroup()), { "x-request-id": "unary-path-1" });
    assert.equal(answer.headers[":status"], 200);
    assert.match(String(answer.headers["content-type"]), /^application\/grpc/);
    assert.equal(answer.headers["x-request-id"], "unary-path-1");
    assert.equal(answer.trailers["grpc-status"], "0");
    assert.equal(answer.body.readUInt32BE(1), answer.body.byteLength - 5);
    assert.equal(fromBinary(GroupSchema, answer.body.subarray(5)).uid, uid);
  });

  test("a gzip-compressed request message is decompressed and served", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(gzipSync(getGroup()), true), { "grpc-encoding": "gzip" });
    assert.equal(answer.trailers["grpc-status"], "0");
    assert.equal(fromBinary(GroupSchema, answer.body.subarray(5)).uid, uid);
  });

  test("a message compressed in an unknown coding is UNIMPLEMENTED, naming the codings accepted", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(getGroup(), true), { "grpc-encoding": "br" });
    assert.equal(answer.trailers["grpc-status"], "12");
    assert.match(String(answer.trailers["grpc-accept-encoding"]), /gzip/);
    assert.equal(statusOf(answer.trailers).code, 12);
  });

  test("a gzip bomb over the message limit is RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE)", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(gzipSync(Buffer.alloc(1024 * 1024)), true), { "grpc-encoding": "gzip" });
    assert.equal(answer.trailers["grpc-status"], "8");
    assert.equal(statusOf(answer.trailers).reason, "MESSAGE_TOO_LARGE");
  });

  test("a second message in a unary call is UNIMPLEMENTED, as grpc-js answers it", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, Buffer.concat([envelope(getGroup()), envelope(getGroup())]));
    assert.equal(answer.trailers["grpc-status"], "12");
    assert.match(decodeURIComponent(String(answer.trailers["grpc-message"])), /second request message/);
    assert.equal(statusOf(answer.trailers).code, 12);
  });

  test("an empty body (no message) is UNIMPLEMENTED, as grpc-js answers it", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, Buffer.alloc(0));
    assert.equal(answer.trailers["grpc-status"], "12");
    assert.match(decodeURIComponent(String(answer.trailers["grpc-message"])), /no request message/);
  });

  test("a message over the limit is RESOURCE_EXHAUSTED (MESSAGE_TOO_LARGE), from its length prefix", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(Buffer.alloc(65537)));
    assert.equal(answer.trailers["grpc-status"], "8");
    const status = statusOf(answer.trailers);
    assert.equal(status.code, 8);
    assert.equal(status.reason, "MESSAGE_TOO_LARGE");
  });

  test("a request that does not decode is INVALID_ARGUMENT with details", async () => {
    const answer = await rawCall(srv.port, GET_GROUP, envelope(Buffer.from([0xff, 0xff, 0xff])));
    assert.equal(answer.trailers["grpc-status"], "3");
    assert.equal(statusOf(answer.trailers).code, 3);
  });

  test("a handler's error carries grpc-message percent-encoded and its google.rpc.Status", async () => {
    const missing = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: "f".repeat(40) }));
    const answer = await rawCall(srv.port, GET_GROUP, envelope(missing), { "x-request-id": "unary-path-2" });
    assert.equal(answer.headers["x-request-id"], "unary-path-2");
    const code = Number(answer.trailers["grpc-status"]);
    assert.ok(code === 5 || code === 3, `NOT_FOUND or INVALID_ARGUMENT, got ${code}`);
    const status = statusOf(answer.trailers);
    assert.equal(status.code, code);
    assert.equal(decodeURIComponent(String(answer.trailers["grpc-message"])), status.message);
  });

  test("an unknown method is still grpc-js's UNIMPLEMENTED", async () => {
    const answer = await rawCall(srv.port, "/platformapi.iam.v2beta1.GroupsService/NoSuchMethod", envelope(getGroup()));
    assert.equal(answer.trailers["grpc-status"], "12");
    assert.match(decodeURIComponent(String(answer.trailers["grpc-message"])), /does not implement the method/);
    assert.equal(statusOf(answer.trailers).reason, "UNKNOWN_METHOD");
  });

  test("server streaming (Health/Watch) is still served by grpc-js", async () => {
    const session = http2.connect(`http://127.0.0.1:${srv.port}`);
    try {
      const stream = requestHealthWatch(session);
      const [headers] = (await once(stream, "response")) as [http2.IncomingHttpHeaders];
      assert.equal(headers[":status"], 200);
      const [first] = (await within(30_000, once(stream, "data"), "the first Watch answer")) as [Buffer];
      const answer = fromBinary(HealthCheckResponseSchema, first.subarray(5, 5 + first.readUInt32BE(1)));
      assert.equal(answer.status, 1, "SERVING");
      assert.equal(stream.closed, false, "the stream stays open for the next answer");
      stream.close(http2.constants.NGHTTP2_CANCEL);
    } finally {
      session.close();
    }
  });
});

test("a client cancelling mid-call aborts the handler's signal; a finished call's never aborts", async () => {
  const { signals, getGroup, slowStarted, release } = signalProbe();
  const handler = Object.assign(getGroup, { needsToken: false, admit: async () => {} }) as WrappedHandler;
  const calls = grpcUnaryCalls([{ service: GroupsService, handlers: { getGroup: handler } }], { maxMessageBytes: 65536 });
  const server = http2.createServer();
  server.on("stream", (stream, headers) => {
    stream.on("error", () => {});
    calls(String(headers[":path"]))!(stream, headers);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as AddressInfo).port;
  const request = (requested: string) => envelope(toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: requested })));
  try {
    const fast = await rawCall(port, GET_GROUP, request("fast"));
    assert.equal(fast.trailers["grpc-status"], "0");
    assert.equal(signals.get("fast")!.aborted, false, "a finished call's signal is not aborted");

    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const stream = session.request({ ":method": "POST", ":path": GET_GROUP, "content-type": "application/grpc", te: "trailers" });
      stream.on("error", () => {});
      stream.end(request("slow"));
      await within(30_000, slowStarted, "the slow call reaches its handler");
      const signal = signals.get("slow")!;
      assert.equal(signal.aborted, false);
      stream.close(http2.constants.NGHTTP2_CANCEL);
      if (!signal.aborted) await within(30_000, once(signal, "abort"), "the handler's signal aborts when the client cancels");
      assert.equal(signal.aborted, true);
    } finally {
      session.close();
    }
  } finally {
    release();
    await new Promise((resolve) => server.close(resolve));
  }
});
