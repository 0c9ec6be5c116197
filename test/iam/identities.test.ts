import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { IdentitiesService, type Identity } from "../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { describeListContract } from "../support/list-contract.js";
import { ok } from "../support/principals.js";
import { assertChildOf, assertDeletedOnce, groupForSuite, iso, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

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
const srv = serveForSuite({ now: () => clock });
const call = restOn(srv);
const claimMatch = (subject = "repo:acme/app:ref:refs/heads/main") => ({ issuer: ISSUER, subject });
const staticKeys = (extra: object = {}) => ({ issuer: "https://offline.example", subject: "robot", issuerKeys: PUBLIC_JWKS, ...extra });

const createIdentity = (parent: string, body: object) => ok(call("POST", `/iam/v2beta1/identities/${parent}`, body));

describe("create", () => {
  const org = groupForSuite(srv, "identity org");

  test("a claim-match identity gets a child uid, lastSeenTime = createTime, empty output-only emails", async () => {
    const id = await createIdentity(org.uid, {
      name: "ci deployer",
      description: "deploys from CI",
      company: "Acme",
      email: "spoof@example.com",
      uid: "f".repeat(40),
      claimMatch: { ...claimMatch(), audience: "my-aud", claims: { ref: "refs/heads/main" }, claimPatterns: { workflow: "deploy-.*" } },
    });
    assertChildOf(id.uid, org.uid);
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
    await assertDeletedOnce(srv, `/iam/v2beta1/identities/${id.uid}`);
  });

  test("a group holding an identity cannot be deleted: RESOURCE_NOT_EMPTY naming identities", async () => {
    const org = await createGroup(srv.url, null, "busy with identities");
    const id = await createIdentity(org.uid, { name: "resident", claimMatch: claimMatch() });
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${org.uid}`), "RESOURCE_NOT_EMPTY", /identities/);
    assert.equal((await call("DELETE", `/iam/v2beta1/identities/${id.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/groups/${org.uid}`)).status, 200);
  });
});

describe("update", () => {
  const org = groupForSuite(srv, "update org");

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

/** The plan's items with static keys; the others match claims. */
const STATIC = new Set([1, 3, 6]);
const isStatic = (item: { staticKeys?: object }) => item.staticKeys !== undefined;

describeListContract({
  resource: "identities",
  srv,
  path: "/iam/v2beta1/identities",
  seed: {
    create: (parent, name, i) =>
      createIdentity(parent, STATIC.has(i) ? { name, staticKeys: staticKeys() } : { name, claimMatch: claimMatch(name) }),
    advance: (ms) => (clock += ms),
  },
  unsortable: ["email"],
  filters: ({ items }) => [
    ["relationship_type=RELATIONSHIP_TYPE_STATIC", isStatic],
    ["relationshipType=RELATIONSHIP_TYPE_CLAIM_MATCH", (i) => !isStatic(i)],
    ["relationship_type=RELATIONSHIP_TYPE_UNSPECIFIED", () => true],
    [`relationship_type=RELATIONSHIP_TYPE_CLAIM_MATCH&name=${items[1].name}`, (i) => !isStatic(i) && i.name === items[1].name],
    // Kinds no identity here has match nothing.
    ["relationship_type=RELATIONSHIP_TYPE_AWS_IDENTITY", () => false],
    ["relationship_type=RELATIONSHIP_TYPE_SERVICE_PRINCIPAL", () => false],
  ],
  invalid: [["relationship_type=RELATIONSHIP_TYPE_BOGUS", ["relationship_type"]]],
  lister: "viewer",
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

describeOverGrpc(srv, IdentitiesService, "create, get, list, lookup, delete", async (client, org) => {
  const created: Identity = await client.call("createIdentity", {
    parent: org,
    identity: {
      name: "grpc bot",
      relationship: { case: "claimMatch", value: { iss: { case: "issuer", value: ISSUER }, sub: { case: "subject", value: "s" } } },
    },
  });
  assert.ok(created.uid.startsWith(`${org}/`));
  assert.equal(timestampMs(created.lastSeenTime!), clock);
  assert.equal(created.relationship.case, "claimMatch");
  const got: Identity = await client.call("getIdentity", { uid: created.uid });
  assert.equal(got.name, "grpc bot");
  const listed = await client.call("listIdentities", { uidp: { descendantsOf: org } });
  assert.deepEqual(
    listed.identities.map((i: Identity) => i.uid),
    [created.uid],
  );
  assert.equal(listed.totalCount, 1n);
  const looked = await client.call("lookupIdentity", { issuer: ISSUER, subject: "s" });
  assert.match(looked.uid, /^[0-9a-f]{40}$/);
  await client.call("deleteIdentity", { uid: created.uid });
  assert.equal((await grpcError(client.call("getIdentity", { uid: created.uid }))).code, 5);
  const bad = await grpcError(client.call("createIdentity", { parent: org, identity: { name: "no relationship" } }));
  assert.equal(bad.code, 3);
  assert.deepEqual(grpcViolations(bad), ["claim_match"]);
});
