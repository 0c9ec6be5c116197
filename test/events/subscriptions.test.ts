import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Code, createClient } from "@connectrpc/connect";
import { Subscription_State, SubscriptionsService } from "../../gen/platformapi/events/v1/subscriptions_pb.js";
import { assertRestError, connectError, fieldViolations, MILLIS_TIMESTAMP, preconditionViolations } from "../support/assertions.js";
import { testTransport, type TestTransport } from "../support/connect.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const PATH = "/events/v1/subscriptions";
const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/;
const SINK = "https://hooks.example.com/platform";

let srv: TestServer;
let org: string;
let team: string;
let viewer: Caller;
let editor: Caller;
let outsider: Caller;

before(async () => {
  srv = await startTestServer();
  org = (await createGroup(srv.url, null, "subs-org")).uid;
  team = (await createGroup(srv.url, org, "team")).uid;
  const other = (await createGroup(srv.url, null, "other-org")).uid;
  viewer = await createCaller(srv, org, "viewer", await builtinRole(srv, "viewer"));
  editor = await createCaller(srv, org, "editor", await builtinRole(srv, "editor"));
  outsider = await createCaller(srv, other, "outsider", await builtinRole(srv, "owner"));
});
after(() => srv.close());

describe("subscriptions over REST", () => {
  test("create shows the secret once; get and list never do", async () => {
    const created = await ok(rest(srv.url, "POST", `${PATH}/${team}`, { sink: SINK, types: ["api.platform.registry."] }, as(editor)));
    assert.match(created.secret, SECRET);
    assert.ok(created.uid.startsWith(`${team}/`));
    assert.equal(created.sink, SINK);
    assert.deepEqual(created.types, ["api.platform.registry."]);
    assert.equal(created.state, "ACTIVE");
    assert.match(created.createTime, MILLIS_TIMESTAMP);
    const got = await ok(rest(srv.url, "GET", `${PATH}/${created.uid}`, undefined, as(viewer)));
    assert.deepEqual(got, { ...created, secret: "" });
    const listed = await ok(rest(srv.url, "GET", `${PATH}?uidp.descendants_of=${org}`, undefined, as(viewer)));
    assert.deepEqual(
      listed.subscriptions.map((s: { uid: string }) => s.uid),
      [created.uid],
    );
    assert.equal(listed.totalCount, "1");
    assert.ok(!JSON.stringify(listed).includes(created.secret));
    // Subscriptions emit no events: the feed holds none naming it, and nothing anywhere carries the secret.
    const feed = await ok(rest(srv.url, "GET", `/events/v1/events?page_size=200`));
    assert.ok(!JSON.stringify(feed).includes(created.uid));
    assert.ok(!JSON.stringify(feed).includes(created.secret));
    assert.deepEqual(await ok(rest(srv.url, "GET", `${PATH}/${created.uid}/deliveries`, undefined, as(viewer))), { deliveries: [] });
    await ok(rest(srv.url, "DELETE", `${PATH}/${created.uid}`, undefined, as(editor)));
    assertRestError(await rest(srv.url, "GET", `${PATH}/${created.uid}`), 404, 5, "NOT_FOUND");
    assertRestError(await rest(srv.url, "DELETE", `${PATH}/${created.uid}`), 404, 5, "NOT_FOUND");
  });

  test("bad input gets one ErrorInfo and the field violations", async () => {
    const bad = assertRestError(
      await rest(srv.url, "POST", `${PATH}/${team}`, { sink: "http://hooks.example.com/x", types: ["", "a b"] }),
      400,
      3,
      "INVALID_ARGUMENT",
    );
    assert.deepEqual(
      fieldViolations(bad).map((v) => v.field),
      ["sink", "types[0]", "types[1]"],
    );
    for (const sink of ["", "not a url", "https://10.0.0.1/hook", "https://user:pw@hooks.example.com/", "https://hooks.example.com/#x"]) {
      const res = assertRestError(await rest(srv.url, "POST", `${PATH}/${team}`, { sink }), 400, 3, "INVALID_ARGUMENT");
      assert.equal(fieldViolations(res)[0]?.field, "sink", sink);
    }
    assertRestError(await rest(srv.url, "POST", `${PATH}/${team}/0123456789abcdef`, { sink: SINK }), 404, 5, "NOT_FOUND");
    assertRestError(
      await rest(srv.url, "POST", `${PATH}/${team}:redeliver`.replace(team, `${team}/0123456789abcdef`), { eventId: "nope" }),
      404,
      5,
      "NOT_FOUND",
    );
  });

  test("capabilities: a viewer reads but cannot create, update or delete; an outsider sees nothing", async () => {
    assertRestError(await rest(srv.url, "POST", `${PATH}/${team}`, { sink: SINK }, as(viewer)), 403, 7, "PERMISSION_DENIED");
    const created = await ok(rest(srv.url, "POST", `${PATH}/${team}`, { sink: SINK }));
    assertRestError(await rest(srv.url, "DELETE", `${PATH}/${created.uid}`, undefined, as(viewer)), 403, 7, "PERMISSION_DENIED");
    assertRestError(
      await rest(srv.url, "POST", `${PATH}/${created.uid}:redeliver`, { eventId: "x" }, as(viewer)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assertRestError(await rest(srv.url, "GET", `${PATH}/${created.uid}`, undefined, as(outsider)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await rest(srv.url, "GET", `${PATH}/${created.uid}/deliveries`, undefined, as(outsider)), 403, 7, "PERMISSION_DENIED");
    const listed = await ok(rest(srv.url, "GET", PATH, undefined, as(outsider)));
    assert.deepEqual(listed.subscriptions, []);
    // A group holding a subscription cannot be deleted until it is.
    const blocked = assertRestError(await rest(srv.url, "DELETE", `/iam/v2beta1/groups/${team}`), 400, 9, "FAILED_PRECONDITION");
    assert.match(JSON.stringify(preconditionViolations(blocked)), /subscriptions/);
    await ok(rest(srv.url, "DELETE", `${PATH}/${created.uid}`, undefined, as(editor)));
  });

  test("redeliver refuses an event the subscription does not receive", async () => {
    const created = await ok(rest(srv.url, "POST", `${PATH}/${team}`, { sink: SINK }));
    // An event of another organization: kept, but not in this subscription's subtree.
    await createGroup(srv.url, null, "elsewhere");
    const feed = await ok(rest(srv.url, "GET", `/events/v1/events?page_size=200`));
    const foreign = feed.events.find((e: { group: string }) => !e.group.startsWith(org));
    assert.ok(foreign, "an event outside the subscription's group");
    const res = assertRestError(
      await rest(srv.url, "POST", `${PATH}/${created.uid}:redeliver`, { eventId: foreign.id }),
      404,
      5,
      "NOT_FOUND",
    );
    assert.match(res.message, /event/);
    await ok(rest(srv.url, "DELETE", `${PATH}/${created.uid}`));
  });
});

describe("subscriptions over Connect and gRPC", () => {
  let transport: TestTransport;
  before(() => {
    transport = testTransport("connect-h1", srv.url);
  });
  after(() => transport.close());

  test("Connect: create, get, list, delete; a viewer's create is PermissionDenied", async () => {
    const client = createClient(SubscriptionsService, transport.transport);
    const created = await client.createSubscription({ parent: team, subscription: { sink: SINK } });
    assert.match(created.secret, SECRET);
    assert.equal(created.state, Subscription_State.ACTIVE);
    const got = await client.getSubscription({ uid: created.uid });
    assert.equal(got.secret, "");
    assert.equal(got.sink, SINK);
    const listed = await client.listSubscriptions({ uidp: { descendantsOf: org } });
    assert.deepEqual(
      listed.subscriptions.map((s) => s.uid),
      [created.uid],
    );
    assert.equal(listed.totalCount, 1n);
    await client.deleteSubscription({ uid: created.uid });
    assert.equal((await connectError(client.getSubscription({ uid: created.uid }))).code, Code.NotFound);
    const asViewer = testTransport("grpc-web-h1", srv.url, viewer.token);
    try {
      const denied = await connectError(
        createClient(SubscriptionsService, asViewer.transport).createSubscription({ parent: team, subscription: { sink: SINK } }),
      );
      assert.equal(denied.code, Code.PermissionDenied);
    } finally {
      asViewer.close();
    }
  });

  test("gRPC: create returns the secret, list does not; bad sink is INVALID_ARGUMENT", async () => {
    const client = grpcClient(SubscriptionsService, srv.port);
    try {
      const created = await client.call("createSubscription", { parent: team, subscription: { sink: SINK, types: ["api.platform.iam."] } });
      assert.match(created.secret, SECRET);
      const listed = await client.call("listSubscriptions", { uidp: { descendantsOf: org } });
      assert.deepEqual(
        listed.subscriptions.map((s: { secret: string }) => s.secret),
        [""],
      );
      const err = await client.call("createSubscription", { parent: team, subscription: { sink: "ftp://x" } }).catch((e: unknown) => e);
      assert.equal(grpcStatus(err as never).code, Code.InvalidArgument);
      await client.call("deleteSubscription", { uid: created.uid });
    } finally {
      client.close();
    }
  });
});

describe("subscriptions per organization", () => {
  let small: TestServer;
  before(async () => {
    small = await startTestServer({ env: { PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG: "2" } });
  });
  after(() => small.close());

  test("past PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG across the tree: 429 SUBSCRIPTION_QUOTA_EXCEEDED, concurrent creates included", async () => {
    const a = (await createGroup(small.url, null, "quota-a")).uid;
    const folder = (await createGroup(small.url, a, "folder")).uid;
    const b = (await createGroup(small.url, null, "quota-b")).uid;
    const create = (parent: string) => rest(small.url, "POST", `${PATH}/${parent}`, { sink: SINK });
    // Five at once against a limit of two: exactly two are created, whichever they are.
    const raced = await Promise.all([a, folder, a, folder, a].map(create));
    assert.deepEqual(raced.map((r) => r.status).sort(), [200, 200, 429, 429, 429]);
    const refused = raced.find((r) => r.status === 429)!;
    assertRestError(refused, 429, 8, "SUBSCRIPTION_QUOTA_EXCEEDED");
    assert.equal(refused.body.details[0].metadata.limit, "2");
    assert.equal((await ok(rest(small.url, "GET", `${PATH}?uidp.descendants_of=${a}`))).totalCount, "2");
    // Another organization has its own quota; a deletion frees a place.
    await ok(create(b));
    await ok(rest(small.url, "DELETE", `${PATH}/${raced.find((r) => r.status === 200)!.body.uid}`));
    await ok(create(folder));
    assertRestError(await create(a), 429, 8, "SUBSCRIPTION_QUOTA_EXCEEDED");
  });
});
