/**
 * A request message the server cannot take, sent over the Connect router's
 * protocols (Connect unary POST and GET, gRPC-Web) in JSON or protobuf,
 * compressed or not, is INVALID_ARGUMENT with one ErrorInfo and a BadRequest
 * violation naming the field, as REST and native gRPC answer it — never
 * connect-node's bare INTERNAL (an HTTP 500) for a malformed protobuf, nor an
 * unknown JSON key silently dropped — and stores nothing.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { frame, parseFrames } from "../support/grpc-web-frames.js";
import { createGroup, startTestServer, type TestServer } from "../support/server.js";

const GROUPS = "/platformapi.iam.v2beta1.GroupsService";
const MALFORMED_PROTO = Buffer.from([0xff, 0xff, 0xff]);

let srv: TestServer;
let org: { uid: string };
before(async () => {
  srv = await startTestServer();
  org = await createGroup(srv.url, null, "decoding org");
});
after(async () => {
  await srv.close();
});

/** A Connect unary POST; resolves with the error it answers (and its HTTP status), or fails the test if it succeeds. */
async function connectPost(method: string, headers: Record<string, string>, body: Uint8Array | string) {
  const res = await fetch(`${srv.url}${GROUPS}/${method}`, {
    method: "POST",
    headers: { authorization: `Bearer ${srv.adminToken}`, ...headers },
    body: typeof body === "string" ? body : new Uint8Array(body),
  });
  return connectUnaryError(res);
}

async function connectUnaryError(res: Response): Promise<{ status: number; err: ConnectError }> {
  assert.notEqual(res.status, 200, "the call is refused");
  assert.equal(res.headers.get("content-type"), "application/json");
  const err = errorFromJsonBytes(new Uint8Array(await res.arrayBuffer()), res.headers, new ConnectError("not an error body", Code.Unknown));
  return { status: res.status, err };
}

/** A gRPC-Web unary call; resolves with the error in its trailers, or fails the test if it succeeds. */
async function grpcWebPost(method: string, headers: Record<string, string>, body: Uint8Array): Promise<ConnectError> {
  const res = await fetch(`${srv.url}${GROUPS}/${method}`, {
    method: "POST",
    headers: { authorization: `Bearer ${srv.adminToken}`, "x-grpc-web": "1", ...headers },
    body: new Uint8Array(body),
  });
  assert.equal(res.status, 200);
  const { messages, trailers } = parseFrames(Buffer.from(await res.arrayBuffer()));
  assert.equal(messages.length, 0, "no response message");
  // A trailers-only answer carries its status in the headers.
  const err = findTrailerError(trailers.size > 0 ? new Headers([...trailers]) : res.headers);
  assert.ok(err, "the call is refused");
  return err;
}

/** One ErrorInfo (INVALID_ARGUMENT, the groups area) and the BadRequest's violated fields. */
function assertInvalid(err: ConnectError, fields: string[]): void {
  assert.equal(err.code, Code.InvalidArgument, err.message);
  const infos = err.findDetails(ErrorInfoSchema);
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  assert.deepEqual([infos[0]!.reason, infos[0]!.domain], ["INVALID_ARGUMENT", "iam.platform.api"]);
  assert.deepEqual(
    err.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations.map((v) => v.field)),
    fields,
  );
}

/** The names of the organization's child groups, over REST. */
async function childNames(): Promise<string[]> {
  const res = await fetch(`${srv.url}/iam/v2beta1/groups?uidp.children_of=${org.uid}`, {
    headers: { authorization: `Bearer ${srv.adminToken}` },
  });
  return ((await res.json()) as { groups: { name: string }[] }).groups.map((g) => g.name);
}

const createJson = (group: Record<string, unknown>) => JSON.stringify({ parent: org.uid, group });

