/**
 * Issue 11, items 4 to 6 and the low findings, each reproduced as the
 * attacker ran it against the real server: email-bound invites redeemed
 * through an org's own identity provider; a provider's client retargeted to
 * take over its people; the membership and email oracle of bindings to
 * predicted person uids; tag re-pointing without CAP_TAG_UPDATE; a deleted
 * identity's token; a token re-spelt in non-canonical base64url.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { ServiceError } from "@grpc/grpc-js";
import { GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { assertRestError } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { OidcIssuer } from "../support/oidc-issuer.js";
import { as, builtinRole, createCaller, customRole, ok, type Caller } from "../support/principals.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "../support/server.js";

const BASE = "http://api.test";
const AUTH = "http://issuer.test";
const INVITES = "/iam/v2beta1/groupInvites";
const PROVIDERS = "/iam/v2beta1/identityProviders";
const BINDINGS = "/iam/v2beta1/roleBindings";

let srv: TestServer;
/** The issuer the operator trusts for sign-in (PLATFORM_USER_ISSUERS). */
let people: OidcIssuer;
/** An issuer the attacker controls: any sub, any email. */
let evil: OidcIssuer;
let viewer: string;
let owner: string;

before(async () => {
  [people, evil] = await Promise.all([OidcIssuer.start("people"), OidcIssuer.start("evil")]);
  srv = await startTestServer({ env: { PLATFORM_BASE_URL: BASE, PLATFORM_AUTH_URL: AUTH, PLATFORM_USER_ISSUERS: people.url } });
  viewer = await builtinRole(srv, "viewer");
  owner = await builtinRole(srv, "owner");
});
after(async () => {
  await srv.close();
  await Promise.all([people.close(), evil.close()]);
});

const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => rest(srv.url, method, path, body, headers);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Exchanges an upstream ID token (optionally through a provider) for an API token; returns the caller it makes. */
async function exchange(idToken: string, providerUid?: string): Promise<RestResult> {
  const through = providerUid ? `&identity_provider=${providerUid}` : "";
  return call("GET", `/sts/exchange?aud=${encodeURIComponent(BASE)}${through}`, undefined, bearer(idToken));
}
async function signIn(idToken: string, providerUid?: string): Promise<Caller> {
  const { token } = await ok(exchange(idToken, providerUid));
  const whoami = await ok(call("GET", "/auth/v1/ok", undefined, bearer(token)));
  return { uid: whoami.subject, token };
}
const register = (caller: Caller, code: string) => call("POST", "/auth/v1/register", { code }, as(caller));
const bindingsIn = async (group: string) =>
  ((await ok(call("GET", `${BINDINGS}?uidp.descendants_of=${group}`))).roleBindings as { identityUid: string; roleUid: string }[]).map(
    (b) => [b.identityUid, b.roleUid],
  );
const createProvider = async (
  group: string,
  issuer: OidcIssuer,
  clientId: string,
  defaultRole = viewer,
  headers?: Record<string, string>,
) =>
  ok(
    call(
      "POST",
      `${PROVIDERS}/${group}`,
      { name: `sso ${clientId}`, defaultRole, oidc: { issuer: issuer.url, clientId, clientSecret: "s3cret" } },
      headers,
    ),
  );

