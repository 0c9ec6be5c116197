/**
 * Connect and gRPC-Web conventions foreign clients rely on: an unknown method
 * or an unsupported compression is UNIMPLEMENTED in the client's own protocol
 * (not a REST 404 or 415), gRPC-Web text mode (base64 bodies, the default of
 * Google's grpc-web client) works like binary mode, and ErrorInfo.domain is
 * the addressed service's area on every path, platform.api when none was.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import {
  CreateGroupRequestSchema,
  GetGroupRequestSchema,
  GroupSchema,
  GroupsService,
} from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { frame, parseFrames } from "../support/grpc-web-frames.js";
import { startTestServer, type TestServer } from "../support/server.js";

const GROUPS = "/platformapi.iam.v2beta1.GroupsService";
const MISSING = "0123456789abcdef0123456789abcdef01234567";

let srv: TestServer;
before(async () => {
  srv = await startTestServer();
});
after(async () => {
  await srv.close();
});

function post(path: string, headers: Record<string, string>, body: Buffer | string): Promise<Response> {
  return fetch(srv.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${srv.adminToken}`, ...headers },
    body: typeof body === "string" ? body : new Uint8Array(body),
  });
}

/** The ErrorInfo of a Connect unary error response (its JSON body). */
async function connectErrorInfo(res: Response): Promise<{ code: string; message: string; reason: string; domain: string }> {
  assert.equal(res.headers.get("content-type"), "application/json");
  const body = (await res.json()) as { code: string; message: string; details?: { type: string; value: string }[] };
  const infos = (body.details ?? []).filter((d) => d.type === "google.rpc.ErrorInfo");
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  const info = fromBinary(ErrorInfoSchema, Buffer.from(infos[0]!.value, "base64"));
  return { code: body.code, message: body.message, reason: info.reason, domain: info.domain };
}

/** The google.rpc.Status a gRPC-Web response carries in its headers (trailers-only). */
function grpcWebHeaderStatus(res: Response) {
  const bin = res.headers.get("grpc-status-details-bin");
  assert.ok(bin, "grpc-status-details-bin is sent");
  const status = fromBinary(StatusSchema, Buffer.from(bin, "base64"));
  const info = status.details.find((d) => d.typeUrl.endsWith("google.rpc.ErrorInfo"));
  assert.ok(info, "an ErrorInfo detail");
  return { grpcStatus: Number(res.headers.get("grpc-status")), info: fromBinary(ErrorInfoSchema, info.value) };
}

/** A gRPC-Web call (binary) whose answer is trailers-only UNIMPLEMENTED, HTTP 200: the response and its ErrorInfo. */
async function grpcWebUnimplemented(path: string, headers: Record<string, string>, body: Buffer) {
  const res = await post(path, { "content-type": "application/grpc-web+proto", ...headers }, body);
  assert.equal(res.status, 200);
  const { grpcStatus, info } = grpcWebHeaderStatus(res);
  assert.equal(grpcStatus, Code.Unimplemented);
  return { res, info };
}

/** A unary call in gRPC-Web text mode, as Google's grpc-web client makes it. */
async function grpcWebTextCall<I extends DescMessage>(method: string, schema: I, request: MessageShape<I>) {
  const body = frame(0, toBinary(schema, request)).toString("base64");
  const res = await post(
    `${GROUPS}/${method}`,
    { "content-type": "application/grpc-web-text", accept: "application/grpc-web-text", "x-grpc-web": "1" },
    body,
  );
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/grpc-web-text+proto");
  const text = await res.text();
  assert.match(text, /^[A-Za-z0-9+/]*={0,2}$/, "the body is one base64 text");
  return parseFrames(Buffer.from(text, "base64"));
}

describe("an unknown method under a Connect path is UNIMPLEMENTED in the caller's protocol", () => {
  for (const contentType of ["application/json", "application/proto"]) {
    test(`Connect unary, ${contentType}: Connect's error JSON`, async () => {
      const res = await post(
        `${GROUPS}/NoSuchMethod`,
        { "content-type": contentType, "connect-protocol-version": "1" },
        contentType === "application/json" ? "{}" : Buffer.alloc(0),
      );
      assert.equal(res.status, 501);
      const err = await connectErrorInfo(res);
      assert.equal(err.code, "unimplemented");
      assert.match(err.message, /NoSuchMethod/);
      assert.deepEqual([err.reason, err.domain], ["UNKNOWN_METHOD", "platform.api"]);
    });
  }

  test("an unknown service: the same", async () => {
    const res = await post("/platformapi.iam.v2beta1.NoSuchService/Get", { "content-type": "application/proto" }, Buffer.alloc(0));
    assert.equal(res.status, 501);
    assert.equal((await connectErrorInfo(res)).code, "unimplemented");
  });

  test("gRPC-Web: a trailers-only response with grpc-status 12", async () => {
    const { info } = await grpcWebUnimplemented(`${GROUPS}/NoSuchMethod`, { "x-grpc-web": "1" }, frame(0, new Uint8Array(0)));
    assert.deepEqual([info.reason, info.domain], ["UNKNOWN_METHOD", "platform.api"]);
  });

  test("REST paths are not taken for RPCs: a REST 404 stays a REST 404", async () => {
    const res = await fetch(`${srv.url}/iam/v2beta1/nothing`, { headers: { authorization: `Bearer ${srv.adminToken}` } });
    assert.equal(res.status, 404);
    const body = (await res.json()) as { code: number; details: { reason: string; domain: string }[] };
    assert.equal(body.code, Code.NotFound);
    assert.deepEqual([body.details[0]!.reason, body.details[0]!.domain], ["ROUTE_NOT_FOUND", "platform.api"]);
  });
});

