/**
 * A real scrape, after calls that fill every family (requests, store time,
 * caches, refusals), passes `promtool check metrics` (Debian's prometheus
 * package; skipped only where it is not installed and CI is not set), and
 * no family named like a counter (_total) is anything but a counter.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { testTransport } from "../support/connect.js";
import { grpcClient } from "../support/grpc.js";
import { METRICS_ENV, parseExposition, promtoolAvailable, promtoolCheck, scrapeMetrics } from "../support/metrics-scrape.js";
import { createCaller } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
let text: string;

before(async () => {
  srv = await startTestServer({ env: METRICS_ENV });
  const org = await createGroup(srv.url, null, "promtool org");
  assert.equal((await rest(srv.url, "GET", `/iam/v2beta1/groups/${org.uid}`)).status, 200);
  assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups/0123456789abcdef0123456789abcdef01234567")).status, 404);
  const grpc = grpcClient(GroupsService, srv.port);
  const connect = testTransport("connect-h1", srv.url);
  try {
    assert.equal((await grpc.call("getGroup", { uid: org.uid })).uid, org.uid);
    assert.equal((await createClient(GroupsService, connect.transport).getGroup({ uid: org.uid })).uid, org.uid);
  } finally {
    grpc.close();
    connect.close();
  }
  // A caller who is not the administrator goes through the authorization cache; its bad invite codes are refused.
  const caller = await createCaller(srv, org.uid, "promtool caller", null);
  for (let i = 0; i < 12; i++) {
    const code = `${"ab".repeat(16)}.${"A".repeat(43)}`;
    await rest(srv.url, "POST", "/auth/v1/register", { code }, { authorization: `Bearer ${caller.token}` });
  }
  text = await scrapeMetrics(srv.url);
});
after(async () => {
  await srv.close();
});

test("every family whose name ends in _total is a counter, and every counter's does", () => {
  const { types } = parseExposition(text);
  assert.ok(types.size > 30, `families: ${types.size}`);
  for (const [name, type] of types) {
    assert.equal(name.endsWith("_total"), type === "counter", `${name} is a ${type}`);
  }
  assert.ok(types.has("platform_invite_refusals_total"), "the refusals were counted");
});

test(
  "promtool check metrics passes on a real scrape",
  { skip: !promtoolAvailable() && "promtool is not installed (Debian: apt-get install prometheus)" },
  () => {
    assert.deepEqual(promtoolCheck(text), { code: 0, output: "" });
  },
);