describe("item 4: an email-bound invite trusts an email only from the operator's issuers or the invite side's own provider", () => {
  const VICTIM_EMAIL = "victim@corp.example";
  let victimOrg: { uid: string };
  let folder: { uid: string };
  let inviteCode: string;
  let folderInviteCode: string;

  before(async () => {
    victimOrg = await createGroup(srv.url, null, "email victim org");
    folder = await createGroup(srv.url, victimOrg.uid, "email victim folder");
    inviteCode = (await ok(call("POST", `${INVITES}/${victimOrg.uid}`, { roleUid: owner, ttl: "86400s", email: VICTIM_EMAIL }))).code;
    folderInviteCode = (await ok(call("POST", `${INVITES}/${folder.uid}`, { roleUid: viewer, ttl: "86400s", email: VICTIM_EMAIL }))).code;
  });

  test("the attack: an org's own provider vouching for the victim's email is refused with the uniform refusal", async () => {
    const attackerOrg = await createGroup(srv.url, null, "email attacker org");
    const idp = await createProvider(attackerOrg.uid, evil, "evil-app");
    const impostor = await signIn(evil.idToken({ sub: "impostor", aud: "evil-app", email: VICTIM_EMAIL, email_verified: true }), idp.uid);
    assert.equal((await ok(call("GET", `/iam/v2beta1/identities/${impostor.uid}`))).email, VICTIM_EMAIL, "the provider did vouch for it");
    for (const code of [inviteCode, folderInviteCode]) {
      const res = await register(impostor, code);
      assertRestError(res, 403, 7, "INVITE_INVALID");
    }
    assert.deepEqual(await bindingsIn(victimOrg.uid), []);
  });

  test("the invite's group's provider (or an ancestor's) vouches inside its own tree", async () => {
    const idp = await createProvider(victimOrg.uid, evil, "corp-app");
    const member = await signIn(evil.idToken({ sub: "corp-victim", aud: "corp-app", email: VICTIM_EMAIL, email_verified: true }), idp.uid);
    // Registered in the org by its provider: it holds the default role there already.
    assert.equal((await register(member, folderInviteCode)).status, 200);
    assert.deepEqual(await bindingsIn(folder.uid), [[member.uid, viewer]]);
  });

  test("a person the operator's issuer vouches for redeems it", async () => {
    const person = await signIn(people.idToken({ sub: "the-real-victim", aud: AUTH, email: VICTIM_EMAIL, email_verified: true }));
    const res = await register(person, inviteCode);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.ok((await bindingsIn(victimOrg.uid)).some(([uid, role]) => uid === person.uid && role === owner));
  });
});

describe("item 5: re-pointing a provider's client makes new people, never the ones signed in before", () => {
  test("the takeover: a folder owner re-points the folder's provider at their own app and signs in with the victim's subject", async () => {
    const org = await createGroup(srv.url, null, "takeover org");
    const folder = await createGroup(srv.url, org.uid, "takeover folder");
    const idp = await createProvider(folder.uid, evil, "folder-app");
    const victim = await signIn(evil.idToken({ sub: "victim-sub", aud: "folder-app" }), idp.uid);
    // The org's administrator makes the victim an owner of the whole org.
    await ok(call("POST", `${BINDINGS}/${org.uid}`, { identityUid: victim.uid, roleUid: owner }));

    const folderOwner = await createCaller(srv, folder.uid, "folder owner", owner);
    // Allowed: the folder owner may grant the provider's default role (viewer) in the folder.
    await ok(
      call(
        "PATCH",
        `${PROVIDERS}/${idp.uid}`,
        { oidc: { issuer: evil.url, clientId: "attacker-app", clientSecret: "x" } },
        as(folderOwner),
      ),
    );
    const attacker = await signIn(evil.idToken({ sub: "victim-sub", aud: "attacker-app" }), idp.uid);
    assert.notEqual(attacker.uid, victim.uid, "a new person, not the victim");
    const whoami = await ok(call("GET", "/auth/v1/ok", undefined, as(attacker)));
    assert.deepEqual(
      whoami.capabilities.map((c: { group: { id: string }; role: { id: string } }) => [c.group.id, c.role.id]),
      [[folder.uid, viewer]],
      "only the provider's default role, in the folder",
    );
    assertRestError(await call("POST", `/iam/v2beta1/groups/${org.uid}`, { name: "planted" }, as(attacker)), 403, 7, "PERMISSION_DENIED");

    // Pointed back, the provider signs the victim in as themselves again.
    await ok(call("PATCH", `${PROVIDERS}/${idp.uid}`, { oidc: { issuer: evil.url, clientId: "folder-app", clientSecret: "x" } }));
    assert.equal((await signIn(evil.idToken({ sub: "victim-sub", aud: "folder-app" }), idp.uid)).uid, victim.uid);
  });
});

