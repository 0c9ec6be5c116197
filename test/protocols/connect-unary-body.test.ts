/**
 * The Connect fast path (a plain unary POST, connect-unary.ts) reads its
 * body with plain stream events (readUnaryMessage): a body left open is
 * still dropped at the body timeout, over HTTP/1.1 with its connection and
 * over HTTP/2 at its stream, and a whole body is still answered.
 */
import assert from "node:assert/strict";
import http from "node:http";
import http2 from "node:http2";
import { after, before, describe, test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { CreateGroupRequestSchema, GroupSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { startTestServer, type TestServer } from "../support/server.js";

const CREATE_GROUP = "/platformapi.iam.v2beta1.GroupsService/CreateGroup";

let srv: TestServer;
before(async () => {
  srv = await startTestServer({ env: { PLATFORM_REQUEST_BODY_TIMEOUT_MS: "1000" } });
});
after(async () => {
  await srv.close();
});

/** Resolves with what happened first, or "still open" long after the 1 s body timeout. */
function firstOf(outcome: Promise<string>): Promise<string> {
  // Generous: the timeout is 1 s; the listener's own request timeout (minutes) would fail this.
  return Promise.race([outcome, new Promise<string>((r) => setTimeout(() => r("still open"), 60_000).unref())]);
}

const headers = () => ({ "content-type": "application/proto", authorization: `Bearer ${srv.adminToken}` });

describe("Connect fast path: the request body", () => {
  test("HTTP/1.1: a body left open short of its Content-Length is dropped with its connection at the body timeout", async () => {
    const req = http.request(`${srv.url}${CREATE_GROUP}`, {
      method: "POST",
      agent: false,
      headers: { ...headers(), "content-length": "100" },
    });
    const outcome = new Promise<string>((resolve) => {
      req.on("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      req.on("response", (res) => resolve(`answered ${res.statusCode}`));
    });
    req.write(Buffer.alloc(10));
    const first = await firstOf(outcome);
    req.destroy();
    assert.equal(first, "ECONNRESET", "the server closed the connection");
  });

  test("h2c: a body left open is no longer held after the body timeout, and the connection serves on", async () => {
    const session = http2.connect(srv.url);
    try {
      const stream = session.request({ ":method": "POST", ":path": CREATE_GROUP, ...headers() });
      const outcome = new Promise<string>((resolve) => {
        stream.on("response", (h) => resolve(`answered ${h[":status"]}`));
        stream.on("close", () => resolve("stream closed"));
        stream.on("error", () => {});
      });
      stream.write(Buffer.alloc(10));
      // The stream is reset (CANCEL), not answered as a server fault, and not held.
      assert.equal(await firstOf(outcome), "stream closed", "the body was dropped with its stream at the body timeout");
      assert.equal(stream.rstCode, http2.constants.NGHTTP2_CANCEL);
      assert.equal(session.closed, false, "only the stream was dropped");

      const body = toBinary(CreateGroupRequestSchema, create(CreateGroupRequestSchema, { group: { name: "h2c fast path" } }));
      const answer = await new Promise<{ status: number; body: Buffer }>((resolve, reject) => {
        const call = session.request({ ":method": "POST", ":path": CREATE_GROUP, ...headers() });
        const chunks: Buffer[] = [];
        let status = 0;
        call.on("response", (h) => (status = Number(h[":status"])));
        call.on("data", (c: Buffer) => chunks.push(c));
        call.on("end", () => resolve({ status, body: Buffer.concat(chunks) }));
        call.on("error", reject);
        call.end(body);
      });
      assert.equal(answer.status, 200, answer.body.toString());
      assert.equal(fromBinary(GroupSchema, answer.body).name, "h2c fast path");
    } finally {
      session.close();
    }
  });
});
