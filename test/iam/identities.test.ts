import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ServiceError } from "@grpc/grpc-js";
import type { BadRequest } from "../../gen/google/rpc/error_details_pb.js";
import { IdentitiesService, type Identity } from "../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP, preconditionViolations } from "../support/assertions.js";
import { grpcClient, grpcStatus } from "../support/grpc.js";
import { assertPagedWalks } from "../support/paged-walk.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const START = Date.parse("2030-03-04T05:06:07.890Z");
const YEAR_MS = 365 * 24 * 3600 * 1000;
const ISSUER = "https://token.actions.githubusercontent.com";
const PUBLIC_JWKS = JSON.stringify({
  keys: [
    {
      kty: "EC",
      crv: "P-256",
      kid: "k1",
      x: "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
      y: "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
    },
  ],
});
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "k"];

// A clock the tests move by hand, so timestamps are exact values.
let clock = START;
let srv: TestServer;
before(async () => {
  srv = await startTestServer({ now: () => clock });
});
after(async () => {
  await srv.close();
});

const call = (method: string, path: string, body?: unknown) => rest(srv.url, method, path, body);
const iso = (ms: number) => new Date(ms).toISOString();
const claimMatch = (subject = "repo:acme/app:ref:refs/heads/main") => ({ issuer: ISSUER, subject });
const staticKeys = (extra: object = {}) => ({ issuer: "https://offline.example", subject: "robot", issuerKeys: PUBLIC_JWKS, ...extra });