describe("an unsupported compression is UNIMPLEMENTED with the accepted list", () => {
  for (const coding of ["foo", "zstd"]) {
    test(`Connect unary, Content-Encoding: ${coding}`, async () => {
      const res = await post(`${GROUPS}/GetGroup`, { "content-type": "application/json", "content-encoding": coding }, "{}");
      assert.equal(res.status, 501);
      assert.equal(res.headers.get("accept-encoding"), "gzip,br");
      const err = await connectErrorInfo(res);
      assert.equal(err.code, "unimplemented");
      assert.match(err.message, new RegExp(`${coding}.*gzip, br`));
      assert.deepEqual([err.reason, err.domain], ["UNSUPPORTED_CONTENT_ENCODING", "iam.platform.api"]);
    });
  }

  test("gRPC-Web, grpc-encoding: foo", async () => {
    const { res, info } = await grpcWebUnimplemented(`${GROUPS}/GetGroup`, { "grpc-encoding": "foo" }, frame(1, new Uint8Array(3)));
    assert.equal(res.headers.get("grpc-accept-encoding"), "gzip,br");
    assert.equal(info.reason, "UNSUPPORTED_CONTENT_ENCODING");
  });

  test("gzip is still accepted (connect-node client compressing every request)", async () => {
    const interceptors: Interceptor[] = [(next) => (req) => (req.header.set("authorization", `Bearer ${srv.adminToken}`), next(req))];
    const transport = createConnectTransport({
      baseUrl: srv.url,
      httpVersion: "1.1",
      sendCompression: compressionGzip,
      compressMinBytes: 0,
      interceptors,
    });
    const client = createClient(GroupsService, transport);
    const group = await client.createGroup({ group: { name: "gzipped" } });
    assert.equal((await client.getGroup({ uid: group.uid })).name, "gzipped");
  });
});

describe("a plain Connect POST (served without connect-node) answers exactly as connect-node does", () => {
  test("the same bytes and Content-Type as a gzip-compressed request, which connect-node serves, in JSON and protobuf", async () => {
    const created = await post(
      `${GROUPS}/CreateGroup`,
      { "content-type": "application/proto" },
      Buffer.from(toBinary(CreateGroupRequestSchema, create(CreateGroupRequestSchema, { group: { name: "parity" } }))),
    );
    assert.equal(created.status, 200);
    assert.equal(created.headers.get("content-type"), "application/proto");
    const uid = fromBinary(GroupSchema, new Uint8Array(await created.arrayBuffer())).uid;
    const bodies = {
      "application/json": Buffer.from(JSON.stringify({ uid })),
      "application/proto": Buffer.from(toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid }))),
    };
    for (const [type, body] of Object.entries(bodies)) {
      const plain = await post(`${GROUPS}/GetGroup`, { "content-type": type }, body);
      const viaConnectNode = await post(`${GROUPS}/GetGroup`, { "content-type": type, "content-encoding": "gzip" }, gzipSync(body));
      for (const res of [plain, viaConnectNode]) assert.equal(res.status, 200);
      assert.equal(plain.headers.get("content-type"), viaConnectNode.headers.get("content-type"));
      assert.equal(plain.headers.get("content-type"), type);
      assert.deepEqual(Buffer.from(await plain.arrayBuffer()), Buffer.from(await viaConnectNode.arrayBuffer()), type);
    }
  });

  test("an answer of 1 KiB or more is compressed in a coding the client accepts, as connect-node does", async () => {
    const parent = fromBinary(
      GroupSchema,
      new Uint8Array(
        await (
          await post(
            `${GROUPS}/CreateGroup`,
            { "content-type": "application/proto" },
            Buffer.from(toBinary(CreateGroupRequestSchema, create(CreateGroupRequestSchema, { group: { name: "compressed parent" } }))),
          )
        ).arrayBuffer(),
      ),
    );
    for (let i = 0; i < 12; i++) {
      const body = JSON.stringify({ parent: parent.uid, group: { name: `child ${i}`, description: "x".repeat(60) } });
      assert.equal((await post(`${GROUPS}/CreateGroup`, { "content-type": "application/json" }, body)).status, 200);
    }
    const list = JSON.stringify({ uidp: { childrenOf: parent.uid } });
    const small = JSON.stringify({ uid: parent.uid });
    for (const [coding, accept] of [
      ["gzip", "gzip"],
      ["br", "gzip, br"],
    ]) {
      const listed = await post(`${GROUPS}/ListGroups`, { "content-type": "application/json", "accept-encoding": accept! }, list);
      assert.equal(listed.headers.get("content-encoding"), coding);
      assert.equal(((await listed.json()) as { groups: unknown[] }).groups.length, 12, "fetch inflates it");
      const got = await post(`${GROUPS}/GetGroup`, { "content-type": "application/json", "accept-encoding": accept! }, small);
      assert.equal(got.headers.get("content-encoding"), null, "a small answer goes as it is");
    }
  });

  test("errors, a deadline and a protocol version other than 1", async () => {
    const missing = await post(`${GROUPS}/GetGroup`, { "content-type": "application/json" }, JSON.stringify({ uid: MISSING }));
    assert.equal(missing.status, 404);
    assert.deepEqual(Object.values(await connectErrorInfo(missing)).slice(0, 1), ["not_found"]);
    const timed = await post(
      `${GROUPS}/GetGroup`,
      { "content-type": "application/json", "connect-timeout-ms": "60000" },
      JSON.stringify({ uid: MISSING }),
    );
    assert.equal(timed.status, 404);
    const v2 = await post(
      `${GROUPS}/GetGroup`,
      { "content-type": "application/json", "connect-protocol-version": "2" },
      JSON.stringify({ uid: MISSING }),
    );
    assert.equal(v2.status, 404, "left to connect-node, which answers the same");
    assert.equal((await connectErrorInfo(v2)).reason, "NOT_FOUND");
  });
});

