import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { IdentityProvidersService, type IdentityProvider } from "../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import { SecurityTokenService } from "../../gen/platformapi/oidc/v1/sts_pb.js";
import { providerUserUid } from "../../src/domain/user-identity.js";
import { assertRestError, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { grpcClient } from "../support/grpc.js";
import { describeListContract } from "../support/list-contract.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { as, builtinRole, createCaller, customRole, ok } from "../support/principals.js";
import {
  assertCreated,
  assertDeletedOnce,
  assertSameDenial,
  createStranger,
  groupForSuite,
  iso,
  serveForSuite,
} from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup, rest, type RestResult } from "../support/server.js";

const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const CLIENT_ID = "console-client";
/** The client secret every provider here is created with: no response may ever contain it. */
const SECRET = `cs-${randomBytes(16).toString("hex")}`;
const PATH = "/iam/v2beta1/identityProviders";

let clock = Date.now();
let A: OidcIssuer;
let B: OidcIssuer;
let viewer: string;
let owner: string;
/** Every REST and gRPC response body seen, for the secret scan. */
const seen: string[] = [];

const srv = serveForSuite(
  async () => {
    [A, B] = await Promise.all([OidcIssuer.start("idp-a"), OidcIssuer.start("idp-b")]);
    return { env: { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH }, now: () => clock };
  },
  async () => {
    viewer = await builtinRole(srv, "viewer");
    owner = await builtinRole(srv, "owner");
  },
);
after(async () => {
  await Promise.all([A.close(), B.close()]);
});

async function call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<RestResult> {
  const res = await rest(srv.url, method, path, body, headers);
  seen.push(JSON.stringify(res.body ?? ""));
  return res;
}
const oidc = (extra: object = {}) => ({ issuer: "https://login.acme.example", clientId: CLIENT_ID, clientSecret: SECRET, ...extra });
const provider = (extra: object = {}) => ({ name: "acme sso", defaultRole: viewer, oidc: oidc(), ...extra });
const createProvider = async (parent: string, body: object = provider(), headers?: Record<string, string>) =>
  ok(call("POST", `${PATH}/${parent}`, body, headers));

