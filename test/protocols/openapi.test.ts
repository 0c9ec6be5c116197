import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { rest, startTestServer, type TestServer } from "../support/server.js";

let srv: TestServer;
before(async () => {
  srv = await startTestServer();
});
after(async () => {
  await srv.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function documentOf(): Promise<any> {
  const res = await rest(srv.url, "GET", "/openapi.json", undefined, { authorization: "" });
  assert.equal(res.status, 200);
  return res.body;
}

test("/openapi.json is a valid OpenAPI 3.1 document, served without a token", async () => {
  const doc = await documentOf();
  assert.equal(doc.openapi, "3.1.0");
  const result = await new Validator().validate(doc);
  assert.equal(result.valid, true, String(JSON.stringify(result.errors ?? null)).slice(0, 2000));
});

/** A path with its parameter names erased: its shape. */
const shapeOf = (path: string) => path.replace(/\{([^}=]+)(=[^}]*)?\}/g, "{}");

test("it lists exactly the REST operations the transcoder serves, one parameter name per path shape", async () => {
  const doc = await documentOf();
  const documented = new Set<string>();
  const shapes = new Map<string, string>();
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    assert.equal(shapes.get(shapeOf(path)), undefined, `${path} and ${shapes.get(shapeOf(path))} differ only by parameter name`);
    shapes.set(shapeOf(path), path);
    for (const method of Object.keys(ops)) documented.add(`${method.toUpperCase()} ${shapeOf(path)}`);
  }
  const served = new Set<string>();
  for (const op of srv.server.restOperations) {
    const path = shapeOf(op.path);
    served.add(`${op.method} ${path}`);
    // A trailing {parent=**} also matches the bare collection: POST there creates a root.
    if (op.optionalTrailing && op.method === "POST") served.add(`${op.method} ${path.replace(/\/\{\}$/, "")}`);
  }
  assert.deepEqual([...documented].sort(), [...served].sort());
  for (const method of ["post", "get", "patch", "delete"])
    assert.ok(doc.paths["/iam/v2beta1/groups/{uid}"][method], `${method} /iam/v2beta1/groups/{uid}`);
  assert.ok(doc.paths["/iam/v2beta1/roleBindings:batchCreate"].post);
});

test("each operation says which request field its path parameter binds", async () => {
  const doc = await documentOf();
  const ops = doc.paths["/iam/v2beta1/groups/{uid}"];
  for (const [method, field] of [
    ["post", "parent"],
    ["get", "uid"],
    ["patch", "group.uid"],
    ["delete", "uid"],
  ]) {
    const [param] = ops[method!].parameters.filter((p: { in: string }) => p.in === "path");
    assert.equal(param.name, "uid");
    assert.equal(param["x-request-field"], field);
    assert.ok(param.description.startsWith(`Binds the request field \`${field}\`.`), param.description);
    assert.match(param.description, /percent-encoded \(%2F\)/);
  }
});

test("operationIds are unique, operations are tagged by service and carry the proto comments", async () => {
  const doc = await documentOf();
  const ids: string[] = [];
  for (const ops of Object.values(
    doc.paths as Record<string, Record<string, { operationId: string; tags: string[]; summary: string; responses: object }>>,
  )) {
    for (const op of Object.values(ops)) {
      ids.push(op.operationId);
      assert.equal(op.tags.length, 1);
      assert.ok(
        Object.keys(op.responses).some((code) => /^4\d\d$/.test(code)),
        `${op.operationId} has 4XX responses`,
      );
    }
  }
  assert.equal(new Set(ids).size, ids.length, "no operationId twice");
  assert.equal(doc.paths["/iam/v1/groups"].get.operationId, "iam.v1.GroupsService.ListGroups");
  assert.equal(doc.paths["/iam/v2beta1/groups"].get.operationId, "iam.v2beta1.GroupsService.ListGroups");
  assert.notEqual(doc.paths["/sts/exchange"].get.operationId, doc.paths["/sts/exchange"].post.operationId);
  const create = doc.paths["/iam/v2beta1/groups/{uid}"].post;
  assert.deepEqual(create.tags, ["iam.v2beta1.GroupsService"]);
  assert.equal(create.summary, "CreateGroup: Creates a group.");
  assert.match(create.description, /With an empty parent it creates a root organization/);
  const tag = doc.tags.find((t: { name: string }) => t.name === "iam.v2beta1.GroupsService");
  assert.match(tag.description, /^GroupsService manages the group hierarchy/);
  assert.equal(doc.info.license.identifier, "Apache-2.0");
});

test("request and response schemas each state their own rules", async () => {
  const doc = await documentOf();
  const schemas = doc.components.schemas;
  const bodyOf = (method: string, path: string) => doc.paths[path][method].requestBody.content["application/json"].schema.$ref;
  assert.equal(bodyOf("post", "/iam/v2beta1/groups/{uid}"), "#/components/schemas/platformapi.iam.v2beta1.Group_Input");
  assert.equal(bodyOf("patch", "/iam/v2beta1/groups/{uid}"), "#/components/schemas/platformapi.iam.v2beta1.Group_Patch");
  const input = schemas["platformapi.iam.v2beta1.Group_Input"];
  assert.deepEqual(input.required, ["name"]);
  assert.equal(input.properties.uid, undefined, "output-only fields are not inputs");
  assert.deepEqual(
    { ...input.properties.name, description: undefined },
    { type: "string", pattern: "^[a-z0-9 ._-]{1,}$", minLength: 3, maxLength: 63, description: undefined },
  );
  assert.equal(schemas["platformapi.iam.v2beta1.Group_Patch"].required, undefined, "a partial update requires nothing");
  const group = schemas["platformapi.iam.v2beta1.Group"];
  assert.equal(group.properties.createTime.readOnly, true);
  assert.ok(group.required.includes("uid") && group.required.includes("name"));
  const invite = schemas["platformapi.iam.v2beta1.GroupInvite"];
  assert.ok(!invite.required.includes("ttl"), "input-only ttl is never required in a response");
  assert.equal(invite.properties.ttl.writeOnly, true);
  assert.ok(schemas["platformapi.iam.v2beta1.GroupInvite_Input"].required.includes("ttl"));
  const pageSize = doc.paths["/iam/v2beta1/groups"].get.parameters.find((p: { name: string }) => p.name === "page_size");
  assert.deepEqual(pageSize.schema, { type: "integer", format: "int32", minimum: 0 });
  assert.match(pageSize.description, /200/);
  const listResponse = schemas["platformapi.iam.v2beta1.ListGroupsResponse"];
  assert.equal(listResponse.properties.totalCount.type, "string", "int64 is a string in JSON");
});