async function createIdentity(parent: string, body: object) {
  const res = await call("POST", `/iam/v2beta1/identities/${parent}`, body);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** Asserts INVALID_ARGUMENT whose violations name exactly these fields. */
function assertViolations(res: Awaited<ReturnType<typeof call>>, fields: string[]) {
  const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
  assert.deepEqual(
    fieldViolations(err).map((v) => v.field),
    fields,
    JSON.stringify(err),
  );
  assert.ok(err.message.startsWith(`Invalid argument: ${fields[0]}: `), err.message);
  return err;
}

describe("create", () => {
  let org: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "identity org");
  });

  test("a claim-match identity gets a child uid, lastSeenTime = createTime, empty output-only emails", async () => {
    const id = await createIdentity(org.uid, {
      name: "ci deployer",
      description: "deploys from CI",
      company: "Acme",
      email: "spoof@example.com",
      uid: "f".repeat(40),
      claimMatch: { ...claimMatch(), audience: "my-aud", claims: { ref: "refs/heads/main" }, claimPatterns: { workflow: "deploy-.*" } },
    });
    assert.match(id.uid, new RegExp(`^${org.uid}/[0-9a-f]{16}$`));
    assert.equal(id.name, "ci deployer");
    assert.equal(id.description, "deploys from CI");
    assert.equal(id.company, "Acme");
    assert.equal(id.email, "");
    assert.equal(id.emailUnverified, "");
    assert.equal(id.createTime, iso(clock));
    assert.equal(id.updateTime, id.createTime);
    assert.equal(id.lastSeenTime, id.createTime);
    assert.match(id.createTime, MILLIS_TIMESTAMP);
    assert.deepEqual(id.claimMatch, {
      issuer: ISSUER,
      subject: "repo:acme/app:ref:refs/heads/main",
      audience: "my-aud",
      claims: { ref: "refs/heads/main" },
      claimPatterns: { workflow: "deploy-.*" },
    });
    assert.equal(id.staticKeys, undefined);
    const got = await call("GET", `/iam/v2beta1/identities/${id.uid}`);
    assert.deepEqual(got.body, id);
  });

  test("claim-match patterns are kept as patterns", async () => {
    const id = await createIdentity(org.uid, {
      name: "pattern id",
      claimMatch: { issuerPattern: "https://.*\\.example", subjectPattern: "repo:acme/.*" },
    });
    assert.deepEqual(id.claimMatch, {
      issuerPattern: "https://.*\\.example",
      subjectPattern: "repo:acme/.*",
      claims: {},
      claimPatterns: {},
    });
  });

  test("static keys: expiration defaults to create time + 365 days; exactly 365 days is accepted", async () => {
    const id = await createIdentity(org.uid, { name: "offline robot", staticKeys: staticKeys({ audiences: ["aud-1"] }) });
    assert.deepEqual(id.staticKeys, { ...staticKeys(), expirationTime: iso(clock + YEAR_MS), audiences: ["aud-1"] });
    assert.equal(id.claimMatch, undefined);
    const capped = await createIdentity(org.uid, {
      name: "offline robot two",
      staticKeys: staticKeys({ expirationTime: iso(clock + YEAR_MS) }),
    });
    assert.equal(capped.staticKeys.expirationTime, iso(clock + YEAR_MS));
    const sooner = await createIdentity(org.uid, {
      name: "offline robot three",
      staticKeys: staticKeys({ expirationTime: iso(clock + 3600_000) }),
    });
    assert.equal(sooner.staticKeys.expirationTime, iso(clock + 3600_000));
  });

  const CASES: [string, object, string[]][] = [
    ["no name", { claimMatch: claimMatch() }, ["name"]],
    ["a name with upper case", { name: "CI Bot", claimMatch: claimMatch() }, ["name"]],
    ["a two-character name", { name: "ci", claimMatch: claimMatch() }, ["name"]],
    ["a 64-character name", { name: "a".repeat(64), claimMatch: claimMatch() }, ["name"]],
    ["a description with a line break", { name: "bot", description: "a\nb", claimMatch: claimMatch() }, ["description"]],
    ["no relationship", { name: "bot" }, ["claim_match"]],
    ["no name and no relationship", {}, ["name", "claim_match"]],
    ["claim match without issuer", { name: "bot", claimMatch: { subject: "s" } }, ["claim_match.issuer"]],
    ["claim match without subject", { name: "bot", claimMatch: { issuer: ISSUER } }, ["claim_match.subject"]],
    [
      "claim match with an invalid issuer pattern",
      { name: "bot", claimMatch: { issuerPattern: "(", subject: "s" } },
      ["claim_match.issuer_pattern"],
    ],
    [
      "claim match with an invalid claim pattern",
      { name: "bot", claimMatch: { ...claimMatch(), claimPatterns: { ref: "[" } } },
      ["claim_match.claim_patterns[ref]"],
    ],
    ["static keys without issuer", { name: "bot", staticKeys: staticKeys({ issuer: "" }) }, ["static_keys.issuer"]],
    ["static keys without subject", { name: "bot", staticKeys: staticKeys({ subject: "" }) }, ["static_keys.subject"]],
    ["static keys without keys", { name: "bot", staticKeys: staticKeys({ issuerKeys: "" }) }, ["static_keys.issuer_keys"]],
    ["issuer keys that are not JSON", { name: "bot", staticKeys: staticKeys({ issuerKeys: "not json" }) }, ["static_keys.issuer_keys"]],
    ["issuer keys that are not a JWKS", { name: "bot", staticKeys: staticKeys({ issuerKeys: "[1,2]" }) }, ["static_keys.issuer_keys"]],
    ["an empty JWKS", { name: "bot", staticKeys: staticKeys({ issuerKeys: '{"keys":[]}' }) }, ["static_keys.issuer_keys"]],
    ["a JWK without kty", { name: "bot", staticKeys: staticKeys({ issuerKeys: '{"keys":[{"x":"1"}]}' }) }, ["static_keys.issuer_keys"]],
    [
      "an expiration past 365 days",
      { name: "bot", staticKeys: staticKeys({ expirationTime: iso(START + YEAR_MS + 1000) }) },
      ["static_keys.expiration_time"],
    ],
    [
      "an expiration in the past",
      { name: "bot", staticKeys: staticKeys({ expirationTime: iso(START - 1000) }) },
      ["static_keys.expiration_time"],
    ],
    ["two audiences", { name: "bot", staticKeys: staticKeys({ audiences: ["a", "b"] }) }, ["static_keys.audiences"]],
    [
      "every static-keys rule at once",
      { name: "bot", staticKeys: { issuerKeys: "{}", audiences: ["a", "b"] } },
      ["static_keys.issuer", "static_keys.subject", "static_keys.issuer_keys", "static_keys.audiences"],
    ],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      assertViolations(await call("POST", `/iam/v2beta1/identities/${org.uid}`, body), fields);
    });
  }

  for (const member of PRIVATE_MEMBERS) {
    test(`a JWKS key with the private member "${member}" is refused`, async () => {
      const jwks = JSON.parse(PUBLIC_JWKS);
      jwks.keys.push({ kty: member === "k" ? "oct" : "RSA", n: "AQAB", e: "AQAB", [member]: "c2VjcmV0" });
      const err = assertViolations(
        await call("POST", `/iam/v2beta1/identities/${org.uid}`, {
          name: "bot",
          staticKeys: staticKeys({ issuerKeys: JSON.stringify(jwks) }),
        }),
        ["static_keys.issuer_keys"],
      );
      assert.match(fieldViolations(err)[0]!.description, new RegExp(`"${member}"`));
    });
  }

  test("both claim match and static keys is INVALID_ARGUMENT", async () => {
    assertRestError(
      await call("POST", `/iam/v2beta1/identities/${org.uid}`, { name: "bot", claimMatch: claimMatch(), staticKeys: staticKeys() }),
      400,
      3,
      "INVALID_ARGUMENT",
    );
  });

  test("a malformed parent is INVALID_ARGUMENT on parent; a missing group is NOT_FOUND", async () => {
    assertViolations(await call("POST", `/iam/v2beta1/identities/${"Z".repeat(40)}`, { name: "bot", claimMatch: claimMatch() }), [
      "parent",
    ]);
    assertViolations(await call("POST", "/iam/v2beta1/identities", { name: "bot", claimMatch: claimMatch() }), ["parent"]);
    assertRestError(
      await call("POST", `/iam/v2beta1/identities/${"a".repeat(40)}`, { name: "bot", claimMatch: claimMatch() }),
      404,
      5,
      "NOT_FOUND",
    );
  });
});

