import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
let org: { uid: string };
before(async () => {
  srv = await startTestServer();
  org = await createGroup(srv.url, null, "transcoder org");
});
after(async () => {
  await srv.close();
});

test("an enum name the enum does not define is INVALID_ARGUMENT naming the field, and creates nothing", async () => {
  const err = assertRestError(
    await rest(srv.url, "POST", `/registry/v2beta1/repos/${org.uid}`, { name: "nginx", catalogTier: "BOGUS" }),
    400,
    3,
    "INVALID_ARGUMENT",
  );
  assert.equal(fieldViolations(err)[0]!.field, "catalog_tier");
  const list = await rest(srv.url, "GET", `/registry/v2beta1/repos?uidp.children_of=${org.uid}`);
  assert.equal(list.body.totalCount, "0");
  const ok = await rest(srv.url, "POST", `/registry/v2beta1/repos/${org.uid}`, { name: "nginx", catalogTier: "CATALOG_TIER_BASE" });
  assert.equal(ok.status, 200);
  assert.equal(ok.body.catalogTier, "CATALOG_TIER_BASE");
});

test("an unknown enum name in a query parameter is named too", async () => {
  const err = assertRestError(await rest(srv.url, "GET", "/iam/v2beta1/identities?relationship_type=NOPE"), 400, 3, "INVALID_ARGUMENT");
  assert.equal(fieldViolations(err)[0]!.field, "relationship_type");
});

test("a malformed timestamp in the query names its parameter", async () => {
  const err = assertRestError(await rest(srv.url, "GET", "/registry/v2beta1/tags?updated_since=yesterday"), 400, 3, "INVALID_ARGUMENT");
  assert.equal(fieldViolations(err)[0]!.field, "updated_since");
  const good = await rest(srv.url, "GET", "/registry/v2beta1/tags?updated_since=2026-01-02T03:04:05Z");
  assert.equal(good.status, 200);
});
