/**
 * Issue 23 §1 and §4: every mutating RPC writes exactly its CloudEvent(s) in
 * the same transaction — type, subject, group, and data (actor, request id,
 * the resource as the API returns it after the change) — and a refused or
 * failed call writes none. Read back through ListEvents over REST, on the
 * suite's engine (PLATFORM_TEST_BACKEND).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { METRICS_ENV, scrapeMetrics } from "../support/metrics-scrape.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const EVENTS = "/events/v1/events";
const DIGEST = `sha256:${"a".repeat(64)}`;

interface EventJson {
  id: string;
  source: string;
  specVersion: string;
  type: string;
  subject: string;
  time: string;
  group: string;
  dataContentType: string;
  data: { actor: { subject: string }; requestId: string; body: Record<string, unknown> };
  cursor: string;
}

describe("every mutation emits its events, and only committed ones", () => {
  let srv: TestServer;
  let cursor = "";
  let adminSubject = "";
  before(async () => {
    srv = await startTestServer({ env: METRICS_ENV });
    adminSubject = (await ok(rest(srv.url, "GET", "/auth/v1/ok"))).subject as string;
  });
  after(() => srv.close());

  /** The events committed since the last call (every page), advancing the cursor. */
  async function drain(): Promise<EventJson[]> {
    const out: EventJson[] = [];
    for (;;) {
      const page = await ok(rest(srv.url, "GET", `${EVENTS}?page_size=200${cursor ? `&page_token=${cursor}` : ""}`));
      out.push(...(page.events as EventJson[]));
      assert.ok(page.nextPageToken, "a next page token is always given");
      cursor = page.nextPageToken as string;
      if ((page.events as unknown[]).length < 200) return out;
    }
  }

  /** Runs a call and returns the events it emitted, as [type, subject, group] plus the events. */
  async function emitted(call: () => Promise<unknown>): Promise<{ rows: [string, string, string][]; events: EventJson[] }> {
    await drain();
    await call();
    const events = await drain();
    return { rows: events.map((e) => [e.type, e.subject, e.group]), events };
  }

  test("the feed starts with a cursor, and an event is a CloudEvent", async () => {
    await drain();
    const { events } = await emitted(() => createGroup(srv.url, null, "shape"));
    assert.equal(events.length, 1);
    const [e] = events;
    assert.match(e!.id, /^[0-9a-f-]{36}$/);
    assert.equal(e!.specVersion, "1.0");
    assert.match(e!.source, /^https?:\/\//, "the source is the deployment's base URL");
    assert.equal(e!.dataContentType, "application/json");
    assert.match(e!.time, /^\d{4}-\d\d-\d\dT/);
    assert.equal(e!.data.actor.subject, adminSubject);
    assert.ok(e!.data.requestId, "the request id is recorded");
    assert.equal(e!.data.body.uid, e!.subject);
    assert.equal(e!.data.body.name, "shape");
    assert.ok(e!.cursor);
  });

  test("IAM mutations: one event each with its type, subject and group; the body is what the API answered", async () => {
    const org = await createGroup(srv.url, null, "org");
    const P = "api.platform.";
    let r = await emitted(() => createGroup(srv.url, org.uid, "folder"));
    const folder = r.events[0]!.data.body as { uid: string };
    assert.deepEqual(r.rows, [[`${P}iam.group.created.v1`, folder.uid, folder.uid]]);

    r = await emitted(() => ok(rest(srv.url, "PATCH", `/iam/v2beta1/groups/${folder.uid}`, { name: "renamed" })));
    assert.deepEqual(r.rows, [[`${P}iam.group.updated.v1`, folder.uid, folder.uid]]);
    assert.equal(r.events[0]!.data.body.name, "renamed");

    const viewer = await builtinRole(srv, "viewer");
    let answer: Record<string, unknown> = {};
    r = await emitted(async () => {
      answer = await ok(
        rest(srv.url, "POST", `/iam/v2beta1/identities/${org.uid}`, {
          name: "bot",
          claimMatch: { issuer: "https://ci.example", subject: "bot" },
        }),
      );
    });
    const identity = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}iam.identity.created.v1`, identity, org.uid]]);
    assert.deepEqual(r.events[0]!.data.body, answer, "the body is exactly the API's answer");

    r = await emitted(() => ok(rest(srv.url, "PATCH", `/iam/v2beta1/identities/${identity}`, { description: "d" })));
    assert.deepEqual(r.rows, [[`${P}iam.identity.updated.v1`, identity, org.uid]]);

    r = await emitted(async () => {
      answer = await ok(rest(srv.url, "POST", `/iam/v2beta1/roles/${org.uid}`, { name: "r", capabilities: ["CAP_IAM_GROUPS_LIST"] }));
    });
    const role = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}iam.roles.created.v1`, role, org.uid]]);
    r = await emitted(() => ok(rest(srv.url, "PATCH", `/iam/v2beta1/roles/${role}`, { description: "x" })));
    assert.deepEqual(r.rows, [[`${P}iam.roles.updated.v1`, role, org.uid]]);

    r = await emitted(async () => {
      answer = await ok(rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${folder.uid}`, { identityUid: identity, roleUid: role }));
    });
    const binding = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}iam.rolebindings.created.v1`, binding, folder.uid]]);
    const body = r.events[0]!.data.body as { identity: Record<string, unknown> };
    assert.equal(body.identity.uid, identity);
    assert.equal(body.identity.name, "", "a binding's event names its identity by uid only");

    r = await emitted(() =>
      ok(
        rest(srv.url, "POST", "/iam/v2beta1/roleBindings:batchCreate", {
          parent: org.uid,
          roleUid: role,
          requests: [{ parent: org.uid, roleBinding: { identityUid: identity } }],
        }),
      ),
    );
    assert.deepEqual(r.rows, [[`${P}iam.rolebindings.created.batch.v1`, org.uid, org.uid]]);
    const batch = r.events[0]!.data.body as { roleBindings: { uid: string }[] };
    assert.equal(batch.roleBindings.length, 1);

    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/roleBindings/${batch.roleBindings[0]!.uid}`)));
    assert.deepEqual(r.rows, [[`${P}iam.rolebindings.deleted.v1`, batch.roleBindings[0]!.uid, org.uid]]);
    assert.deepEqual(r.events[0]!.data.body, { uid: batch.roleBindings[0]!.uid });

    r = await emitted(async () => {
      answer = await ok(
        rest(srv.url, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
          name: "sso",
          defaultRole: viewer,
          oidc: { issuer: "https://login.example", clientId: "c", clientSecret: "very-secret-value" },
        }),
      );
    });
    const idp = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}iam.identity_providers.created.v1`, idp, org.uid]]);
    assert.ok(!JSON.stringify(r.events).includes("very-secret-value"), "no client secret in an event");
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/identityProviders/${idp}`)));
    assert.deepEqual(r.rows, [[`${P}iam.identity_providers.deleted.v1`, idp, org.uid]]);

    r = await emitted(async () => {
      answer = await ok(
        rest(srv.url, "POST", `/iam/v2beta1/accountAssociations/${org.uid}`, { name: "aws", amazon: { account: "123456789012" } }),
      );
    });
    assert.deepEqual(r.rows, [[`${P}iam.account_associations.created.v1`, answer.uid, org.uid]]);

    let code = "";
    r = await emitted(async () => {
      answer = await ok(rest(srv.url, "POST", `/iam/v2beta1/groupInvites/${org.uid}`, { roleUid: viewer, ttl: "3600s" }));
      code = answer.code as string;
    });
    assert.ok(code.length > 20);
    assert.deepEqual(r.rows, [[`${P}iam.group_invite.created.v1`, answer.uid, org.uid]]);
    assert.ok(!JSON.stringify(r.events).includes(code), "the invite code is never in an event");
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/groupInvites/${answer.uid as string}`)));
    assert.deepEqual(r.rows, [[`${P}iam.group_invite.deleted.v1`, answer.uid, org.uid]]);

    await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/roleBindings/${binding}`)));
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/roles/${role}`)));
    assert.deepEqual(r.rows, [[`${P}iam.roles.deleted.v1`, role, org.uid]]);
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/identities/${identity}`)));
    assert.deepEqual(r.rows, [[`${P}iam.identity.deleted.v1`, identity, org.uid]]);
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/iam/v2beta1/groups/${folder.uid}`)));
    assert.deepEqual(r.rows, [[`${P}iam.group.deleted.v1`, folder.uid, folder.uid]]);
  });

  test("registry mutations: repo created/updated/deleted, tag created, moved (updated) and deleted", async () => {
    const org = await createGroup(srv.url, null, "registry org");
    const P = "api.platform.registry.";
    let answer: Record<string, unknown> = {};
    let r = await emitted(async () => {
      answer = await ok(rest(srv.url, "POST", `/registry/v2beta1/repos/${org.uid}`, { name: "app" }));
    });
    const repo = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}repo.created.v1`, repo, org.uid]]);
    r = await emitted(() => ok(rest(srv.url, "PATCH", `/registry/v2beta1/repos/${repo}`, { description: "hi" })));
    assert.deepEqual(r.rows, [[`${P}repo.updated.v1`, repo, org.uid]]);
    r = await emitted(async () => {
      answer = await ok(rest(srv.url, "POST", `/registry/v2beta1/tags/${repo}`, { name: "latest", digest: DIGEST }));
    });
    const tag = answer.uid as string;
    assert.deepEqual(r.rows, [[`${P}tag.created.v1`, tag, org.uid]]);
    r = await emitted(() =>
      ok(rest(srv.url, "POST", `/registry/v2beta1/tags/${repo}`, { name: "latest", digest: `sha256:${"b".repeat(64)}` })),
    );
    assert.deepEqual(r.rows, [[`${P}tag.updated.v1`, tag, org.uid]]);
    assert.equal(r.events[0]!.data.body.digest, `sha256:${"b".repeat(64)}`);
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/registry/v2beta1/tags/${tag}`)));
    assert.deepEqual(r.rows, [[`${P}tag.deleted.v1`, tag, org.uid]]);
    r = await emitted(() => ok(rest(srv.url, "DELETE", `/registry/v2beta1/repos/${repo}`)));
    assert.deepEqual(r.rows, [[`${P}repo.deleted.v1`, repo, org.uid]]);
    // Counted once each as committed: the tag's created, updated and deleted.
    const metrics = await scrapeMetrics(srv.url);
    assert.match(metrics, /^platform_events_written_total\{kind="tag"\} 3$/m);
  });

  test("a root organization made by a signed-in identity emits the group and its owner binding, actor the identity", async () => {
    const home = await createGroup(srv.url, null, "home");
    const maker: Caller = await createCaller(srv, home.uid, "maker", null);
    const r = await emitted(() => ok(rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "mine" }, as(maker))));
    const org = r.events[0]!.subject;
    assert.deepEqual(
      r.rows.map(([type]) => type),
      ["api.platform.iam.group.created.v1", "api.platform.iam.rolebindings.created.v1"],
    );
    assert.equal(r.rows[1]![2], org);
    for (const e of r.events) assert.equal(e.data.actor.subject, maker.uid);
  });

  test("page_size is 50 by default and at most 200; a page_token that is not a cursor is INVALID_ARGUMENT", async () => {
    const org = await createGroup(srv.url, null, "paging");
    await drain();
    const start = cursor;
    for (let i = 0; i < 210; i++) await createGroup(srv.url, org.uid, `page ${i}`);
    const page = async (query: string) => ok(rest(srv.url, "GET", `${EVENTS}?page_token=${start}&${query}`));
    assert.equal((await page("page_size=0")).events.length, 50);
    assert.equal((await page("page_size=1000000000")).events.length, 200);
    const second = await page(`page_size=200`);
    const rest10 = await ok(rest(srv.url, "GET", `${EVENTS}?page_token=${second.nextPageToken as string}`));
    assert.equal(rest10.events.length, 10, "the next page resumes after the 200th");
    for (const [query, field] of [
      ["page_size=-1", "page_size"],
      ["page_token=not-a-cursor", "page_token"],
      [`page_token=${Buffer.from("e1.0.1x").toString("base64url")}`, "page_token"],
      ["type_prefix=api platform", "type_prefix"],
    ] as const) {
      const body = assertRestError(await rest(srv.url, "GET", `${EVENTS}?${query}`), 400, 3, "INVALID_ARGUMENT");
      assert.deepEqual(
        fieldViolations(body).map((v) => v.field),
        [field],
        query,
      );
    }
  });

  test("refused and failed calls emit nothing", async () => {
    const org = await createGroup(srv.url, null, "refusals");
    const folder = await createGroup(srv.url, org.uid, "full");
    await createGroup(srv.url, folder.uid, "child");
    const viewer = await builtinRole(srv, "viewer");
    const stranger = await createCaller(srv, org.uid, "stranger", null);
    const r = await emitted(async () => {
      // Invalid input, a missing parent, a forbidden caller, a non-empty group, a built-in role, an unknown uid.
      assert.equal((await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: "" })).status, 400);
      assert.equal((await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}/${"0".repeat(16)}`, { name: "xyz" })).status, 404);
      assert.equal((await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: "xyz" }, as(stranger))).status, 403);
      assert.equal((await rest(srv.url, "DELETE", `/iam/v2beta1/groups/${folder.uid}`)).status, 400);
      assert.equal((await rest(srv.url, "DELETE", `/iam/v2beta1/roles/${viewer}`)).status, 400);
      assert.equal((await rest(srv.url, "DELETE", `/iam/v2beta1/groups/${org.uid}/${"1".repeat(16)}`)).status, 404);
    });
    assert.deepEqual(r.rows, []);
  });
});
