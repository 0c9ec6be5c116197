/**
 * Issue 25: requests per second of the registry token endpoint, what every
 * docker/skopeo pull and push calls first. A viewer of one organization
 * (user _token, an API token) asks GET /registry/token for pull,push on a
 * repository of that organization, over BENCH_CONNECTIONS keep-alive
 * HTTP/1.1 connections for BENCH_DURATION_S seconds: Basic parsing, the API
 * token's verification (cached), the grants at the organization, and one
 * ES256 signature per answer. The server runs as users run it (the compiled
 * bin, its own process, PLATFORM_CALLS_PER_IDENTITY=0 so the one identity is
 * not rate limited), on SQLite, or on PostgreSQL with BENCH_DATABASE_URL.
 *
 *   npm run build && npx tsx bench/registry-token.ts
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt } from "jose";
import { TokenService } from "../src/auth/tokens.js";
import { openStore } from "../src/store/open.js";
import { autocannonLoad } from "./load.js";
import { seed, startServer, stopServer } from "./server-target.js";

const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
const databaseUrl = process.env.BENCH_DATABASE_URL ?? "";

const dataDir = mkdtempSync(join(tmpdir(), "bench-registry-token-"));
process.env.PLATFORM_CALLS_PER_IDENTITY = "0";
const { orgUid, token: adminToken } = await seed(dataDir, databaseUrl, 1);
const server = await startServer({ dataDir, databaseUrl, workers: 1, logLevel: "warn", logFile: join(dataDir, "server.log"), profile: [] });
try {
  const base = `http://127.0.0.1:${server.port}`;
  const call = async (method: string, path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as { uid: string; roles?: { uid: string; name: string }[] };
  };
  const roles = await fetch(`${base}/iam/v2beta1/roles?name=viewer`, { headers: { authorization: `Bearer ${adminToken}` } });
  const viewer = ((await roles.json()) as { roles: { uid: string; name: string }[] }).roles.find((r) => r.name === "viewer")!;
  const identity = await call("POST", `/iam/v2beta1/identities/${orgUid}`, {
    name: "bench viewer",
    claimMatch: { issuer: "https://ci.example", subject: "bench" },
  });
  await call("POST", `/iam/v2beta1/roleBindings/${orgUid}`, { identityUid: identity.uid, roleUid: viewer.uid });
  const store = await openStore({ dataDir, databaseUrl });
  const tokens = await TokenService.open(store.keys, { issuer: "http://bench.local", audience: "http://bench.local" });
  const apiToken = (await tokens.mint(identity.uid)).token;
  await store.close();

  const url = `${base}/registry/token?service=platform-registry&scope=${encodeURIComponent(`repository:${orgUid}/app:pull,push`)}`;
  const headers = { authorization: `Basic ${Buffer.from(`_token:${apiToken}`).toString("base64")}` };
  const check = (await (await fetch(url, { headers })).json()) as { token: string };
  const access = JSON.stringify(decodeJwt(check.token).access);
  const row = await autocannonLoad("registry token", url, { durationS: DURATION_S, connections: CONNECTIONS, headers });
  console.log(
    `registry token endpoint (${databaseUrl === "" ? "SQLite" : "PostgreSQL"}, ${CONNECTIONS} connections, ${DURATION_S} s): ` +
      `${Math.round(row.rps)} requests/s, p50 ${row.p50} ms, p99 ${row.p99} ms; access granted: ${access}`,
  );
} finally {
  await stopServer(server);
  rmSync(dataDir, { recursive: true, force: true });
}
