/**
 * A create without a name says the field is required (issue 24), on every
 * resource that has a name rule, instead of quoting the rule an empty string
 * breaks; a name that is present but breaks the rule still gets the rule.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { assertRestError, fieldViolations } from "./support/assertions.js";
import { createGroup, rest, startTestServer, type TestServer } from "./support/server.js";

let srv: TestServer;
let org: { uid: string };
before(async () => {
  srv = await startTestServer();
  org = await createGroup(srv.url, null, "names required org");
});
after(async () => {
  await srv.close();
});

const CREATES: [string, (org: string) => string, Record<string, unknown>][] = [
  ["group", () => "/iam/v2beta1/groups", {}],
  ["folder", (o) => `/iam/v2beta1/groups/${o}`, { description: "x" }],
  ["identity", (o) => `/iam/v2beta1/identities/${o}`, { staticKeys: { issuer: "https://ci.example", subject: "robot" } }],
  ["role", (o) => `/iam/v2beta1/roles/${o}`, { capabilities: ["CAP_IAM_GROUPS_LIST"] }],
  ["repo", (o) => `/registry/v2beta1/repos/${o}`, {}],
];

for (const [kind, path, body] of CREATES) {
  test(`a ${kind} created without a name: INVALID_ARGUMENT, name "is required"`, async () => {
    const err = assertRestError(await rest(srv.url, "POST", path(org.uid), body), 400, 3, "INVALID_ARGUMENT");
    assert.ok(
      fieldViolations(err).some((v) => v.field === "name" && v.description === "is required"),
      JSON.stringify(fieldViolations(err)),
    );
    assert.ok(!fieldViolations(err).some((v) => v.field === "name" && v.description !== "is required"), "one violation on name");
  });
}

test("a name that is there but breaks the rule still gets the rule", async () => {
  const err = assertRestError(await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "Bad Name" }), 400, 3, "INVALID_ARGUMENT");
  assert.deepEqual(fieldViolations(err), [{ field: "name", description: "must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long" }]);
});