describe("get and delete", () => {
  test("get of a missing identity is NOT_FOUND, of a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `/iam/v2beta1/identities/${"b".repeat(40)}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", "/iam/v2beta1/identities/nope"), ["uid"]);
  });

  test("delete returns {}, then the identity is gone; a second delete is NOT_FOUND", async () => {
    const org = await createGroup(srv.url, null, "delete org");
    const id = await createIdentity(org.uid, { name: "doomed", claimMatch: claimMatch() });
    const res = await call("DELETE", `/iam/v2beta1/identities/${id.uid}`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {});
    assertRestError(await call("GET", `/iam/v2beta1/identities/${id.uid}`), 404, 5, "NOT_FOUND");
    assertRestError(await call("DELETE", `/iam/v2beta1/identities/${id.uid}`), 404, 5, "NOT_FOUND");
  });

  test("a group holding an identity cannot be deleted: RESOURCE_NOT_EMPTY naming identities", async () => {
    const org = await createGroup(srv.url, null, "busy with identities");
    const id = await createIdentity(org.uid, { name: "resident", claimMatch: claimMatch() });
    const err = assertRestError(await call("DELETE", `/iam/v2beta1/groups/${org.uid}`), 400, 9, "FAILED_PRECONDITION");
    const violations = preconditionViolations(err);
    assert.equal(violations[0]!.type, "RESOURCE_NOT_EMPTY");
    assert.match(violations[0]!.description, /identities/);
    assert.equal((await call("DELETE", `/iam/v2beta1/identities/${id.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/groups/${org.uid}`)).status, 200);
  });
});

describe("update", () => {
  let org: { uid: string };
  before(async () => {
    org = await createGroup(srv.url, null, "update org");
  });

  test("without a mask exactly the fields in the body change; updateTime moves, createTime stays", async () => {
    const id = await createIdentity(org.uid, { name: "before", description: "old", company: "acme", claimMatch: claimMatch() });
    clock += 1000;
    const res = await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { description: "new" });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body, { ...id, description: "new", updateTime: iso(clock) });
    const cleared = await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { company: "" });
    assert.equal(cleared.body.company, "");
    assert.equal(cleared.body.description, "new");
  });

  test("updateMask names the only fields that change", async () => {
    const id = await createIdentity(org.uid, { name: "masked", description: "a", claimMatch: claimMatch() });
    const res = await call("PATCH", `/iam/v2beta1/identities/${id.uid}?updateMask=description`, {
      name: "ignored",
      description: "b",
      claimMatch: claimMatch("other"),
    });
    assert.equal(res.body.name, "masked");
    assert.equal(res.body.description, "b");
    assert.deepEqual(res.body.claimMatch, id.claimMatch);
  });

  for (const path of ["uid", "email", "last_seen_time", "createTime", "bogus", "claim_match.issuer"]) {
    test(`mask path ${path} is INVALID_ARGUMENT on update_mask`, async () => {
      const id = await createIdentity(org.uid, { name: "mask target", claimMatch: claimMatch() });
      assertViolations(await call("PATCH", `/iam/v2beta1/identities/${id.uid}?updateMask=${path}`, { description: "x" }), ["update_mask"]);
      assert.equal((await call("GET", `/iam/v2beta1/identities/${id.uid}`)).body.description, "");
    });
  }

  test("changing the relationship replaces it; static keys expire 365 days after the change", async () => {
    const id = await createIdentity(org.uid, { name: "switcher", claimMatch: claimMatch() });
    clock += 5000;
    const res = await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { staticKeys: staticKeys() });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.claimMatch, undefined);
    assert.equal(res.body.staticKeys.expirationTime, iso(clock + YEAR_MS));
    const back = await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { claimMatch: claimMatch("new-subject") });
    assert.equal(back.body.staticKeys, undefined);
    assert.equal(back.body.claimMatch.subject, "new-subject");
  });

  test("a new relationship is re-validated and a failed update changes nothing", async () => {
    const id = await createIdentity(org.uid, { name: "validated", claimMatch: claimMatch() });
    assertViolations(
      await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, {
        staticKeys: staticKeys({ issuerKeys: '{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}' }),
      }),
      ["static_keys.issuer_keys"],
    );
    assertViolations(await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { claimMatch: { issuer: ISSUER } }), ["claim_match.subject"]);
    assertViolations(await call("PATCH", `/iam/v2beta1/identities/${id.uid}?updateMask=claim_match`, { name: "x" }), ["claim_match"]);
    assertViolations(await call("PATCH", `/iam/v2beta1/identities/${id.uid}?updateMask=static_keys`, { claimMatch: claimMatch() }), [
      "static_keys",
    ]);
    assertViolations(await call("PATCH", `/iam/v2beta1/identities/${id.uid}`, { name: "NO" }), ["name"]);
    assert.deepEqual((await call("GET", `/iam/v2beta1/identities/${id.uid}`)).body, id);
  });

  test("a missing identity is NOT_FOUND", async () => {
    assertRestError(await call("PATCH", `/iam/v2beta1/identities/${org.uid}/0123456789abcdef`, { description: "x" }), 404, 5, "NOT_FOUND");
  });
});

