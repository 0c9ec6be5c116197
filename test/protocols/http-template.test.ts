import assert from "node:assert/strict";
import { test } from "node:test";
import { compileTemplate, decodeVariable } from "../../src/server/rest/http-template.js";

const match = (template: string, path: string) => compileTemplate(template).regex.exec(path)?.slice(1) ?? null;

test("{uid=**} takes a multi-segment uid with raw slashes", () => {
  assert.deepEqual(match("/iam/v2beta1/groups/{uid=**}", "/iam/v2beta1/groups/r/s1/s2"), ["r/s1/s2"]);
  assert.deepEqual(compileTemplate("/iam/v2beta1/groups/{uid=**}").variables, [{ fieldPath: ["uid"], multiSegment: true }]);
});

test("a trailing {parent=**} may match zero segments, so POST on the collection creates a root", () => {
  assert.deepEqual(match("/iam/v2beta1/groups/{parent=**}", "/iam/v2beta1/groups"), [undefined]);
  assert.equal(match("/iam/v2beta1/groups/{parent=**}", "/iam/v2beta1/groups/"), null);
  assert.equal(match("/iam/v2beta1/groups/{parent=**}", "/iam/v2beta1/groupsx"), null);
});

test("nested field paths bind into sub-messages", () => {
  const t = compileTemplate("/iam/v2beta1/groups/{group.uid=**}");
  assert.deepEqual(t.variables[0]!.fieldPath, ["group", "uid"]);
});

test(":verb suffixes are split only where the template has one", () => {
  const t = compileTemplate("/iam/v2beta1/roleBindings:batchCreate");
  assert.equal(t.verb, "batchCreate");
  assert.ok(t.regex.test("/iam/v2beta1/roleBindings:batchCreate"));
  assert.ok(!t.regex.test("/iam/v2beta1/roleBindings"));
  assert.deepEqual(match("/v1/{uid=**}:check", "/v1/a/b:check"), ["a/b"]);
  assert.equal(match("/v1/{uid=**}:check", "/v1/a/b"), null);
});

test("sub-patterns, * and ** inside and outside variables", () => {
  assert.deepEqual(match("/v1/{name=projects/*/things/*}:cancel", "/v1/projects/p1/things/t2:cancel"), ["projects/p1/things/t2"]);
  assert.equal(match("/v1/{name=projects/*/things/*}:cancel", "/v1/projects/p1/t2:cancel"), null);
  assert.deepEqual(match("/v1/*/items/{id}", "/v1/any/items/42"), ["42"]);
  assert.equal(match("/v1/*/items/{id}", "/v1/any/items/4/2"), null);
  assert.deepEqual(match("/v1/files/**", "/v1/files/a/b/c"), []);
});

test("literal text is matched exactly, not as a regex", () => {
  assert.equal(match("/a.b/{id}", "/aXb/1"), null);
  assert.deepEqual(match("/a.b/{id}", "/a.b/1"), ["1"]);
});

test("templates are bucketed by their first two literal segments", () => {
  assert.equal(compileTemplate("/iam/v2beta1/groups/{uid=**}").prefix, "/iam/v2beta1");
  assert.equal(compileTemplate("/sts/exchange").prefix, "/sts/exchange");
  assert.equal(compileTemplate("/{x}/y").prefix, null);
});

test("multi-segment variables take %2F as a separator (generated clients encode it); nothing else becomes a slash", () => {
  assert.equal(decodeVariable("a%2Fb/c%20d", true), "a/b/c d");
  assert.equal(decodeVariable("a%2fb", true), "a/b");
  assert.equal(decodeVariable("a%252Fb", true), "a%2Fb");
  assert.equal(decodeVariable("a%2Fb", false), "a/b");
  assert.throws(() => decodeVariable("%E0%A4%A", true), URIError);
});

test("a * inside a multi-segment variable is one segment, encoded or not", () => {
  assert.deepEqual(match("/v1/{name=projects/*/things/**}", "/v1/projects/p1/things/a%2Fb"), ["projects/p1/things/a%2Fb"]);
  assert.equal(match("/v1/{name=projects/*/things/**}", "/v1/projects/p1%2Fx/things/a"), null);
});

test("malformed templates are refused at start-up", () => {
  assert.throws(() => compileTemplate("no/leading/slash"));
  assert.throws(() => compileTemplate("/a/{b"));
  assert.throws(() => compileTemplate("/a/b}"));
});