test("the error body is described fully, and every secured operation says so", async () => {
  const doc = await documentOf();
  const schemas = doc.components.schemas;
  const details = schemas["google.rpc.Status"].properties.details.items;
  assert.equal(details.discriminator.propertyName, "@type");
  assert.deepEqual(
    Object.keys(details.discriminator.mapping).sort(),
    ["ErrorInfo", "BadRequest", "PreconditionFailure"].map((d) => `type.googleapis.com/google.rpc.${d}`).sort(),
  );
  assert.equal(schemas["google.rpc.ErrorInfo"].properties["@type"].const, "type.googleapis.com/google.rpc.ErrorInfo");
  const create = doc.paths["/iam/v2beta1/groups/{uid}"].post;
  assert.deepEqual(create.responses["400"], { $ref: "#/components/responses/BadRequest" });
  assert.deepEqual(doc.components.responses.BadRequest.content["application/json"].schema, {
    $ref: "#/components/schemas/google.rpc.Status",
  });
  assert.deepEqual(doc.components.securitySchemes.bearer, { ...doc.components.securitySchemes.bearer, type: "http", scheme: "bearer" });
  assert.deepEqual(doc.paths["/sts/exchange"].get.security, [], "the exchange needs no API token");
  assert.equal(doc.paths["/sts/exchange"].get.responses["401"], undefined);
});

test("the exchange's POST describes its form body, the fields of its query", async () => {
  const doc = await documentOf();
  const post = doc.paths["/sts/exchange"].post;
  const form = post.requestBody.content["application/x-www-form-urlencoded"].schema;
  assert.equal(post.requestBody.required, false);
  assert.equal(post.requestBody.content["application/json"], undefined, "no JSON body is read");
  assert.deepEqual(form.properties.aud.type, "array");
  assert.equal(form.properties.identity.type, "string");
  assert.deepEqual(Object.keys(form.properties).sort(), post.parameters.map((p: { name: string }) => p.name).sort());
});

test("live responses have every property their schema requires", async () => {
  const doc = await documentOf();
  const org = await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "schema org" });
  const child = await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.body.uid}`, { name: "schema child" });
  const checks: [string, unknown][] = [
    ["platformapi.iam.v2beta1.Group", child.body],
    [
      "platformapi.iam.v2beta1.Group",
      (await rest(srv.url, "PATCH", `/iam/v2beta1/groups/${child.body.uid.replace("/", "%2F")}`, { description: "patched" })).body,
    ],
    ["platformapi.iam.v2beta1.ListGroupsResponse", (await rest(srv.url, "GET", "/iam/v2beta1/groups")).body],
    ["google.rpc.Status", (await rest(srv.url, "GET", `/iam/v2beta1/groups/${"a".repeat(40)}`)).body],
    ["google.rpc.Status", (await rest(srv.url, "POST", "/iam/v2beta1/groups", { name: "X" })).body],
  ];
  for (const [name, body] of checks) assert.deepEqual(missingRequired(doc, { $ref: `#/components/schemas/${name}` }, body, name), [], name);
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function missingRequired(doc: any, schema: any, value: unknown, at: string): string[] {
  if (schema?.$ref) return missingRequired(doc, doc.components.schemas[schema.$ref.split("/").pop()], value, at);
  if (schema?.oneOf && schema.discriminator && value && typeof value === "object") {
    const target = schema.discriminator.mapping[(value as Record<string, string>)["@type"]!];
    return target ? missingRequired(doc, { $ref: target }, value, at) : [`${at}: unknown @type`];
  }
  if (Array.isArray(value)) return value.flatMap((item, i) => missingRequired(doc, schema?.items, item, `${at}[${i}]`));
  if (value === null || typeof value !== "object" || !schema?.properties) return [];
  const record = value as Record<string, unknown>;
  const missing = ((schema.required ?? []) as string[]).filter((key) => !(key in record)).map((key) => `${at}.${key}`);
  return [...missing, ...Object.entries(record).flatMap(([key, v]) => missingRequired(doc, schema.properties[key], v, `${at}.${key}`))];
}

test("/docs is an interactive page whose assets are all served locally", async () => {
  const res = await fetch(`${srv.url}/docs`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /text\/html/);
  const html = await res.text();
  assert.ok(!/https?:\/\//.test(html), "no CDN or other remote URL");
  const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
  // Relative to the page, so the page also works under a proxy's path prefix (test/docs/docs-prefix.test.ts).
  assert.ok(assets.includes("docs/swagger-ui-bundle.js"));
  for (const asset of assets) {
    const r = await fetch(new URL(asset, `${srv.url}/docs`));
    assert.equal(r.status, 200, asset);
    assert.ok((await r.arrayBuffer()).byteLength > 0, asset);
  }
  const init = await (await fetch(`${srv.url}/docs/init.js`)).text();
  assert.match(init, /url: "openapi\.json"/);
});
