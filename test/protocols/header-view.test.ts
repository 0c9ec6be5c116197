import assert from "node:assert/strict";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { HeaderView } from "../../src/server/http/header-view.js";

test("a view of node request headers reads like fetch Headers, without pseudo-headers", () => {
  const h = HeaderView.ofNode({ authorization: "Bearer x", accept: ["a", "b"], ":path": "/x", "x-empty": undefined });
  assert.equal(h.get("Authorization"), "Bearer x");
  assert.equal(h.get("accept"), "a, b");
  assert.equal(h.get(":path"), null);
  assert.equal(h.has("x-empty"), false);
  assert.deepEqual(
    [...h],
    [
      ["accept", "a, b"],
      ["authorization", "Bearer x"],
    ],
  );
  const seen: string[] = [];
  h.forEach((value, key, parent) => {
    seen.push(`${key}=${value}`);
    assert.equal(parent, h);
  });
  assert.deepEqual(seen, ["accept=a, b", "authorization=Bearer x"]);
  h.set("x-added", "1");
  h.delete("accept");
  assert.equal(h.get("x-added"), "1");
  assert.equal(h.get("accept"), null);
  assert.equal(h.get("authorization"), "Bearer x");
});

test("gRPC metadata reads as Headers: first value, binary values base64", () => {
  const md = new grpc.Metadata();
  md.add("authorization", "Bearer y");
  md.add("x-multi", "one");
  md.add("x-multi", "two");
  md.add("trace-bin", Buffer.from([1, 2, 3]));
  const h = HeaderView.ofGrpcMetadata(md);
  assert.equal(h.get("Authorization"), "Bearer y");
  assert.equal(h.get("x-multi"), "one");
  assert.equal(h.get("trace-bin"), "AQID");
  assert.equal(h.get("not a valid key"), null);
  assert.deepEqual(Object.fromEntries(h.entries()), { authorization: "Bearer y", "x-multi": "one", "trace-bin": "AQID" });
});