describe("list", () => {
  let org: { uid: string };
  let team: { uid: string };
  let items: { uid: string; name: string; createTime: string; updateTime: string }[];
  before(async () => {
    org = await createGroup(srv.url, null, "list org");
    team = await createGroup(srv.url, org.uid, "list team");
    items = [];
    // Repeated names and clock steps of 0 exercise the uid tie-break.
    const plan: [string, string, number, boolean][] = [
      [org.uid, "alpha", 0, false],
      [org.uid, "beta", 1, true],
      [team.uid, "alpha", 0, false],
      [org.uid, "gamma", 0, true],
      [team.uid, "beta", 2, false],
      [org.uid, "alpha", 1, false],
      [team.uid, "delta", 0, true],
    ];
    for (const [parent, name, step, isStatic] of plan) {
      clock += step;
      items.push(await createIdentity(parent, isStatic ? { name, staticKeys: staticKeys() } : { name, claimMatch: claimMatch(name) }));
    }
    clock += 10;
    // Move two update times so updated_at differs from created_at.
    items[0] = (await call("PATCH", `/iam/v2beta1/identities/${items[0]!.uid}`, { description: "touched" })).body;
    items[3] = (await call("PATCH", `/iam/v2beta1/identities/${items[3]!.uid}`, { description: "touched" })).body;
  });

  const uids = async (query: string) => {
    const res = await call("GET", `/iam/v2beta1/identities?${query}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return (res.body.identities as { uid: string }[]).map((i) => i.uid).sort();
  };
  const pick = (pred: (i: number) => boolean) =>
    items
      .filter((_, i) => pred(i))
      .map((i) => i.uid)
      .sort();

  test("uidp, name and relationship_type filters", async () => {
    const all = `uidp.descendants_of=${org.uid}`;
    assert.deepEqual(
      await uids(all),
      pick(() => true),
    );
    assert.deepEqual(
      await uids(`uidp.children_of=${team.uid}`),
      pick((i) => [2, 4, 6].includes(i)),
    );
    assert.deepEqual(
      await uids(`${all}&name=alpha`),
      pick((i) => [0, 2, 5].includes(i)),
    );
    assert.deepEqual(await uids(`${all}&name=alph`), []);
    assert.deepEqual(
      await uids(`${all}&relationship_type=RELATIONSHIP_TYPE_STATIC`),
      pick((i) => [1, 3, 6].includes(i)),
    );
    assert.deepEqual(
      await uids(`${all}&relationshipType=RELATIONSHIP_TYPE_CLAIM_MATCH`),
      pick((i) => [0, 2, 4, 5].includes(i)),
    );
    assert.deepEqual(
      await uids(`${all}&relationship_type=RELATIONSHIP_TYPE_UNSPECIFIED`),
      pick(() => true),
    );
    assert.deepEqual(
      await uids(`${all}&relationship_type=RELATIONSHIP_TYPE_CLAIM_MATCH&name=beta`),
      pick((i) => i === 4),
    );
  });

  for (const type of ["RELATIONSHIP_TYPE_AWS_IDENTITY", "RELATIONSHIP_TYPE_SERVICE_PRINCIPAL"]) {
    test(`${type} matches nothing`, async () => {
      const res = await call("GET", `/iam/v2beta1/identities?uidp.descendants_of=${org.uid}&relationship_type=${type}`);
      assert.equal(res.status, 200);
      assert.deepEqual(res.body.identities, []);
      assert.equal(res.body.totalCount, "0");
      assert.equal(res.body.nextPageToken, undefined);
    });
  }

  test("bad filters and orders are INVALID_ARGUMENT naming the parameter", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/identities?uidp.descendants_of=nope"), ["uidp.descendants_of"]);
    assertViolations(await call("GET", "/iam/v2beta1/identities?order_by=email"), ["order_by"]);
  });

  test("every order, every page size 1..N+1: the paged walk equals the full list", async () => {
    await assertPagedWalks(srv.url, "/iam/v2beta1/identities", "identities", `uidp.descendants_of=${org.uid}`, items, [
      "uid",
      "name",
      "created_at",
      "updated_at",
    ]);
  });
});

describe("lookup", () => {
  test("maps (issuer, subject) to a deterministic root uid, whether or not the person signed up", async () => {
    const q = (issuer: string, subject: string) =>
      call("GET", `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(issuer)}&subject=${encodeURIComponent(subject)}`);
    const a = await q("https://accounts.google.com", "1234");
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.match(a.body.uid, /^[0-9a-f]{40}$/);
    assert.deepEqual((await q("https://accounts.google.com", "1234")).body, a.body);
    assert.notEqual((await q("https://accounts.google.com", "12345")).body.uid, a.body.uid);
    assert.notEqual((await q("https://other.example", "1234")).body.uid, a.body.uid);
  });

  test("issuer and subject are required", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/identities:lookupIdentity?issuer=https://x.example"), ["subject"]);
    assertViolations(await call("GET", "/iam/v2beta1/identities:lookupIdentity?subject=s"), ["issuer"]);
    assertViolations(await call("GET", "/iam/v2beta1/identities:lookupIdentity"), ["issuer", "subject"]);
  });
});

describe("IdentitiesService over native gRPC", () => {
  test("create, get, list, lookup, delete", async () => {
    const client = grpcClient(IdentitiesService, srv.port);
    try {
      const org = await createGroup(srv.url, null, "grpc identities");
      const created: Identity = await client.call("createIdentity", {
        parent: org.uid,
        identity: {
          name: "grpc bot",
          relationship: { case: "claimMatch", value: { iss: { case: "issuer", value: ISSUER }, sub: { case: "subject", value: "s" } } },
        },
      });
      assert.ok(created.uid.startsWith(`${org.uid}/`));
      assert.equal(timestampMs(created.lastSeenTime!), clock);
      assert.equal(created.relationship.case, "claimMatch");
      const got: Identity = await client.call("getIdentity", { uid: created.uid });
      assert.equal(got.name, "grpc bot");
      const listed = await client.call("listIdentities", { uidp: { descendantsOf: org.uid } });
      assert.deepEqual(
        listed.identities.map((i: Identity) => i.uid),
        [created.uid],
      );
      assert.equal(listed.totalCount, 1n);
      const looked = await client.call("lookupIdentity", { issuer: ISSUER, subject: "s" });
      assert.match(looked.uid, /^[0-9a-f]{40}$/);
      await client.call("deleteIdentity", { uid: created.uid });
      const err = await client.call("getIdentity", { uid: created.uid }).then(
        () => assert.fail("expected NOT_FOUND"),
        (e: ServiceError) => e,
      );
      assert.equal(err.code, 5);
      const bad = await client.call("createIdentity", { parent: org.uid, identity: { name: "no relationship" } }).then(
        () => assert.fail("expected INVALID_ARGUMENT"),
        (e: ServiceError) => e,
      );
      assert.equal(bad.code, 3);
      const status = grpcStatus(bad);
      const badRequest = status.details.find((d) => d.$typeName === "google.rpc.BadRequest") as BadRequest;
      assert.deepEqual(
        badRequest.fieldViolations.map((v) => v.field),
        ["claim_match"],
      );
    } finally {
      client.close();
    }
  });
});