describe("Connect unary, JSON", () => {
  test("an unknown key, top-level or nested, is named, and nothing is created", async () => {
    const nested = await connectPost(
      "CreateGroup",
      { "content-type": "application/json" },
      createJson({ name: "typo a", descripton: "x" }),
    );
    assert.equal(nested.status, 400);
    assertInvalid(nested.err, ["group.descripton"]);
    const top = await connectPost(
      "CreateGroup",
      { "content-type": "application/json" },
      JSON.stringify({ parent: org.uid, group: { name: "typo b" }, nmae: "x" }),
    );
    assertInvalid(top.err, ["nmae"]);
    assert.deepEqual(await childNames(), []);
  });

  test("text that is not JSON, or JSON that is not an object, names the request", async () => {
    assertInvalid((await connectPost("CreateGroup", { "content-type": "application/json" }, "{not json")).err, ["request"]);
    assertInvalid((await connectPost("CreateGroup", { "content-type": "application/json" }, "[1]")).err, ["request"]);
    assertInvalid((await connectPost("CreateGroup", { "content-type": "application/json" }, Buffer.from([0x22, 0xff, 0x22]))).err, [
      "request",
    ]);
  });

  test("a value of the wrong type names its field", async () => {
    assertInvalid((await connectPost("CreateGroup", { "content-type": "application/json" }, createJson({ name: 5 }))).err, ["name"]);
  });

  test("gzip-compressed JSON is checked after inflating", async () => {
    const body = gzipSync(createJson({ name: "typo c", descripton: "x" }));
    const { err } = await connectPost("CreateGroup", { "content-type": "application/json", "content-encoding": "gzip" }, body);
    assertInvalid(err, ["group.descripton"]);
    assert.deepEqual(await childNames(), []);
  });

  test("a well-formed call still succeeds; an empty body is not JSON", async () => {
    const res = await fetch(`${srv.url}${GROUPS}/CreateGroup`, {
      method: "POST",
      headers: { authorization: `Bearer ${srv.adminToken}`, "content-type": "application/json" },
      body: createJson({ name: "well formed" }),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await childNames(), ["well formed"]);
    const empty = await connectPost("GetGroup", { "content-type": "application/json" }, "");
    assertInvalid(empty.err, ["request"]);
  });
});

describe("Connect unary, protobuf", () => {
  test("a malformed message is 400 INVALID_ARGUMENT naming the request, not a 500", async () => {
    const plain = await connectPost("CreateGroup", { "content-type": "application/proto" }, MALFORMED_PROTO);
    assert.equal(plain.status, 400);
    assertInvalid(plain.err, ["request"]);
    assert.match(plain.err.rawMessage, /not a valid protobuf encoding of platformapi\.iam\.v2beta1\.CreateGroupRequest/);
    const gzipped = await connectPost(
      "CreateGroup",
      { "content-type": "application/proto", "content-encoding": "gzip" },
      gzipSync(MALFORMED_PROTO),
    );
    assert.equal(gzipped.status, 400);
    assertInvalid(gzipped.err, ["request"]);
  });
});

describe("Connect GET", () => {
  const get = (query: Record<string, string>) =>
    fetch(`${srv.url}${GROUPS}/GetGroup?${new URLSearchParams({ connect: "v1", ...query })}`, {
      headers: { authorization: `Bearer ${srv.adminToken}` },
    }).then(connectUnaryError);

  test("the message in the query is checked like a body: JSON, base64 protobuf", async () => {
    assertInvalid((await get({ encoding: "json", message: JSON.stringify({ uid: org.uid, nmae: "x" }) })).err, ["nmae"]);
    const proto = await get({ encoding: "proto", base64: "1", message: MALFORMED_PROTO.toString("base64url") });
    assert.equal(proto.status, 400);
    assertInvalid(proto.err, ["request"]);
  });
});

describe("gRPC-Web", () => {
  test("a malformed protobuf frame, plain or gzip-compressed, is INVALID_ARGUMENT naming the request", async () => {
    assertInvalid(await grpcWebPost("CreateGroup", { "content-type": "application/grpc-web+proto" }, frame(0, MALFORMED_PROTO)), [
      "request",
    ]);
    const compressed = frame(1, gzipSync(MALFORMED_PROTO));
    assertInvalid(await grpcWebPost("CreateGroup", { "content-type": "application/grpc-web+proto", "grpc-encoding": "gzip" }, compressed), [
      "request",
    ]);
  });

  test("JSON messages name an unknown key, and nothing is created", async () => {
    const body = frame(0, Buffer.from(createJson({ name: "typo d", descripton: "x" })));
    assertInvalid(await grpcWebPost("CreateGroup", { "content-type": "application/grpc-web+json" }, body), ["group.descripton"]);
    assert.ok(!(await childNames()).includes("typo d"));
  });
});