describe("item 6: binding a predicted person uid is no membership or email oracle", () => {
  let org: { uid: string };
  let orgOwner: Caller;
  let signedUp: Caller;
  before(async () => {
    org = await createGroup(srv.url, null, "oracle org");
    orgOwner = await createCaller(srv, org.uid, "oracle owner", owner);
    signedUp = await signIn(
      people.idToken({ sub: "oracle-signed-up", aud: AUTH, email: "known@corp.example", email_verified: true, name: "Known Person" }),
    );
  });

  const lookup = async (subject: string) =>
    (
      await ok(
        call(
          "GET",
          `/iam/v2beta1/identities:lookupIdentity?issuer=${encodeURIComponent(people.url)}&subject=${subject}`,
          undefined,
          as(orgOwner),
        ),
      )
    ).uid as string;
  /** A binding response with its own uids and time blanked, for comparing two. */
  const shape = (body: Record<string, unknown>, identityUid: string) =>
    JSON.parse(
      JSON.stringify(body)
        .replaceAll(identityUid, "<person>")
        .replace(/"uid":"[0-9a-f]{40}\/[0-9a-f]{16}"/, '"uid":"<binding>"')
        .replace(/"createTime":"[^"]+"/, '"createTime":"<t>"'),
    );

  test("bindings to a signed-up and a never-seen person look the same, and show neither email nor name", async () => {
    const known = await lookup("oracle-signed-up");
    assert.equal(known, signedUp.uid);
    const unknown = await lookup("oracle-never-seen");
    const a = await call("POST", `${BINDINGS}/${org.uid}`, { identityUid: known, roleUid: viewer }, as(orgOwner));
    const b = await call("POST", `${BINDINGS}/${org.uid}`, { identityUid: unknown, roleUid: viewer }, as(orgOwner));
    assert.equal(a.status, 200, JSON.stringify(a.body));
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assert.deepEqual(shape(a.body, known), shape(b.body, unknown));
    assert.ok(!a.body.identity.email && !a.body.identity.name, JSON.stringify(a.body.identity));
    assert.doesNotMatch(JSON.stringify(a.body), /known@corp\.example|known person/i);
    // Read back by the org's owner: still no personal fields; the administrator, who may read the person, sees them.
    const listed = await ok(call("GET", `${BINDINGS}?identity=${known}`, undefined, as(orgOwner)));
    assert.doesNotMatch(JSON.stringify(listed), /known@corp\.example/);
    const got = await ok(call("GET", `${BINDINGS}/${a.body.uid}`, undefined, as(orgOwner)));
    assert.doesNotMatch(JSON.stringify(got), /known@corp\.example/);
    assert.equal((await ok(call("GET", `${BINDINGS}/${a.body.uid}`))).identity.email, "known@corp.example");
  });

  test("a person bound before sign-up holds the binding from their first sign-in (the contract's bindings-before-sign-up)", async () => {
    const uid = await lookup("oracle-late-comer");
    await ok(call("POST", `${BINDINGS}/${org.uid}`, { identityUid: uid, roleUid: viewer }, as(orgOwner)));
    const person = await signIn(people.idToken({ sub: "oracle-late-comer", aud: AUTH }));
    assert.equal(person.uid, uid);
    const whoami = await ok(call("GET", "/auth/v1/ok", undefined, as(person)));
    assert.deepEqual(
      whoami.capabilities.map((c: { group: { id: string } }) => c.group.id),
      [org.uid],
    );
    assert.equal((await ok(call("GET", `/iam/v2beta1/groups/${org.uid}`, undefined, as(person)))).uid, org.uid);
  });

  test("a group's identity in another org stays NOT_FOUND, the same as a missing one", async () => {
    const other = await createGroup(srv.url, null, "oracle other org");
    const stranger = await createCaller(srv, other.uid, "oracle stranger", null);
    const missing = `${other.uid}/0123456789abcdef`;
    const a = assertRestError(
      await call("POST", `${BINDINGS}/${org.uid}`, { identityUid: stranger.uid, roleUid: viewer }, as(orgOwner)),
      404,
      5,
      "NOT_FOUND",
    );
    const b = assertRestError(
      await call("POST", `${BINDINGS}/${org.uid}`, { identityUid: missing, roleUid: viewer }, as(orgOwner)),
      404,
      5,
      "NOT_FOUND",
    );
    assert.equal(JSON.stringify(a).replaceAll(stranger.uid, "<x>"), JSON.stringify(b).replaceAll(missing, "<x>"));
  });
});

