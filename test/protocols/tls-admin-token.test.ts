/**
 * `platform-api admin-token` against a server that serves TLS, run as an operator runs it: without the
 * PLATFORM_TLS_* settings it mints a token for http://localhost:PORT (the default addresses without TLS), which the
 * server refuses; the 401 names the TLS settings, not only PLATFORM_AUTH_URL and PORT. With them, the token works;
 * another port is still told as another address, without TLS in the hint.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { platformCli } from "../support/platform-cli.js";
import { createTestCa, type TestCa } from "../support/test-ca.js";
import { startTlsServer, type TlsTestServer } from "../support/tls-server.js";

let dir: string;
let ca: TestCa;
let srv: TlsTestServer;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "tls-admin-token-"));
  ca = createTestCa(join(dir, "ca"));
  srv = await startTlsServer(ca, { env: { LOG_LEVEL: "silent" } });
});
after(async () => {
  await srv?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `platform-api admin-token` over the server's database, with the server's PORT (0 in tests) and env. */
async function adminToken(env: Record<string, string>): Promise<string> {
  const storage = srv.databaseUrl ? { dataDir: srv.dataDir, databaseUrl: srv.databaseUrl } : srv.dataDir;
  const run = await platformCli(storage, ["admin-token"], { PORT: "0", ...env });
  assert.equal(run.code, 0, run.stderr);
  return run.stdout.trim();
}

/** The iss and aud a token claims. */
function claims(token: string): { iss: string; aud: string } {
  const { iss, aud } = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8")) as { iss: string; aud: string };
  return { iss, aud };
}

/** GET /iam/v2beta1/groups over TLS, trusting the test CA: the status and the error message, if any. */
function listGroups(token: string): Promise<{ status: number; message?: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      `https://localhost:${srv.port}/iam/v2beta1/groups?uidp.in_root=true`,
      { ca: ca.ca, headers: { authorization: `Bearer ${token}` } },
      (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode!, message: (JSON.parse(body) as { message?: string }).message }));
      },
    );
    req.on("error", reject);
  });
}

test("without PLATFORM_TLS_*: the token says http://, and the 401 names the TLS settings", async () => {
  const token = await adminToken({});
  assert.deepEqual(claims(token), { iss: "http://localhost:0", aud: "http://localhost:0" }, "the default addresses without TLS");
  assert.deepEqual(await listGroups(token), {
    status: 401,
    message:
      "Unauthenticated: the API token was issued by an http:// address and this server's is https:// " +
      "(mint it with this server's PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE set, or its PLATFORM_AUTH_URL, and PORT)",
  });
});

test("an audience alone that is http:// (PLATFORM_AUTH_URL given, not the base URL): the 401 names the TLS settings too", async () => {
  const token = await adminToken({ PLATFORM_AUTH_URL: "https://localhost:0" });
  assert.deepEqual(claims(token), { iss: "https://localhost:0", aud: "http://localhost:0" });
  assert.deepEqual(await listGroups(token), {
    status: 401,
    message:
      "Unauthenticated: the API token was issued for an http:// audience and this server's is https:// " +
      "(mint it with this server's PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE set, or its PLATFORM_BASE_URL, and PORT)",
  });
});

test("with the server's PLATFORM_TLS_*: the token says https:// and works", async () => {
  const token = await adminToken({ PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: ca.keyFile });
  assert.deepEqual(claims(token), { iss: "https://localhost:0", aud: "https://localhost:0" });
  assert.equal((await listGroups(token)).status, 200);
});

test("https:// on another port: the hint stays PLATFORM_AUTH_URL and PORT (TLS is not the mismatch)", async () => {
  const token = await adminToken({ PORT: "8443", PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: ca.keyFile });
  assert.equal(claims(token).iss, "https://localhost:8443");
  assert.deepEqual(await listGroups(token), {
    status: 401,
    message:
      "Unauthenticated: the API token was issued by another address, not this server's (mint it with this server's PLATFORM_AUTH_URL and PORT)",
  });
});