describe("create and get", () => {
  const org = groupForSuite(srv, "idp org");

  test("returns the provider under its group, the secret blanked; Get returns the same", async () => {
    const p = await createProvider(
      org.uid,
      provider({
        description: "corporate",
        uid: "f".repeat(40),
        oidc: oidc({
          additionalScopes: ["email", "groups"],
          groupsClaim: "groups",
          pkceEnabled: true,
          correlationRule: "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID",
        }),
      }),
    );
    assertCreated(p, org.uid, {
      name: "acme sso",
      description: "corporate",
      defaultRole: viewer,
      createTime: iso(clock),
      updateTime: iso(clock),
      oidc: {
        issuer: "https://login.acme.example",
        clientId: CLIENT_ID,
        clientSecret: "",
        additionalScopes: ["email", "groups"],
        groupsClaim: "groups",
        correlationRule: "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID",
        pkceEnabled: true,
      },
    });
    assert.match(p.createTime, MILLIS_TIMESTAMP);
    assert.deepEqual(await ok(call("GET", `${PATH}/${p.uid}`)), p);
  });

  test("PKCE alone (no secret) is enough; a loopback http issuer is accepted for development", async () => {
    const p = await createProvider(
      org.uid,
      provider({ oidc: { issuer: "http://127.0.0.1:5556/dex", clientId: CLIENT_ID, pkceEnabled: true } }),
    );
    assert.equal(p.oidc.pkceEnabled, true);
    assert.equal(p.oidc.issuer, "http://127.0.0.1:5556/dex");
  });

  const CASES: [string, () => object, string[]][] = [
    ["no name", () => provider({ name: "" }), ["name"]],
    ["a two-character name", () => provider({ name: "ab" }), ["name"]],
    ["a 64-character name", () => provider({ name: "a".repeat(64) }), ["name"]],
    ["a name with upper case", () => provider({ name: "Acme SSO" }), ["name"]],
    ["a description with a line break", () => provider({ description: "a\nb" }), ["description"]],
    ["no default role", () => provider({ defaultRole: "" }), ["default_role"]],
    ["a default role that is not a uid", () => provider({ defaultRole: "viewer" }), ["default_role"]],
    ["no oidc", () => provider({ oidc: undefined }), ["oidc"]],
    ["no issuer", () => provider({ oidc: oidc({ issuer: "" }) }), ["oidc.issuer"]],
    ["a plain http issuer", () => provider({ oidc: oidc({ issuer: "http://login.acme.example" }) }), ["oidc.issuer"]],
    ["an issuer with a query", () => provider({ oidc: oidc({ issuer: "https://login.acme.example?x=1" }) }), ["oidc.issuer"]],
    ["an issuer that is not a URL", () => provider({ oidc: oidc({ issuer: "login.acme.example" }) }), ["oidc.issuer"]],
    ["a file: issuer", () => provider({ oidc: oidc({ issuer: "file:///etc/passwd" }) }), ["oidc.issuer"]],
    ["no client id", () => provider({ oidc: oidc({ clientId: "" }) }), ["oidc.client_id"]],
    ["neither a client secret nor PKCE", () => provider({ oidc: oidc({ clientSecret: "" }) }), ["oidc.client_secret"]],
    ["a scope with a space", () => provider({ oidc: oidc({ additionalScopes: ["email", "a b"] }) }), ["oidc.additional_scopes[1]"]],
    ["an unknown correlation rule", () => provider({ oidc: oidc({ correlationRule: 7 }) }), ["oidc.correlation_rule"]],
    [
      "everything wrong at once",
      () => ({ name: "X", oidc: { issuer: "ftp://x", pkceEnabled: false } }),
      ["name", "default_role", "oidc.issuer", "oidc.client_id", "oidc.client_secret"],
    ],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}`, async () => {
      assertViolations(await call("POST", `${PATH}/${org.uid}`, body()), fields);
    });
  }

  test("the default role must apply at the group: a missing role, a role below the group and another org's role are NOT_FOUND", async () => {
    const team = await createGroup(srv.url, org.uid, "idp team");
    const other = await createGroup(srv.url, null, "idp other org");
    const teamRole = await customRole(srv, team.uid, "team role", ["CAP_IAM_GROUPS_LIST"]);
    const otherRole = await customRole(srv, other.uid, "other role", ["CAP_IAM_GROUPS_LIST"]);
    const orgRole = await customRole(srv, org.uid, "org role", ["CAP_IAM_GROUPS_LIST"]);
    for (const role of [`${org.uid}/0123456789abcdef`, "d".repeat(40), teamRole, otherRole]) {
      const err = assertRestError(await call("POST", `${PATH}/${org.uid}`, provider({ defaultRole: role })), 404, 5, "NOT_FOUND");
      assert.equal(err.message, `Not found: role ${role} does not exist`);
    }
    // A role defined at or above the provider's group applies.
    assert.equal((await createProvider(team.uid, provider({ defaultRole: orgRole }))).defaultRole, orgRole);
  });

  test("a missing group is NOT_FOUND; a malformed parent INVALID_ARGUMENT on parent", async () => {
    assertRestError(await call("POST", `${PATH}/${"e".repeat(40)}`, provider()), 404, 5, "NOT_FOUND");
    assertViolations(await call("POST", `${PATH}/nope`, provider()), ["parent"]);
  });

  test("get of a missing provider is NOT_FOUND; of a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `${PATH}/${org.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${PATH}/nope`), ["uid"]);
  });
});

describe("authorization and escalation", () => {
  let org: { uid: string };
  let manager: { uid: string; token: string };
  let lister: string;
  before(async () => {
    org = await createGroup(srv.url, null, "idp authz org");
    const managerRole = await customRole(srv, org.uid, "idp manager", [
      "CAP_IAM_IDENTITY_PROVIDERS_CREATE",
      "CAP_IAM_IDENTITY_PROVIDERS_UPDATE",
      "CAP_IAM_IDENTITY_PROVIDERS_LIST",
      "CAP_IAM_ROLE_BINDINGS_CREATE",
      "CAP_IAM_GROUPS_LIST",
    ]);
    lister = await customRole(srv, org.uid, "group lister", ["CAP_IAM_GROUPS_LIST"]);
    manager = await createCaller(srv, org.uid, "idp manager", managerRole);
  });

  test("a caller may promise only capabilities it holds: owner or viewer as default role is PERMISSION_DENIED", async () => {
    for (const role of [owner, viewer]) {
      const err = assertRestError(
        await call("POST", `${PATH}/${org.uid}`, provider({ defaultRole: role }), as(manager)),
        403,
        7,
        "PERMISSION_DENIED",
      );
      assert.match(err.message, /cannot grant/);
    }
    const p = await createProvider(org.uid, provider({ defaultRole: lister }), as(manager));
    assert.equal(p.defaultRole, lister);
    assertRestError(await call("PATCH", `${PATH}/${p.uid}`, { defaultRole: owner }, as(manager)), 403, 7, "PERMISSION_DENIED");
    assert.equal((await ok(call("GET", `${PATH}/${p.uid}`))).defaultRole, lister);
    // Restating the current default role grants nothing new.
    assert.equal((await ok(call("PATCH", `${PATH}/${p.uid}`, { defaultRole: lister, description: "x" }, as(manager)))).description, "x");
  });

  test("re-pointing a provider's issuer or client needs the power to grant its default role", async () => {
    const p = await createProvider(org.uid, provider({ defaultRole: owner }));
    for (const body of [{ oidc: oidc({ issuer: "https://evil.example" }) }, { oidc: oidc({ clientId: "other-client" }) }]) {
      assertRestError(await call("PATCH", `${PATH}/${p.uid}`, body, as(manager)), 403, 7, "PERMISSION_DENIED");
    }
    const after = await ok(call("GET", `${PATH}/${p.uid}`));
    assert.equal(after.oidc.issuer, p.oidc.issuer);
    assert.equal(after.oidc.clientId, p.oidc.clientId);
    // Fields that do not change who signs in stay editable.
    assert.equal((await ok(call("PATCH", `${PATH}/${p.uid}`, { description: "still mine" }, as(manager)))).description, "still mine");
  });

  test("a viewer can read but not create, update or delete; a caller in another org reaches nothing", async () => {
    const p = await createProvider(org.uid);
    const reader = await createCaller(srv, org.uid, "idp reader", viewer);
    assert.equal((await ok(call("GET", `${PATH}/${p.uid}`, undefined, as(reader)))).uid, p.uid);
    assertRestError(await call("POST", `${PATH}/${org.uid}`, provider(), as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("PATCH", `${PATH}/${p.uid}`, { description: "x" }, as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await call("DELETE", `${PATH}/${p.uid}`, undefined, as(reader)), 403, 7, "PERMISSION_DENIED");
    // Same answer for another org's provider and a missing one.
    await assertSameDenial(srv, await createStranger(srv, "idp"), `${PATH}/${p.uid}`, `${PATH}/${org.uid}/0123456789abcdef`);
  });
});

describe("update", () => {
  const org = groupForSuite(srv, "idp update org");

  test("without a mask exactly the body's fields change; updateTime moves, createTime stays", async () => {
    const p = await createProvider(org.uid, provider({ description: "old" }));
    clock += 1000;
    const res = await ok(call("PATCH", `${PATH}/${p.uid}`, { description: "new" }));
    assert.deepEqual(res, { ...p, description: "new", updateTime: iso(clock) });
  });

  test("updateMask names the only fields that change", async () => {
    const p = await createProvider(org.uid);
    const res = await ok(
      call("PATCH", `${PATH}/${p.uid}?updateMask=description`, {
        name: "ignored name",
        description: "b",
        oidc: oidc({ clientId: "other" }),
      }),
    );
    assert.equal(res.name, p.name);
    assert.equal(res.description, "b");
    assert.deepEqual(res.oidc, p.oidc);
    const scoped = await ok(
      call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.client_id`, { oidc: { clientId: "new-client", issuer: "https://ignored.example" } }),
    );
    assert.deepEqual(scoped.oidc, { ...p.oidc, clientId: "new-client" });
  });

  for (const path of ["uid", "create_time", "updateTime", "scim", "bogus", "oidc.bogus", "oidc.issuer.x"]) {
    test(`mask path ${path} is INVALID_ARGUMENT on update_mask and changes nothing`, async () => {
      const p = await createProvider(org.uid);
      assertViolations(await call("PATCH", `${PATH}/${p.uid}?updateMask=${path}`, { description: "x" }), ["update_mask"]);
      assert.deepEqual(await ok(call("GET", `${PATH}/${p.uid}`)), p);
    });
  }

  test("the secret: an oidc body without it keeps it; the mask path oidc.client_secret clears it", async () => {
    const p = await createProvider(org.uid, provider({ oidc: oidc({ pkceEnabled: false }) }));
    // Without PKCE the provider is valid only while a secret is stored.
    const kept = await ok(call("PATCH", `${PATH}/${p.uid}`, { oidc: { issuer: "https://login2.acme.example", clientId: "c2" } }));
    assert.deepEqual(kept.oidc, { ...p.oidc, issuer: "https://login2.acme.example", clientId: "c2" });
    const replaced = await ok(
      call("PATCH", `${PATH}/${p.uid}?updateMask=*`, {
        name: "replaced",
        defaultRole: viewer,
        oidc: { issuer: "https://login3.acme.example", clientId: "c3" },
      }),
    );
    assert.deepEqual([replaced.name, replaced.oidc.clientId, replaced.oidc.pkceEnabled], ["replaced", "c3", false]);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.client_secret`, { oidc: { clientSecret: "" } }), [
      "oidc.client_secret",
    ]);
    // Cleared together with PKCE switched on, then PKCE off again fails: nothing is stored any more.
    const cleared = await ok(
      call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.client_secret,oidc.pkce_enabled`, { oidc: { pkceEnabled: true } }),
    );
    assert.equal(cleared.oidc.pkceEnabled, true);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.pkce_enabled`, { oidc: { pkceEnabled: false } }), [
      "oidc.client_secret",
    ]);
    // A new secret through the mask path works, and is not shown either.
    const reset = await ok(
      call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.client_secret,oidc.pkce_enabled`, { oidc: { clientSecret: `${SECRET}-2` } }),
    );
    assert.equal(reset.oidc.clientSecret, "");
    assert.equal(reset.oidc.pkceEnabled, false);
  });

  test("the correlation rule is immutable: restating is a no-op, another value INVALID_ARGUMENT", async () => {
    const p = await createProvider(org.uid, provider({ oidc: oidc({ correlationRule: "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID" }) }));
    const restated = await ok(
      call("PATCH", `${PATH}/${p.uid}`, { oidc: oidc({ correlationRule: "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID", clientId: "c2" }) }),
    );
    assert.equal(restated.oidc.correlationRule, "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID");
    assert.equal(restated.oidc.clientId, "c2");
    const unstated = await ok(call("PATCH", `${PATH}/${p.uid}`, { oidc: oidc() }));
    assert.equal(unstated.oidc.correlationRule, "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID");
    assertViolations(
      await call("PATCH", `${PATH}/${p.uid}`, { oidc: oidc({ correlationRule: "CORRELATION_RULE_SUB_EQUALS_EXTERNAL_ID" }) }),
      ["oidc.correlation_rule"],
    );
    assertViolations(await call("PATCH", `${PATH}/${p.uid}?updateMask=oidc.correlation_rule`, { oidc: {} }), ["oidc.correlation_rule"]);
    assert.equal((await ok(call("GET", `${PATH}/${p.uid}`))).oidc.correlationRule, "CORRELATION_RULE_OID_EQUALS_EXTERNAL_ID");
    // UNSPECIFIED means SUB_EQUALS_EXTERNAL_ID: restating either keeps what was stored.
    const q = await createProvider(org.uid);
    assert.equal(q.oidc.correlationRule, "CORRELATION_RULE_UNSPECIFIED");
    const same = await ok(
      call("PATCH", `${PATH}/${q.uid}?updateMask=oidc.correlation_rule`, {
        oidc: { correlationRule: "CORRELATION_RULE_SUB_EQUALS_EXTERNAL_ID" },
      }),
    );
    assert.equal(same.oidc.correlationRule, "CORRELATION_RULE_UNSPECIFIED");
  });

  test("a new oidc is validated whole; a failed update changes nothing", async () => {
    const p = await createProvider(org.uid);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}`, { oidc: { issuer: "http://evil.example", clientId: "" } }), [
      "oidc.issuer",
      "oidc.client_id",
    ]);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}?updateMask=oidc`, { name: "x y z" }), ["oidc.issuer", "oidc.client_id"]);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}`, { name: "NO" }), ["name"]);
    assertViolations(await call("PATCH", `${PATH}/${p.uid}`, { defaultRole: "nope" }), ["default_role"]);
    assertRestError(await call("PATCH", `${PATH}/${p.uid}`, { defaultRole: "d".repeat(40) }), 404, 5, "NOT_FOUND");
    assert.deepEqual(await ok(call("GET", `${PATH}/${p.uid}`)), p);
  });

  test("a missing provider is NOT_FOUND", async () => {
    assertRestError(await call("PATCH", `${PATH}/${org.uid}/0123456789abcdef`, { description: "x" }), 404, 5, "NOT_FOUND");
  });
});

describe("delete", () => {
  test("delete returns {}, then the provider is gone; a second delete is NOT_FOUND", async () => {
    const org = await createGroup(srv.url, null, "idp delete org");
    const p = await createProvider(org.uid);
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${org.uid}`), "RESOURCE_NOT_EMPTY", /identity providers/);
    await assertDeletedOnce(srv, `${PATH}/${p.uid}`);
    assert.deepEqual(await ok(call("DELETE", `/iam/v2beta1/groups/${org.uid}`)), {});
  });
});