describe("a deleted identity's API token stops working at once, on every protocol", () => {
  test("REST, Connect and gRPC answer UNAUTHENTICATED; the administrator's token is unaffected", async () => {
    const org = await createGroup(srv.url, null, "deleted token org");
    const doomed = await createCaller(srv, org.uid, "doomed", viewer);
    assert.equal((await call("GET", `/iam/v2beta1/groups/${org.uid}`, undefined, as(doomed))).status, 200);
    await ok(call("DELETE", `/iam/v2beta1/identities/${doomed.uid}`));

    const viaRest = assertRestError(await call("GET", `/iam/v2beta1/groups/${org.uid}`, undefined, as(doomed)), 401, 16, "UNAUTHENTICATED");
    assert.match(viaRest.message, /no longer exists/);
    const viaConnect = await fetch(`${srv.url}/${GroupsService.typeName}/GetGroup`, {
      method: "POST",
      headers: { "content-type": "application/json", ...as(doomed) },
      body: JSON.stringify({ uid: org.uid }),
    });
    assert.equal(viaConnect.status, 401);
    assert.equal(((await viaConnect.json()) as { code: string }).code, "unauthenticated");
    const client = grpcClient(GroupsService, srv.port, { token: doomed.token });
    try {
      const err = await client.call("getGroup", { uid: org.uid }).then(
        () => assert.fail("expected UNAUTHENTICATED"),
        (e: ServiceError) => e,
      );
      assert.equal(err.code, 16);
    } finally {
      client.close();
    }
    assert.equal((await call("GET", `/iam/v2beta1/groups/${org.uid}`)).status, 200);
  });
});

describe("API tokens are one exact spelling", () => {
  /** Every other spelling of a base64url part that decodes to the same bytes (only its last character can vary). */
  function respellings(part: string): string[] {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const bytes = Buffer.from(part, "base64url");
    return [...alphabet].map((c) => part.slice(0, -1) + c).filter((p) => p !== part && Buffer.from(p, "base64url").equals(bytes));
  }

  test("a token with a non-canonical last character in any part is UNAUTHENTICATED, the original keeps working", async () => {
    const org = await createGroup(srv.url, null, "spelling org");
    const caller = await createCaller(srv, org.uid, "speller", viewer);
    const parts = caller.token.split(".");
    let tried = 0;
    for (let i = 0; i < 3; i++) {
      for (const respelt of respellings(parts[i]!)) {
        const token = parts.map((p, j) => (j === i ? respelt : p)).join(".");
        assertRestError(await call("GET", `/iam/v2beta1/groups/${org.uid}`, undefined, bearer(token)), 401, 16, "UNAUTHENTICATED");
        tried++;
      }
    }
    // An ES256 signature is 64 bytes: its last character carries 4 unused bits, so 15 re-spellings exist.
    assert.ok(tried >= 15, `${tried} re-spellings tried`);
    assert.equal((await call("GET", `/iam/v2beta1/groups/${org.uid}`, undefined, as(caller))).status, 200);
  });
});

describe("CreateTag re-pointing an existing tag needs CAP_TAG_UPDATE", () => {
  test("a role with CAP_TAG_CREATE alone creates tags but cannot move one; with CAP_TAG_UPDATE it can", async () => {
    const org = await createGroup(srv.url, null, "tag update org");
    const repo = await ok(call("POST", `/registry/v2beta1/repos/${org.uid}`, { name: "app" }));
    const digest = (c: string) => `sha256:${c.repeat(64)}`;
    await ok(call("POST", `/registry/v2beta1/tags/${repo.uid}`, { name: "latest", digest: digest("a") }));

    /** A caller of org with a custom role of these capabilities; a tag of repo put by one. */
    const callerWith = async (name: string, capabilities: string[]) =>
      createCaller(srv, org.uid, name, await customRole(srv, org.uid, name, capabilities));
    const putTag = (who: Caller, name: string, c: string) =>
      call("POST", `/registry/v2beta1/tags/${repo.uid}`, { name, digest: digest(c) }, as(who));

    const creator = await callerWith("tag creator", ["CAP_TAG_CREATE", "CAP_TAG_LIST"]);
    assert.equal((await ok(putTag(creator, "v1", "b"))).digest, digest("b"));
    for (const name of ["latest", "v1"]) assertRestError(await putTag(creator, name, "c"), 403, 7, "PERMISSION_DENIED");
    const tags = await ok(call("GET", `/registry/v2beta1/tags?uidp.children_of=${repo.uid}&order_by=name`));
    assert.deepEqual(
      tags.tags.map((t: { name: string; digest: string }) => [t.name, t.digest]),
      [
        ["latest", digest("a")],
        ["v1", digest("b")],
      ],
    );

    const updater = await callerWith("tag updater", ["CAP_TAG_CREATE", "CAP_TAG_UPDATE"]);
    assert.equal((await ok(putTag(updater, "latest", "c"))).digest, digest("c"));
  });
});
