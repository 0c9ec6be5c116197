import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { rest, startTestServer, type TestServer } from "./support/server.js";

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

test("it lists exactly the REST operations the transcoder serves", async () => {
  const doc = await documentOf();
  const documented = new Set<string>();
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    for (const method of Object.keys(ops)) documented.add(`${method.toUpperCase()} ${path}`);
  }
  const served = new Set<string>();
  for (const op of srv.server.restOperations) {
    const path = op.path.replace(/\{([^}=]+)(=[^}]*)?\}/g, "{$1}");
    served.add(`${op.method} ${path}`);
    // A trailing {parent=**} also matches the bare collection: POST there creates a root.
    if (op.optionalTrailing && op.method === "POST") served.add(`${op.method} ${path.replace(/\/\{[^}]+\}$/, "")}`);
  }
  assert.deepEqual([...documented].sort(), [...served].sort());
  assert.ok(served.has("GET /iam/v2beta1/groups/{uid}"));
  assert.ok(served.has("POST /iam/v2beta1/roleBindings:batchCreate"));
});

test("operations carry their parameters, bodies, error body and security", async () => {
  const doc = await documentOf();
  const list = doc.paths["/iam/v2beta1/groups"].get;
  const names = list.parameters.map((p: { name: string }) => p.name);
  for (const name of ["uidp.descendants_of", "uidp.children_of", "name", "page_size", "page_token", "order_by", "skip"]) {
    assert.ok(names.includes(name), `${name} documented`);
  }
  const create = doc.paths["/iam/v2beta1/groups/{parent}"].post;
  assert.deepEqual(create.requestBody.content["application/json"].schema, { $ref: "#/components/schemas/platformapi.iam.v2beta1.Group" });
  assert.deepEqual(create.responses.default.content["application/json"].schema, { $ref: "#/components/schemas/google.rpc.Status" });
  const group = doc.components.schemas["platformapi.iam.v2beta1.Group"];
  assert.deepEqual(group.required, ["name"]);
  assert.equal(group.properties.createTime.readOnly, true);
  const listResponse = doc.components.schemas["platformapi.iam.v2beta1.ListGroupsResponse"];
  assert.equal(listResponse.properties.totalCount.type, "string", "int64 is a string in JSON");
  assert.deepEqual(doc.components.securitySchemes.bearer, { ...doc.components.securitySchemes.bearer, type: "http", scheme: "bearer" });
  assert.deepEqual(doc.paths["/sts/exchange"].get.security, [], "the exchange needs no API token");
});

test("/docs is an interactive page whose assets are all served locally", async () => {
  const res = await fetch(`${srv.url}/docs`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /text\/html/);
  const html = await res.text();
  assert.ok(!/https?:\/\//.test(html), "no CDN or other remote URL");
  const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
  assert.ok(assets.includes("/docs/swagger-ui-bundle.js"));
  for (const asset of assets) {
    const r = await fetch(`${srv.url}${asset}`);
    assert.equal(r.status, 200, asset);
    assert.ok((await r.arrayBuffer()).byteLength > 0, asset);
  }
  const init = await (await fetch(`${srv.url}/docs/init.js`)).text();
  assert.match(init, /url: "\/openapi\.json"/);
});
