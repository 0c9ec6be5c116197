/**
 * A create without a name says the field is required (issue 24) and, as the
 * spec asks, states the rule a name must follow (issue 31: the pattern had
 * gone), on every resource that has a name rule; a name that is present but
 * breaks the rule gets the rule.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
let org: { uid: string };
before(async () => {
  srv = await startTestServer();
  org = await createGroup(srv.url, null, "names required org");
});
after(async () => {
  await srv.close();
});

const NAME_RULE = "is required: must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long";

const CREATES: [string, (org: string) => string, Record<string, unknown>, string][] = [
  ["group", () => "/iam/v2beta1/groups", {}, NAME_RULE],
  ["folder", (o) => `/iam/v2beta1/groups/${o}`, { description: "x" }, NAME_RULE],
  ["identity", (o) => `/iam/v2beta1/identities/${o}`, { staticKeys: { issuer: "https://ci.example", subject: "robot" } }, NAME_RULE],
  [
    "role",
    (o) => `/iam/v2beta1/roles/${o}`,
    { capabilities: ["CAP_IAM_GROUPS_LIST"] },
    "is required: must be 1 to 63 characters of printable text",
  ],
  [
    "repo",
    (o) => `/registry/v2beta1/repos/${o}`,
    {},
    "is required: must be 1 to 256 characters matching ^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$ (an OCI repository path)",
  ],
];

for (const [kind, path, body, description] of CREATES) {
  test(`a ${kind} created without a name: INVALID_ARGUMENT, name is required, with the rule`, async () => {
    const err = assertRestError(await rest(srv.url, "POST", path(org.uid), body), 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(
      fieldViolations(err).filter((v) => v.field === "name"),
      [{ field: "name", description }],
    );
  });
}

test("a name that is there but breaks the rule still gets the rule", async () => {
  const err = assertRestError(await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "Bad Name" }), 400, 3, "INVALID_ARGUMENT");
  assert.deepEqual(fieldViolations(err), [{ field: "name", description: "must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long" }]);
});
