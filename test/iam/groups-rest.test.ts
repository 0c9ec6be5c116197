import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { assertChildOf, assertDeletedOnce, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertPrecondition, assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

const srv = serveForSuite();
const call = restOn(srv);

describe("create", () => {
  test("a root organization gets a 40-hex uid and the spec's fields", async () => {
    const res = await call("POST", "/iam/v2beta1/groups", { name: "acme corp", description: "the org" });
    assert.equal(res.status, 200);
    const g = res.body;
    assert.match(g.uid, /^[0-9a-f]{40}$/);
    assert.equal(g.name, "acme corp");
    assert.equal(g.description, "the org");
    assert.deepEqual(g.resourceLimits, {});
    assert.equal(g.verified, false);
    assert.match(g.createTime, MILLIS_TIMESTAMP);
    assert.equal(g.createTime, g.updateTime);
  });

  test("a child's uid is the parent's uid plus / and 16 hex", async () => {
    const root = await createGroup(srv.url, null, "parent org");
    const child = await createGroup(srv.url, root.uid, "child folder");
    assertChildOf(child.uid, root.uid);
    const grandchild = await createGroup(srv.url, child.uid, "grandchild");
    assertChildOf(grandchild.uid, child.uid);
  });

  test("output-only fields in the body are ignored", async () => {
    const res = await call("POST", "/iam/v2beta1/groups", {
      name: "sneaky",
      uid: "f".repeat(40),
      verified: true,
      createTime: "2001-01-01T00:00:00Z",
      resourceLimits: { repositories: 5 },
    });
    assert.equal(res.status, 200);
    assert.notEqual(res.body.uid, "f".repeat(40));
    assert.equal(res.body.verified, false);
    assert.deepEqual(res.body.resourceLimits, {});
    assert.notEqual(res.body.createTime, "2001-01-01T00:00:00.000Z");
  });

  for (const [label, body, description] of [
    ["no name", { description: "x" }, "is required: must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long"],
    ["empty name", { name: "" }, "is required: must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long"],
    ["empty body", undefined, "is required: must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long"],
    ["upper case", { name: "Acme" }, "must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long"],
    ["punctuation", { name: "acme!" }, "must match ^[a-z0-9 ._-]{1,}$ and be 3 to 63 characters long"],
  ] as const) {
    test(`a name that breaks the rule (${label}) is INVALID_ARGUMENT on name: ${description}`, async () => {
      const res = await call("POST", "/iam/v2beta1/groups", body ?? "");
      const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
      assert.equal(err.message, `Invalid argument: name: ${description}`);
      assert.deepEqual(fieldViolations(err), [{ field: "name", description }]);
    });
  }

  test("a missing parent is NOT_FOUND", async () => {
    const res = await call("POST", `/iam/v2beta1/groups/${"a".repeat(40)}`, { name: "orphan" });
    assertRestError(res, 404, 5, "NOT_FOUND");
  });

  test("a malformed parent uid is INVALID_ARGUMENT on parent", async () => {
    assertViolations(await call("POST", `/iam/v2beta1/groups/${"A".repeat(40)}`, { name: "orphan" }), ["parent"]);
  });
});

describe("get", () => {
  test("returns the group; a missing one is NOT_FOUND", async () => {
    const g = await createGroup(srv.url, null, "get me");
    const res = await call("GET", `/iam/v2beta1/groups/${g.uid}`);
    assert.equal(res.status, 200);
    assert.equal(res.body.uid, g.uid);
    assertRestError(await call("GET", `/iam/v2beta1/groups/${"b".repeat(40)}`), 404, 5, "NOT_FOUND");
  });

  test("an encoded slash in a uid path is a slash (generated clients send it so); nothing else is", async () => {
    const root = await createGroup(srv.url, null, "enc root");
    const child = await createGroup(srv.url, root.uid, "enc child");
    for (const encoded of [child.uid.replace("/", "%2F"), child.uid.replace("/", "%2f")]) {
      const res = await call("GET", `/iam/v2beta1/groups/${encoded}`);
      assert.equal(res.status, 200);
      assert.equal(res.body.uid, child.uid);
    }
    assertRestError(await call("GET", `/iam/v2beta1/groups/${child.uid.replace("/", "%252F")}`), 400, 3, "INVALID_ARGUMENT");
    assertRestError(await call("GET", `/iam/v2beta1/groups/${child.uid.replace("/", "%2F%2F")}`), 400, 3, "INVALID_ARGUMENT");
    assertRestError(await call("GET", `/iam/v2beta1/groups/${root.uid}//${child.uid.split("/")[1]}`), 400, 3, "INVALID_ARGUMENT");
  });
});

describe("update", () => {
  test("without a mask exactly the fields in the body change; updateTime moves, createTime stays", async () => {
    const g = await createGroup(srv.url, null, "before", "old text");
    await new Promise((r) => setTimeout(r, 5));
    const res = await call("PATCH", `/iam/v2beta1/groups/${g.uid}`, { description: "new text" });
    assert.equal(res.status, 200);
    assert.equal(res.body.name, "before");
    assert.equal(res.body.description, "new text");
    assert.equal(res.body.createTime, g.createTime);
    assert.ok(res.body.updateTime > g.updateTime, "updateTime moved");
    const renamed = await call("PATCH", `/iam/v2beta1/groups/${g.uid}`, { name: "after" });
    assert.equal(renamed.body.name, "after");
    assert.equal(renamed.body.description, "new text");
  });

  test("a key sent with an empty value clears the field", async () => {
    const g = await createGroup(srv.url, null, "clearable", "text");
    const res = await call("PATCH", `/iam/v2beta1/groups/${g.uid}`, { description: "" });
    assert.equal(res.body.description, "");
  });

  test("updateMask=description changes only the description", async () => {
    const g = await createGroup(srv.url, null, "masked", "a");
    const res = await call("PATCH", `/iam/v2beta1/groups/${g.uid}?updateMask=description`, { name: "ignored", description: "b" });
    assert.equal(res.status, 200);
    assert.equal(res.body.name, "masked");
    assert.equal(res.body.description, "b");
  });

  test("a mask of several fields is a comma list, in camelCase or snake_case", async () => {
    const g = await createGroup(srv.url, null, "multi", "a");
    const res = await call("PATCH", `/iam/v2beta1/groups/${g.uid}?update_mask=name,description`, { name: "multi two", description: "b" });
    assert.equal(res.body.name, "multi two");
    assert.equal(res.body.description, "b");
  });

  for (const path of ["uid", "create_time", "updateTime", "verified", "bogus", "name.first"]) {
    test(`mask path ${path} is INVALID_ARGUMENT on update_mask and changes nothing`, async () => {
      const g = await createGroup(srv.url, null, "mask target", "same");
      assertViolations(await call("PATCH", `/iam/v2beta1/groups/${g.uid}?updateMask=${path}`, { description: "changed" }), ["update_mask"]);
      const after = await call("GET", `/iam/v2beta1/groups/${g.uid}`);
      assert.equal(after.body.description, "same");
      assert.equal(after.body.updateTime, g.updateTime);
    });
  }

  test("the uid in the path wins over a uid in the body", async () => {
    const a = await createGroup(srv.url, null, "target a", "a");
    const b = await createGroup(srv.url, null, "target b", "b");
    const res = await call("PATCH", `/iam/v2beta1/groups/${a.uid}`, { uid: b.uid, description: "moved?" });
    assert.equal(res.body.uid, a.uid);
    assert.equal((await call("GET", `/iam/v2beta1/groups/${b.uid}`)).body.description, "b");
  });

  test("an invalid new name is INVALID_ARGUMENT; a missing group is NOT_FOUND", async () => {
    const g = await createGroup(srv.url, null, "valid");
    assertViolations(await call("PATCH", `/iam/v2beta1/groups/${g.uid}`, { name: "NOT valid" }), ["name"]);
    assertRestError(await call("PATCH", `/iam/v2beta1/groups/${"c".repeat(40)}`, { description: "x" }), 404, 5, "NOT_FOUND");
  });
});

describe("delete", () => {
  test("an empty group is deleted with an empty JSON body", async () => {
    const g = await createGroup(srv.url, null, "doomed");
    await assertDeletedOnce(srv, `/iam/v2beta1/groups/${g.uid}`);
  });

  test("a group with children is FAILED_PRECONDITION RESOURCE_NOT_EMPTY naming the child kind", async () => {
    const root = await createGroup(srv.url, null, "busy");
    const child = await createGroup(srv.url, root.uid, "kid");
    assertPrecondition(await call("DELETE", `/iam/v2beta1/groups/${root.uid}`), "RESOURCE_NOT_EMPTY", /groups/);
    assert.equal((await call("GET", `/iam/v2beta1/groups/${root.uid}`)).status, 200, "nothing deleted");
    assert.equal((await call("DELETE", `/iam/v2beta1/groups/${child.uid}`)).status, 200);
    assert.equal((await call("DELETE", `/iam/v2beta1/groups/${root.uid}`)).status, 200);
  });
});

describe("list filters", () => {
  let root: { uid: string };
  let a: { uid: string };
  let b: { uid: string };
  let a1: { uid: string };
  before(async () => {
    root = await createGroup(srv.url, null, "filter org");
    a = await createGroup(srv.url, root.uid, "team");
    b = await createGroup(srv.url, root.uid, "other");
    a1 = await createGroup(srv.url, a.uid, "team");
  });
  const uids = async (query: string) => {
    const res = await call("GET", `/iam/v2beta1/groups?${query}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return (res.body.groups as { uid: string }[]).map((g) => g.uid).sort();
  };

  test("descendants_of, children_of, ancestors_of, ids", async () => {
    assert.deepEqual(await uids(`uidp.descendants_of=${root.uid}`), [a.uid, a1.uid, b.uid].sort());
    assert.deepEqual(await uids(`uidp.descendantsOf=${root.uid}`), [a.uid, a1.uid, b.uid].sort());
    assert.deepEqual(await uids(`uidp.children_of=${root.uid}`), [a.uid, b.uid].sort());
    assert.deepEqual(await uids(`uidp.ancestors_of=${a1.uid}`), [root.uid, a.uid].sort());
    assert.deepEqual(await uids(`uidp.ids=${a.uid}&uidp.ids=${b.uid}`), [a.uid, b.uid].sort());
  });

  test("name is exact and combines with descendants_of", async () => {
    assert.deepEqual(await uids(`uidp.descendants_of=${root.uid}&name=team`), [a.uid, a1.uid].sort());
    assert.deepEqual(await uids(`uidp.descendants_of=${root.uid}&name=tea`), []);
    assert.deepEqual(await uids(`uidp.descendants_of=${a.uid}&name=team`), [a1.uid]);
  });

  test("in_root returns organizations only", async () => {
    const roots = await uids("uidp.in_root=true&page_size=200");
    assert.ok(roots.includes(root.uid));
    assert.ok(roots.every((u) => !u.includes("/")));
  });

  test("totalCount is a string counting every match", async () => {
    const res = await call("GET", `/iam/v2beta1/groups?uidp.descendants_of=${root.uid}&page_size=1`);
    assert.equal(res.body.totalCount, "3");
    assert.equal(res.body.groups.length, 1);
    assert.equal(res.body.skipped, 0);
    assert.equal(typeof res.body.nextPageToken, "string");
  });

  test("a malformed uid in a filter is INVALID_ARGUMENT naming the filter", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/groups?uidp.descendants_of=nope"), ["uidp.descendants_of"]);
  });
});

describe("v1", () => {
  test("GET /iam/v1/groups returns items in the v1 shape", async () => {
    const root = await createGroup(srv.url, null, "v1 org", "legacy");
    const child = await createGroup(srv.url, root.uid, "v1 child");
    const res = await call("GET", `/iam/v1/groups?uidp.descendants_of=${root.uid}`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, {
      items: [{ id: child.uid, name: "v1 child", description: "", resourceLimits: {}, verified: false }],
    });
    const byId = await call("GET", `/iam/v1/groups?id=${root.uid}`);
    assert.deepEqual(
      byId.body.items.map((g: { id: string }) => g.id),
      [root.uid],
    );
    const byName = await call("GET", `/iam/v1/groups?name=v1%20org`);
    assert.ok(byName.body.items.some((g: { id: string }) => g.id === root.uid));
  });
});

describe("bad requests get the error body, never a 500", () => {
  test("unknown route", async () => {
    assertRestError(await call("GET", "/iam/v2beta1/nothing"), 404, 5, "ROUTE_NOT_FOUND");
  });
  test("malformed JSON", async () => {
    assertViolations(await call("POST", "/iam/v2beta1/groups", "{not json"), ["body"]);
  });
  test("a wrong type in the body", async () => {
    assertViolations(await call("POST", "/iam/v2beta1/groups", { name: 42 }), ["name"]);
  });
  test("a JSON array body", async () => {
    assertRestError(await call("POST", "/iam/v2beta1/groups", "[1,2]"), 400, 3, "INVALID_ARGUMENT");
  });
  test("a wrong type in the query", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/groups?page_size=ten"), ["page_size"]);
    assertRestError(await call("GET", "/iam/v2beta1/groups?uidp.in_root=maybe"), 400, 3, "INVALID_ARGUMENT");
    assertRestError(await call("GET", "/iam/v2beta1/groups?page_size=99999999999"), 400, 3, "INVALID_ARGUMENT");
  });
  test("an unknown query parameter is named", async () => {
    assertViolations(await call("GET", "/iam/v2beta1/groups?uidp.descendant_of=x"), ["uidp.descendant_of"]);
  });
  test("a body on a route that takes none", async () => {
    const g = await createGroup(srv.url, null, "bodyless");
    assertRestError(await call("DELETE", `/iam/v2beta1/groups/${g.uid}`, { uid: "x" }), 400, 3, "INVALID_ARGUMENT");
    assert.equal((await call("GET", `/iam/v2beta1/groups/${g.uid}`)).status, 200, "nothing deleted");
  });
  test("an unsupported content type", async () => {
    // With a token: a caller without one is refused from the headers, before its body (issue 21).
    const res = await fetch(`${srv.url}/iam/v2beta1/groups`, {
      method: "POST",
      headers: { "content-type": "text/plain", authorization: `Bearer ${srv.adminToken}` },
      body: "name=x",
    });
    assertRestError({ status: res.status, body: await res.json(), headers: res.headers }, 415, 3, "INVALID_ARGUMENT");
  });
  test("a body over the 4 MiB message limit", async () => {
    const res = await call("POST", "/iam/v2beta1/groups", { name: "big", description: "x".repeat(4_200_000) });
    assertRestError(res, 413, 8, "BODY_TOO_LARGE");
  });
  test("a method the path does not serve", async () => {
    const res = await call("PUT", "/iam/v2beta1/groups");
    assertRestError(res, 405, 12, "METHOD_NOT_ALLOWED");
    assert.ok(res.headers.get("allow")?.includes("GET"));
  });
});