describe("gRPC-Web text mode works like binary mode", () => {
  test("CreateGroup then GetGroup: base64 data frame and trailer frame", async () => {
    const created = await grpcWebTextCall(
      "CreateGroup",
      CreateGroupRequestSchema,
      create(CreateGroupRequestSchema, { group: { name: "text mode" } }),
    );
    assert.equal(created.trailers.get("grpc-status"), "0");
    assert.equal(created.messages.length, 1);
    const group = fromBinary(GroupSchema, created.messages[0]!);
    assert.equal(group.name, "text mode");
    assert.match(group.uid, /^[0-9a-f]{40}$/);

    const got = await grpcWebTextCall("GetGroup", GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: group.uid }));
    assert.equal(got.trailers.get("grpc-status"), "0");
    assert.equal(fromBinary(GroupSchema, got.messages[0]!).name, "text mode");
  });

  test("an error travels in the base64 trailer frame with its details", async () => {
    const res = await grpcWebTextCall("GetGroup", GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: MISSING }));
    assert.equal(res.messages.length, 0);
    assert.equal(res.trailers.get("grpc-status"), String(Code.NotFound));
    const status = fromBinary(StatusSchema, Buffer.from(res.trailers.get("grpc-status-details-bin")!, "base64"));
    const info = fromBinary(ErrorInfoSchema, status.details.find((d) => d.typeUrl.endsWith("ErrorInfo"))!.value);
    assert.deepEqual([info.reason, info.domain], ["NOT_FOUND", "iam.platform.api"]);
  });

  test("a body that is not base64 is INVALID_ARGUMENT", async () => {
    const res = await post(`${GROUPS}/GetGroup`, { "content-type": "application/grpc-web-text" }, "not*base64!");
    assert.equal(res.status, 200);
    const { trailers } = parseFrames(Buffer.from(await res.text(), "base64"));
    assert.equal(trailers.get("grpc-status"), String(Code.InvalidArgument));
  });
});

describe("ErrorInfo.domain is the addressed service's area on every path", () => {
  test("REST: a body that is not JSON, on a groups route, is iam.platform.api", async () => {
    const res = await fetch(`${srv.url}/iam/v2beta1/groups`, {
      method: "POST",
      headers: { authorization: `Bearer ${srv.adminToken}`, "content-type": "application/json" },
      body: "{not json",
    });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { details: { reason?: string; domain?: string }[] };
    assert.equal(body.details[0]!.domain, "iam.platform.api");
  });

  test("REST: a method not allowed on a path addresses no operation: platform.api", async () => {
    const res = await fetch(`${srv.url}/iam/v2beta1/groups`, { method: "PUT", headers: { authorization: `Bearer ${srv.adminToken}` } });
    assert.equal(res.status, 405);
    const body = (await res.json()) as { details: { reason?: string; domain?: string }[] };
    assert.deepEqual([body.details[0]!.reason, body.details[0]!.domain], ["METHOD_NOT_ALLOWED", "platform.api"]);
  });

  test("Connect: bad gzip data on a GroupsService call is iam.platform.api", async () => {
    const res = await post(`${GROUPS}/GetGroup`, { "content-type": "application/json", "content-encoding": "gzip" }, "not gzip");
    assert.equal(res.status, 400);
    const err = await connectErrorInfo(res);
    assert.deepEqual([err.code, err.domain], ["invalid_argument", "iam.platform.api"]);
  });
});
