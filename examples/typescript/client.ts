// A client of the Platform API: the types come from the server's /openapi.json (platform-api.d.ts, which
// `npx openapi-typescript http://localhost:8080/openapi.json -o platform-api.d.ts` writes), the calls from
// openapi-fetch. TOKEN is an API token (from the checkout: TOKEN=$(./bin/platform-api.js admin-token)).
import createClient from "openapi-fetch";
import type { paths } from "./platform-api.js";

const api = createClient<paths>({
  baseUrl: process.env.PLATFORM_URL ?? "http://localhost:8080",
  headers: { authorization: `Bearer ${process.env.TOKEN}` },
});
const { data: org } = await api.POST("/iam/v2beta1/groups", { body: { name: "typescript demo" } });
const { data: team } = await api.POST("/iam/v2beta1/groups/{uid}", { params: { path: { uid: org!.uid } }, body: { name: "eng" } });
await api.PATCH("/iam/v2beta1/groups/{uid}", { params: { path: { uid: team!.uid } }, body: { description: "the team" } });
const { data, error } = await api.GET("/iam/v2beta1/groups", { params: { query: { "uidp.children_of": org!.uid } } });
// error is the google.rpc.Status body: details[] is ErrorInfo | BadRequest | PreconditionFailure, by "@type"
process.stdout.write(`${JSON.stringify(data ?? error, null, 2)}\n`);
