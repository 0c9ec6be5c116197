import assert from "node:assert/strict";
import { createHash, randomBytes, randomInt } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { AuthService } from "../../gen/platformapi/auth/v1/auth_pb.js";
import { GroupInvitesService, type GroupInvite } from "../../gen/platformapi/iam/v2beta1/group_invites_pb.js";
import { INVITE_ADDRESS_FAILURE_LIMIT } from "../../src/services/auth/auth.js";
import { assertRestError, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { requestFrom } from "../support/from-address.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { describeListContract } from "../support/list-contract.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { as, builtinRole, createCaller, customRole, ok, type Caller } from "../support/principals.js";
import { assertCreated, assertDeletedOnce, assertSameDenial, createStranger, iso, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup, mintAdminToken, rest, setDefaultToken, type RestResult } from "../support/server.js";

const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const PATH = "/iam/v2beta1/groupInvites";
const CODE = /^([0-9a-f]{32})\.[A-Za-z0-9_-]{43}$/;
const DAY = 24 * 3600;
/** The one refusal every unusable code gets. */
const INVITE_INVALID = "Permission denied: the invite code is invalid, expired or already used";

let clock = Date.now();
let people: OidcIssuer;
let viewer: string;
let owner: string;
/** Every REST response body seen, for the code scan. */
const seen: string[] = [];
/** Every code Create returned. */
const codes: string[] = [];
/** Indexes in seen of the REST Create responses, the only bodies that may hold a code. */
const createBodies = new Set<number>();

const srv = serveForSuite(
  async () => {
    people = await OidcIssuer.start("people");
    return { env: { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PLATFORM_USER_ISSUERS: people.url }, now: () => clock };
  },
  async () => {
    viewer = await builtinRole(srv, "viewer");
    owner = await builtinRole(srv, "owner");
  },
);
after(async () => {
  await people.close();
});

async function call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<RestResult> {
  const res = await rest(srv.url, method, path, body, headers);
  seen.push(JSON.stringify(res.body ?? ""));
  return res;
}
const invite = (roleUid: string, extra: object = {}) => ({ roleUid, ttl: `${DAY}s`, ...extra });

async function createInvite(group: string, body: object, headers?: Record<string, string>) {
  const created = await ok(call("POST", `${PATH}/${group}`, body, headers));
  codes.push(created.code);
  createBodies.add(seen.length - 1);
  return created;
}

/** A loopback address of the caller's own (127.x.y.z from its uid), so per-address limits count each caller apart. */
const addressOf = (caller: Caller) => {
  const h = createHash("sha256").update(caller.uid).digest();
  return `127.${h[0]}.${h[1]}.${1 + (h[2]! % 254)}`;
};

/** POST /auth/v1/register as caller, from its own address unless `from` names one; the raw body text too, for byte comparisons. */
async function register(caller: Caller, code: string, from = addressOf(caller)): Promise<RestResult & { text: string }> {
  const res = await requestFrom(from, `${srv.url}/auth/v1/register`, {
    method: "POST",
    headers: { authorization: `Bearer ${caller.token}`, "content-type": "application/json" },
    body: JSON.stringify({ code }),
  });
  seen.push(res.text);
  const headers = new Headers(Object.entries(res.headers).map(([k, v]) => [k, String(v)] as [string, string]));
  return { status: res.status, body: JSON.parse(res.text), headers, text: res.text };
}

/** Asserts the one INVITE_INVALID refusal; returns the body text. */
function assertRefused(res: RestResult & { text: string }): string {
  const body = assertRestError(res, 403, 7, "INVITE_INVALID");
  assert.equal(body.message, INVITE_INVALID);
  return res.text;
}

/** The (group, role) pairs an identity is bound to. */
async function bindingsOf(uid: string): Promise<[string, string][]> {
  const body = await ok(call("GET", `/iam/v2beta1/roleBindings?identity=${uid}&page_size=200`));
  return body.roleBindings.map((b: { group: { uid: string }; role: { uid: string } }) => [b.group.uid, b.role.uid]);
}

/** Moves the server clock; the administrator's default token is re-minted, as API tokens expire with the clock. */
async function moveClock(ms: number): Promise<void> {
  clock += ms;
  setDefaultToken(srv.port, await mintAdminToken(srv.server));
}

/** A fresh token for caller at the current clock (API tokens expire with it). */
async function remint(caller: Caller): Promise<Caller> {
  return { uid: caller.uid, token: (await srv.server.tokens.mint(caller.uid)).token };
}

describe("create, get, list, delete", () => {
  let org: { uid: string };
  let team: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "invite org", "the org");
    team = await createGroup(srv.url, org.uid, "invite team");
  });

  test("create returns the code once, the role hydrated and the expiration; Get and List never show the code", async () => {
    const inv = await createInvite(
      org.uid,
      invite(viewer, { email: "new@acme.example", singleUse: true, uid: "f".repeat(40), code: "mine", keyId: "mine" }),
    );
    const m = CODE.exec(inv.code);
    assert.ok(m, inv.code);
    const viewerRole = await ok(call("GET", `/iam/v2beta1/roles/${viewer}`));
    assertCreated(inv, org.uid, {
      roleUid: viewer,
      role: { uid: viewer, name: "viewer", description: viewerRole.description, capabilities: viewerRole.capabilities },
      email: "new@acme.example",
      expirationTime: iso(clock + DAY * 1000),
      singleUse: true,
      code: inv.code,
      keyId: m[1],
      createTime: iso(clock),
    });
    assert.match(inv.createTime, MILLIS_TIMESTAMP);
    assert.ok(inv.role.capabilities.includes("CAP_IAM_GROUPS_LIST"));
    const got = await ok(call("GET", `${PATH}/${inv.uid}`));
    assert.deepEqual(got, { ...inv, code: "" });
    const listed = await ok(call("GET", `${PATH}?key_id=${m[1]}`));
    assert.deepEqual(listed.groupInvites, [{ ...inv, code: "" }]);
  });

  test("a ttl of exactly 30 days is accepted; the code is new every time", async () => {
    const a = await createInvite(org.uid, invite(viewer, { ttl: `${30 * DAY}s` }));
    const b = await createInvite(org.uid, invite(viewer, { ttl: "1.5s" }));
    assert.equal(a.expirationTime, iso(clock + 30 * DAY * 1000));
    assert.equal(b.expirationTime, iso(clock + 1500));
    assert.notEqual(a.code, b.code);
    assert.notEqual(a.keyId, b.keyId);
  });

  const CASES: [string, () => object, string[]][] = [
    ["no role", () => ({ ttl: "60s" }), ["role_uid"]],
    ["a role that is not a uid", () => invite("viewer"), ["role_uid"]],
    ["no ttl", () => ({ roleUid: viewer }), ["ttl"]],
    ["a zero ttl", () => invite(viewer, { ttl: "0s" }), ["ttl"]],
    ["a negative ttl", () => invite(viewer, { ttl: "-5s" }), ["ttl"]],
    ["a ttl over 30 days", () => invite(viewer, { ttl: `${30 * DAY + 1}s` }), ["ttl"]],
    ["an email without @", () => invite(viewer, { email: "nobody" }), ["email"]],
    ["an email with a space", () => invite(viewer, { email: "a b@acme.example" }), ["email"]],
    ["an email without a domain dot", () => invite(viewer, { email: "a@localhost" }), ["email"]],
    ["everything wrong at once", () => ({ email: "x" }), ["role_uid", "ttl", "email"]],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      assertViolations(await call("POST", `${PATH}/${org.uid}`, body()), fields);
    });
  }

  test("the role must apply at the group: missing, below the group and another org's roles are NOT_FOUND", async () => {
    const other = await createGroup(srv.url, null, "invite other org");
    const teamRole = await customRole(srv, team.uid, "invite team role", ["CAP_IAM_GROUPS_LIST"]);
    const otherRole = await customRole(srv, other.uid, "invite other role", ["CAP_IAM_GROUPS_LIST"]);
    const orgRole = await customRole(srv, org.uid, "invite org role", ["CAP_IAM_GROUPS_LIST"]);
    for (const role of ["d".repeat(40), `${org.uid}/0123456789abcdef`, teamRole, otherRole]) {
      const err = assertRestError(await call("POST", `${PATH}/${org.uid}`, invite(role)), 404, 5, "NOT_FOUND");
      assert.equal(err.message, `Not found: role ${role} does not exist`);
    }
    const inv = await createInvite(team.uid, invite(orgRole));
    assert.deepEqual(inv.role, { uid: orgRole, name: "invite org role", description: "", capabilities: ["CAP_IAM_GROUPS_LIST"] });
  });

  test("a caller may invite only with capabilities it holds: owner and viewer invites are PERMISSION_DENIED", async () => {
    const inviterRole = await customRole(srv, org.uid, "inviter", [
      "CAP_IAM_GROUP_INVITES_CREATE",
      "CAP_IAM_ROLE_BINDINGS_CREATE",
      "CAP_IAM_GROUP_INVITES_LIST",
      "CAP_IAM_GROUPS_LIST",
    ]);
    const lister = await customRole(srv, org.uid, "invite lister", ["CAP_IAM_GROUPS_LIST"]);
    const inviter = await createCaller(srv, org.uid, "inviter", inviterRole);
    for (const role of [owner, viewer]) {
      const err = assertRestError(await call("POST", `${PATH}/${team.uid}`, invite(role), as(inviter)), 403, 7, "PERMISSION_DENIED");
      assert.match(err.message, /cannot grant/);
    }
    const inv = await createInvite(team.uid, invite(lister), as(inviter));
    assert.equal(inv.roleUid, lister);
    // Without role_bindings.create an invite cannot be made at all.
    const noBind = await createCaller(
      srv,
      org.uid,
      "invite no bind",
      await customRole(srv, org.uid, "invites only", ["CAP_IAM_GROUP_INVITES_CREATE", "CAP_IAM_GROUPS_LIST"]),
    );
    assertRestError(await call("POST", `${PATH}/${team.uid}`, invite(lister), as(noBind)), 403, 7, "PERMISSION_DENIED");
  });

  test("a viewer reads but cannot create or delete; another org's owner gets one answer for existing and missing", async () => {
    const inv = await createInvite(org.uid, invite(viewer));
    const reader = await createCaller(srv, org.uid, "invite reader", viewer);
    assert.equal((await ok(call("GET", `${PATH}/${inv.uid}`, undefined, as(reader)))).code, "");
    assertRestError(await call("POST", `${PATH}/${org.uid}`, invite(viewer), as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("DELETE", `${PATH}/${inv.uid}`, undefined, as(reader)), 403, 7, "PERMISSION_DENIED");
    const stranger = await createStranger(srv, "invite");
    await assertSameDenial(srv, stranger, `${PATH}/${inv.uid}`, `${PATH}/${org.uid}/0123456789abcdef`);
    assertRestError(await call("POST", `${PATH}/${org.uid}`, invite(viewer), as(stranger)), 403, 7, "PERMISSION_DENIED");
  });

  test("there is no update: PATCH has no route", async () => {
    const inv = await createInvite(org.uid, invite(viewer));
    const res = await call("PATCH", `${PATH}/${inv.uid}`, { email: "x@acme.example" });
    assert.ok(res.status === 404 || res.status === 405, `HTTP ${res.status}`);
    assert.equal((await ok(call("GET", `${PATH}/${inv.uid}`))).email, "");
  });

  test("delete returns {}; the invite is gone, its code stops working, and a second delete is NOT_FOUND", async () => {
    const g = await createGroup(srv.url, null, "invite delete org");
    const inv = await createInvite(g.uid, invite(viewer));
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${g.uid}`), "RESOURCE_NOT_EMPTY", /group invites/);
    await assertDeletedOnce(srv, `${PATH}/${inv.uid}`);
    const caller = await createCaller(srv, org.uid, "invite after delete", null);
    assertRefused(await register(caller, inv.code));
    assert.deepEqual(await bindingsOf(caller.uid), []);
  });

  test("get of a missing invite is NOT_FOUND; of a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `${PATH}/${org.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${PATH}/nope`), ["uid"]);
  });
});

/** The planned invites' ttls in seconds: repeated ones, like equal create times, need the uid tie-break. */
const TTLS = [60, 30, 60, 10, 5, 60, 3600];

describeListContract({
  resource: "group invites",
  srv,
  path: PATH,
  seed: {
    create: (parent, _name, i) => createInvite(parent, invite(viewer, { ttl: `${TTLS[i]}s` })),
    advance: (ms) => (clock += ms),
  },
  orderFields: ["uid", "created_at", "expiration_time"],
  defaultOrder: "created_at desc",
  unsortable: ["name", "updated_at", "email"],
  filters: ({ items, team }) => [
    [`key_id=${items[0].keyId}`, (i) => i.uid === items[0].uid],
    // The first invite is in the organization, not the team.
    [`keyId=${items[0].keyId}&uidp.children_of=${team}`, () => false],
    [`key_id=${"0".repeat(32)}`, () => false],
  ],
  lister: "viewer",
  check: (item) => {
    assert.equal(item.code, "");
    seen.push(JSON.stringify(item));
  },
});

describeOverGrpc(srv, GroupInvitesService, "create (code shown once), get, list, delete", async (client, org) => {
  const created: GroupInvite = await client.call("createGroupInvite", {
    parent: org,
    groupInvite: { roleUid: viewer, ttl: { seconds: 3600n }, singleUse: true },
  });
  assert.match(created.code, CODE);
  codes.push(created.code);
  assert.equal(created.role?.name, "viewer");
  const got: GroupInvite = await client.call("getGroupInvite", { uid: created.uid });
  assert.equal(got.code, "");
  assert.equal(got.keyId, created.keyId);
  const listed = await client.call("listGroupInvites", { uidp: { descendantsOf: org } });
  assert.deepEqual(
    listed.groupInvites.map((i: GroupInvite) => [i.uid, i.code]),
    [[created.uid, ""]],
  );
  assert.equal(listed.totalCount, 1n);
  const bad = await grpcError(client.call("createGroupInvite", { parent: org, groupInvite: { roleUid: viewer } }));
  assert.equal(bad.code, 3);
  assert.deepEqual(grpcViolations(bad), ["ttl"]);
  await client.call("deleteGroupInvite", { uid: created.uid });
  assert.equal((await grpcError(client.call("getGroupInvite", { uid: created.uid }))).code, 5);
});

describe("accepting an invite (POST /auth/v1/register)", () => {
  let org: { uid: string; name: string };
  let alice: Caller;
  let bob: Caller;
  before(async () => {
    org = await createGroup(srv.url, null, "invite accept org");
    // People sign in with verified emails (ID tokens carry the real time).
    clock = Math.max(clock, Date.now());
    const signIn = async (sub: string, email: string, verified: boolean) => {
      const res = await ok(
        call("GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}`, undefined, {
          authorization: `Bearer ${people.idToken({ sub, aud: AUTH, email, email_verified: verified })}`,
        }),
      );
      const whoami = await ok(call("GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${res.token}` }));
      return { uid: whoami.subject as string, token: res.token as string };
    };
    alice = await signIn("alice", "alice@acme.example", true);
    bob = await signIn("bob", "invitee@acme.example", false);
  });

  test("a multi-use code binds each caller once; the Session names the caller and the group", async () => {
    const inv = await createInvite(org.uid, invite(viewer));
    const c1 = await createCaller(srv, org.uid, "multi one", null);
    const c2 = await createCaller(srv, org.uid, "multi two", null);
    const res = await register(c1, inv.code);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.identity.uid, c1.uid);
    assert.deepEqual([res.body.group.uid, res.body.group.name], [org.uid, org.name]);
    const whoami = await ok(call("GET", "/auth/v1/ok", undefined, as(c1)));
    assert.deepEqual(
      whoami.capabilities.map((c: { group: { id: string }; role: { name: string } }) => [c.group.id, c.role.name]),
      [[org.uid, "viewer"]],
    );
    assert.equal((await register(c1, inv.code)).status, 200);
    assert.deepEqual(await bindingsOf(c1.uid), [[org.uid, viewer]], "no duplicate binding");
    assert.equal((await register(c2, inv.code)).status, 200);
    assert.deepEqual(await bindingsOf(c2.uid), [[org.uid, viewer]]);
    assert.equal((await ok(call("GET", `${PATH}/${inv.uid}`))).uid, inv.uid, "a multi-use invite stays");
  });

  test("without a code Register returns the caller and no group", async () => {
    const c = await createCaller(srv, org.uid, "no code", null);
    const res = await register(c, "");
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.identity.uid, c.uid);
    assert.equal(res.body.group, undefined);
  });

  test("a single-use code works once: the invite is consumed, a replay is refused", async () => {
    const inv = await createInvite(org.uid, invite(viewer, { singleUse: true }));
    const first = await createCaller(srv, org.uid, "single first", null);
    const second = await createCaller(srv, org.uid, "single second", null);
    assert.equal((await register(first, inv.code)).status, 200);
    assertRestError(await call("GET", `${PATH}/${inv.uid}`), 404, 5, "NOT_FOUND");
    assertRefused(await register(second, inv.code));
    assertRefused(await register(first, inv.code));
    assert.deepEqual(await bindingsOf(second.uid), []);
    assert.deepEqual(await bindingsOf(first.uid), [[org.uid, viewer]]);
  });

  test("a single-use code redeemed by 20 callers at once binds exactly one", async () => {
    const inv = await createInvite(org.uid, invite(viewer, { singleUse: true }));
    const callers = await Promise.all(Array.from({ length: 20 }, (_, i) => createCaller(srv, org.uid, `racer ${i}`, null)));
    const results = await Promise.all(callers.map((c) => register(c, inv.code)));
    assert.equal(results.filter((r) => r.status === 200).length, 1);
    for (const r of results.filter((x) => x.status !== 200)) assertRefused(r);
    const bound = (await Promise.all(callers.map((c) => bindingsOf(c.uid)))).filter((b) => b.length > 0);
    assert.equal(bound.length, 1);
  });

  test("an invite with an email admits only the caller whose verified email matches (any case)", async () => {
    const inv = await createInvite(org.uid, invite(viewer, { email: "Alice@ACME.example" }));
    const noEmail = await createCaller(srv, org.uid, "no email", null);
    assertRefused(await register(noEmail, inv.code));
    // Bob's address is unverified: it does not count.
    const bobInvite = await createInvite(org.uid, invite(viewer, { email: "invitee@acme.example" }));
    assertRefused(await register(await remint(bob), bobInvite.code));
    assertRefused(await register(await remint(bob), inv.code));
    const res = await register(await remint(alice), inv.code);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(await bindingsOf(alice.uid), [[org.uid, viewer]]);
  });

  test("an expired code is refused (the clock moves 2 hours: tokens are re-minted)", async () => {
    const inv = await createInvite(org.uid, invite(viewer, { ttl: "7200s" }));
    const c = await createCaller(srv, org.uid, "too late", null);
    await moveClock(7200 * 1000 - 1);
    assertRestError(await call("GET", "/auth/v1/ok", undefined, as(c)), 401, 16, "UNAUTHENTICATED");
    const fresh = await remint(c);
    await moveClock(1);
    assertRefused(await register(fresh, inv.code));
    assert.deepEqual(await bindingsOf(c.uid), []);
    assert.equal((await ok(call("GET", `${PATH}/${inv.uid}`))).expirationTime, iso(clock));
  });

  test("malformed, unknown, wrong-secret, expired, used and wrong-email codes get byte-identical refusals, over REST and gRPC", async () => {
    const live = await createInvite(org.uid, invite(viewer));
    const used = await createInvite(org.uid, invite(viewer, { singleUse: true }));
    const expiring = await createInvite(org.uid, invite(viewer, { ttl: "1s" }));
    const forCarol = await createInvite(org.uid, invite(viewer, { email: "carol@acme.example" }));
    assert.equal((await register(await createCaller(srv, org.uid, "uses it up", null), used.code)).status, 200);
    await moveClock(1000);
    const caller = await createCaller(srv, org.uid, "refused caller", null);
    const wrongSecret = `${live.keyId}.${randomBytes(32).toString("base64url")}`;
    const unknown = `${randomBytes(16).toString("hex")}.${randomBytes(32).toString("base64url")}`;
    const cases: [string, string][] = [
      ["malformed", "not-a-code"],
      ["unknown", unknown],
      ["wrong secret", wrongSecret],
      ["expired", expiring.code],
      ["used", used.code],
      ["wrong email", forCarol.code],
    ];
    const texts = new Set<string>();
    for (const [, code] of cases) texts.add(assertRefused(await register(caller, code)));
    assert.equal(texts.size, 1, [...texts].join("\n"));
    const client = grpcClient(AuthService, srv.port, { token: (await createCaller(srv, org.uid, "refused over grpc", null)).token });
    try {
      const statuses = new Set<string>();
      for (const [, code] of cases) {
        const err = await grpcError(client.call("register", { code }));
        assert.equal(err.code, 7);
        statuses.add(JSON.stringify(grpcStatus(err)));
      }
      assert.equal(statuses.size, 1);
      const only = JSON.parse([...statuses][0]!);
      assert.equal(only.message, INVITE_INVALID);
      assert.equal(only.details[0].reason, "INVITE_INVALID");
    } finally {
      client.close();
    }
    assert.deepEqual(await bindingsOf(caller.uid), []);
  });

  /** A code of the invite's key id with a random secret: always wrong. */
  const wrongCode = (inv: { keyId: string }) => `${inv.keyId}.${randomBytes(32).toString("base64url")}`;

  test("after 10 failures a caller's further failures are RESOURCE_EXHAUSTED for the window; its valid code is still accepted", async () => {
    const inv = await createInvite(org.uid, invite(viewer));
    const guesser = await createCaller(srv, org.uid, "guesser", null);
    const bystander = await createCaller(srv, org.uid, "bystander", null);
    let failures = 0;
    for (; failures < 10; failures++) assertRefused(await register(guesser, wrongCode(inv)));
    const limited = await register(guesser, wrongCode(inv));
    const body = assertRestError(limited, 429, 8, "RESOURCE_EXHAUSTED");
    assert.doesNotMatch(body.message, /invite code is invalid/);
    const client = grpcClient(AuthService, srv.port, { token: guesser.token });
    try {
      const err = await grpcError(client.call("register", { code: wrongCode(inv) }));
      assert.equal(err.code, 8);
    } finally {
      client.close();
    }
    assert.deepEqual(await bindingsOf(guesser.uid), []);
    assert.equal((await register(bystander, inv.code)).status, 200, "other callers are not limited");
    // The code is 256-bit: a valid one is accepted whatever the failure count, and binds.
    const accepted = await register(guesser, inv.code);
    assert.equal(accepted.status, 200, accepted.text);
    assert.deepEqual(await bindingsOf(guesser.uid), [[org.uid, viewer]]);
    await moveClock(10 * 60 * 1000 - 1);
    assertRestError(await register(await remint(guesser), wrongCode(inv)), 429, 8, "RESOURCE_EXHAUSTED");
    await moveClock(10 * 60 * 1000);
    assertRefused(await register(await remint(guesser), wrongCode(inv)));
  });

  test("35 failures from one address (a NAT) refuse its further failures, but not a valid code from another caller there, on REST, Connect and gRPC", async () => {
    const inv = await createInvite(org.uid, invite(viewer));
    // gRPC clients here connect from 127.0.0.1, so the shared address is that one.
    const from = "127.0.0.1";
    const statuses: number[] = [];
    for (let i = 0; i < INVITE_ADDRESS_FAILURE_LIMIT + 5; i++) {
      const fresh = await createCaller(srv, org.uid, `address guesser ${i}`, null);
      statuses.push((await register(fresh, wrongCode(inv), from)).status);
    }
    const refused = statuses.filter((s) => s === 403).length;
    assert.deepEqual([refused, statuses.length - refused], [INVITE_ADDRESS_FAILURE_LIMIT, 5], `${statuses}`);
    assert.deepEqual(statuses.slice(INVITE_ADDRESS_FAILURE_LIMIT), [429, 429, 429, 429, 429]);
    // Failures alone are limited there: a fresh identity's wrong code too.
    const another = await createCaller(srv, org.uid, "address another guesser", null);
    assertRestError(await register(another, wrongCode(inv), from), 429, 8, "RESOURCE_EXHAUSTED");
    // Another caller behind that address with the valid code: accepted on every protocol.
    const viaRest = await createCaller(srv, org.uid, "address newcomer rest", null);
    const restAccepted = await register(viaRest, inv.code, from);
    assert.equal(restAccepted.status, 200, restAccepted.text);
    assert.equal(restAccepted.body.group.uid, org.uid);
    const viaConnect = await createCaller(srv, org.uid, "address newcomer connect", null);
    const connect = await requestFrom(from, `${srv.url}/${AuthService.typeName}/Register`, {
      method: "POST",
      headers: { authorization: `Bearer ${viaConnect.token}`, "content-type": "application/json" },
      body: JSON.stringify({ code: inv.code }),
    });
    assert.equal(connect.status, 200, connect.text);
    const viaGrpc = await createCaller(srv, org.uid, "address newcomer grpc", null);
    const client = grpcClient(AuthService, srv.port, { token: viaGrpc.token });
    try {
      const session = (await client.call("register", { code: inv.code })) as { group?: { uid: string } };
      assert.equal(session.group?.uid, org.uid);
      const err = await grpcError(client.call("register", { code: wrongCode(inv) }));
      assert.equal(err.code, 8, "a failure over gRPC from the limited address");
    } finally {
      client.close();
    }
    for (const c of [viaRest, viaConnect, viaGrpc]) assert.deepEqual(await bindingsOf(c.uid), [[org.uid, viewer]]);
    // Another address is not limited; the limited one is judged afresh after the window.
    assertRefused(await register(another, wrongCode(inv), "127.0.0.2"));
    await moveClock(10 * 60 * 1000);
    const later = await createCaller(srv, org.uid, "address later", null);
    assertRefused(await register(later, wrongCode(inv), from));
    assert.equal((await register(later, inv.code, from)).status, 200);
  });

  test("brute force: 10,000 random codes from 1,000 callers are all refused; replays and expired codes too", async () => {
    const target = await createGroup(srv.url, null, "invite brute force org");
    const live = [
      await createInvite(target.uid, invite(viewer)),
      await createInvite(target.uid, invite(viewer, { singleUse: true })),
      await createInvite(target.uid, invite(owner, { ttl: `${30 * DAY}s` })),
    ];
    const CALLERS = 1000;
    const PER_CALLER = 10;
    const callers: Caller[] = [];
    for (let i = 0; i < CALLERS; i += 50) {
      callers.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(50, CALLERS - i) }, (_, j) => createCaller(srv, target.uid, `brute ${i + j}`, null)),
        )),
      );
    }
    const b64 = () => randomBytes(32).toString("base64url");
    const garbage = (): string => {
      const key = live[randomInt(live.length)]!.keyId;
      const forms = [
        // Control characters are INVALID_ARGUMENT on every request field (security-text.test.ts), before any code is judged.
        () =>
          randomBytes(randomInt(1, 120))
            .toString("latin1")
            .replace(/[^ -\u00ff]/g, "x") || "x",
        () => key,
        () => `${key}.`,
        () => `.${b64()}`,
        () => `${key.toUpperCase()}.${b64()}`,
        () => `${key}..${b64()}`,
        () => `${key}.${b64()}=`,
        () => `${key}.${b64()}${b64()}`,
        () => `${key}.${b64().slice(1)}`,
        () => `${key} .${b64()}`,
        () => `${key}.${b64().replace(/.$/, "é")}`,
        () => "x".repeat(randomInt(1, 5000)),
      ];
      return forms[randomInt(forms.length)]!();
    };
    const attempts: { caller: Caller; code: string }[] = [];
    callers.forEach((caller, c) => {
      for (let k = 0; k < PER_CALLER; k++) {
        const n = c * PER_CALLER + k;
        const code =
          n % 3 === 0
            ? `${randomBytes(16).toString("hex")}.${b64()}`
            : n % 3 === 1
              ? `${live[n % live.length]!.keyId}.${b64()}`
              : garbage();
        attempts.push({ caller, code });
      }
    });
    const statuses = new Map<number, number>();
    const bodies = new Set<string>();
    let accepted = 0;
    const started = Date.now();
    for (let i = 0; i < attempts.length; i += 100) {
      const batch = await Promise.all(attempts.slice(i, i + 100).map((a) => register(a.caller, a.code)));
      for (const r of batch) {
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 200) accepted++;
        else bodies.add(r.text);
      }
    }
    const elapsed = Date.now() - started;
    assert.equal(accepted, 0);
    assert.deepEqual([...statuses], [[403, CALLERS * PER_CALLER]]);
    assert.equal(bodies.size, 1, "every refusal is the same bytes");
    assert.equal(JSON.parse([...bodies][0]!).details[0].reason, "INVITE_INVALID");
    const bound = await ok(call("GET", `/iam/v2beta1/roleBindings?uidp.children_of=${target.uid}`));
    assert.equal(bound.totalCount, "0", "no binding was created in the target group");
    // The live invites are untouched: the single-use one still works, once.
    const redeemer = await createCaller(srv, target.uid, "rightful", null);
    assert.equal((await register(redeemer, live[1]!.code)).status, 200);
    const replay = await register(await createCaller(srv, target.uid, "replayer", null), live[1]!.code);
    assertRefused(replay);
    const expiring = await createInvite(target.uid, invite(viewer, { ttl: "60s" }));
    await moveClock(60_000);
    const late = await register(await createCaller(srv, target.uid, "latecomer", null), expiring.code);
    assertRefused(late);
    // eslint-disable-next-line no-console
    console.log(
      `invite brute force: ${attempts.length} random codes from ${CALLERS} callers in ${elapsed} ms: ${accepted} accepted, ` +
        `${statuses.get(403)} refused with ${bodies.size} distinct body; single-use replay refused; expired refused; ` +
        `rate limit after 10 failures per caller within 10 minutes (HTTP 429, code 8)`,
    );
  });
});

test("no response after Create ever carried an invite code", () => {
  assert.ok(codes.length > 20 && seen.length > 10_000, `${codes.length} codes, ${seen.length} bodies`);
  const leaks = seen.filter((body, i) => !createBodies.has(i) && codes.some((code) => body.includes(code)));
  assert.deepEqual(leaks, []);
});