describeListContract({
  resource: "identity providers",
  srv,
  path: PATH,
  seed: {
    create: (parent, name) => createProvider(parent, provider({ name })),
    advance: (ms) => (clock += ms),
  },
  unsortable: ["issuer"],
  lister: "viewer",
  check: (item) => seen.push(JSON.stringify(item)),
});

describeOverGrpc(
  srv,
  IdentityProvidersService,
  "create, get, list, update, delete; the secret is never in a response",
  async (client, org) => {
    const oidcValue = { issuer: "https://login.acme.example", clientId: CLIENT_ID, clientSecret: SECRET };
    const created: IdentityProvider = await client.call("createIdentityProvider", {
      parent: org,
      identityProvider: { name: "grpc sso", defaultRole: viewer, configuration: { case: "oidc", value: oidcValue } },
    });
    assert.ok(created.uid.startsWith(`${org}/`));
    const responses: IdentityProvider[] = [created];
    responses.push(await client.call("getIdentityProvider", { uid: created.uid }));
    const listed = await client.call("listIdentityProviders", { uidp: { descendantsOf: org } });
    assert.deepEqual(
      listed.identityProviders.map((p: IdentityProvider) => p.uid),
      [created.uid],
    );
    assert.equal(listed.totalCount, 1n);
    responses.push(...listed.identityProviders);
    const updated: IdentityProvider = await client.call("updateIdentityProvider", {
      identityProvider: {
        uid: created.uid,
        description: "via grpc",
        configuration: { case: "oidc", value: { ...oidcValue, clientSecret: "", clientId: "c9" } },
      },
    });
    assert.equal(updated.description, "via grpc");
    assert.equal(updated.configuration.case === "oidc" && updated.configuration.value.clientId, "c9");
    responses.push(updated);
    for (const r of responses) {
      assert.equal(r.configuration.case, "oidc");
      assert.equal(r.configuration.value?.clientSecret, "");
      seen.push(JSON.stringify(r, (_k, v) => (typeof v === "bigint" ? v.toString() : v)));
    }
    const bad = await grpcError(
      client.call("createIdentityProvider", { parent: org, identityProvider: { name: "grpc sso", defaultRole: viewer } }),
    );
    assert.equal(bad.code, 3);
    assert.deepEqual(grpcViolations(bad), ["oidc"]);
    await client.call("deleteIdentityProvider", { uid: created.uid });
    assert.equal((await grpcError(client.call("getIdentityProvider", { uid: created.uid }))).code, 5);
  },
);

describe("sign-in through an organization's identity provider", () => {
  let org: { uid: string };
  let idp: { uid: string };
  let orgRole: string;
  before(async () => {
    // ID tokens carry the real time: bring the server clock up to it.
    clock = Math.max(clock, Date.now());
    org = await createGroup(srv.url, null, "idp sign-in org");
    orgRole = await customRole(srv, org.uid, "sso newcomer", ["CAP_IAM_GROUPS_LIST", "CAP_REPO_LIST"]);
    idp = await createProvider(org.uid, provider({ defaultRole: viewer, oidc: oidc({ issuer: A.url }) }));
  });

  const exchange = (idToken: string, providerUid: string, extra = "") =>
    call("GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}&identity_provider=${providerUid}${extra}`, undefined, {
      authorization: `Bearer ${idToken}`,
    });
  const personUid = (sub: string, p = idp) =>
    providerUserUid({ uid: p.uid, parentUid: org.uid, oidc: { issuer: A.url, clientId: CLIENT_ID } }, sub);
  const bindingsOf = async (uid: string) =>
    (await ok(call("GET", `/iam/v2beta1/roleBindings?identity=${uid}`))).roleBindings as {
      group: { uid: string };
      role: { uid: string };
    }[];

  test("first sign-in registers the person in the org with the default role; the second adds nothing", async () => {
    const idToken = () => A.idToken({ sub: "alice-123", aud: CLIENT_ID, email: "Alice@Acme.example", email_verified: true });
    const first = await ok(exchange(idToken(), idp.uid));
    const uid = personUid("alice-123");
    const whoami = await ok(call("GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${first.token}` }));
    assert.equal(whoami.subject, uid);
    assert.equal(whoami.email, "Alice@Acme.example");
    assert.deepEqual(
      whoami.capabilities.map((c: { group: { id: string }; role: { id: string; name: string } }) => [c.group.id, c.role.id, c.role.name]),
      [[org.uid, viewer, "viewer"]],
    );
    const person = await ok(call("GET", `/iam/v2beta1/identities/${uid}`));
    assert.equal(person.name, "alice");
    assert.deepEqual(person.claimMatch, { issuer: A.url, subject: "alice-123", claims: {}, claimPatterns: {} });
    assert.equal(person.lastSeenTime, iso(clock));
    const bindings = await bindingsOf(uid);
    assert.deepEqual(
      bindings.map((b) => [b.group.uid, b.role.uid]),
      [[org.uid, viewer]],
    );

    // The default role changes: the existing person keeps theirs, a newcomer gets the new one.
    await ok(call("PATCH", `${PATH}/${idp.uid}`, { defaultRole: orgRole }));
    clock += 5000;
    const second = await ok(exchange(idToken(), idp.uid));
    assert.equal((await ok(call("GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${second.token}` }))).subject, uid);
    assert.deepEqual(await bindingsOf(uid), bindings);
    const again = await ok(call("GET", `/iam/v2beta1/identities/${uid}`));
    assert.deepEqual(again, { ...person, lastSeenTime: iso(clock) });
    await ok(exchange(A.idToken({ sub: "bob-456", aud: [CLIENT_ID, "other"] }), idp.uid));
    assert.deepEqual(
      (await bindingsOf(personUid("bob-456"))).map((b) => [b.group.uid, b.role.uid]),
      [[org.uid, orgRole]],
    );
    assert.equal((await ok(call("GET", `/iam/v2beta1/identities/${personUid("bob-456")}`))).email, "");
  });

  test("over gRPC the exchange works the same", async () => {
    const client = grpcClient(SecurityTokenService, srv.port, { token: A.idToken({ sub: "carol", aud: CLIENT_ID }) });
    try {
      const res = await client.call("exchange", { aud: [BASE], identityProvider: idp.uid });
      const whoami = await ok(call("GET", "/auth/v1/ok", undefined, { authorization: `Bearer ${res.token}` }));
      assert.equal(whoami.subject, personUid("carol"));
    } finally {
      client.close();
    }
  });

  test("a wrong audience, another issuer, a bad signature and a missing provider get the same PERMISSION_DENIED", async () => {
    const missing = `${org.uid}/0123456789abcdef`;
    const refusals = [
      await exchange(A.idToken({ sub: "mallory", aud: "some-other-client" }), idp.uid),
      await exchange(A.idToken({ sub: "mallory" }), idp.uid),
      await exchange(B.idToken({ sub: "mallory", aud: CLIENT_ID }), idp.uid),
      await exchange(B.idToken({ sub: "mallory", aud: CLIENT_ID, iss: A.url }), idp.uid),
      await exchange("not-a-jwt", idp.uid),
    ];
    const wanted = assertRestError(await exchange(A.idToken({ sub: "mallory", aud: CLIENT_ID }), missing), 403, 7, "PERMISSION_DENIED");
    for (const res of refusals) {
      const body = assertRestError(res, 403, 7, "PERMISSION_DENIED");
      assert.equal(JSON.stringify(body).replaceAll(idp.uid, missing), JSON.stringify(wanted));
      assert.equal(res.body.token, undefined);
    }
    const registered = await ok(call("GET", `/iam/v2beta1/identities?uidp.children_of=${org.uid}&name=mallory`));
    assert.equal(registered.totalCount, "0");
  });

  test("a malformed provider uid, or one combined with identity, is INVALID_ARGUMENT", async () => {
    const token = A.idToken({ sub: "alice-123", aud: CLIENT_ID });
    assertViolations(await exchange(token, "nope"), ["identity_provider"]);
    assertViolations(await exchange(token, idp.uid, `&identity=${personUid("alice-123")}`), ["identity_provider"]);
  });
});

test("no response of this file carried the client secret", () => {
  assert.ok(seen.length > 100, `scanned ${seen.length} bodies`);
  const leaks = seen.filter((body) => body.includes(SECRET));
  assert.equal(leaks.length, 0, leaks[0]);
});
