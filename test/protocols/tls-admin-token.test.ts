/**
 * `platform-api admin-token` against a server that serves TLS, run as an operator runs it: without the
 * PLATFORM_TLS_* settings it mints a token for http://localhost:PORT (the default addresses without TLS), which the
 * server refuses; the 401 names the TLS settings, not only PLATFORM_AUTH_URL and PORT. With them, the token works;
 * another port is still told as another address, without TLS in the hint.
 */
import assert from "node:assert/strict";
import https from "node:https";
import { after, before, test } from "node:test";
import { cliAdminToken } from "../support/platform-cli.js";
import type { TestCa } from "../support/test-ca.js";
import { startTlsServerWithCa, type TlsTestServer } from "../support/tls-server.js";

let ca: TestCa;
let srv: TlsTestServer;
let close: () => Promise<void>;
before(async () => ({ ca, srv, close } = await startTlsServerWithCa({ env: { LOG_LEVEL: "silent" } })));
after(() => close?.());

/** `platform-api admin-token` over the server's database, with the server's PORT (0 in tests) and env. */
const adminToken = (env: Record<string, string>) => cliAdminToken(srv, { PORT: "0", ...env });

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

/** Tokens minted without the server's TLS settings: the claims they carry, and the hint of the 401 they get. */
const HTTP_TOKENS: { name: string; env: Record<string, string>; claims: { iss: string; aud: string }; message: string }[] = [
  {
    name: "without PLATFORM_TLS_*: the token says http://, and the 401 names the TLS settings",
    env: {},
    claims: { iss: "http://localhost:0", aud: "http://localhost:0" },
    message:
      "Unauthenticated: the API token was issued by an http:// address and this server's is https:// " +
      "(mint it with this server's PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE set, or its PLATFORM_AUTH_URL, and PORT)",
  },
  {
    name: "an audience alone that is http:// (PLATFORM_AUTH_URL given, not the base URL): the 401 names the TLS settings too",
    env: { PLATFORM_AUTH_URL: "https://localhost:0" },
    claims: { iss: "https://localhost:0", aud: "http://localhost:0" },
    message:
      "Unauthenticated: the API token was issued for an http:// audience and this server's is https:// " +
      "(mint it with this server's PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE set, or its PLATFORM_BASE_URL, and PORT)",
  },
];

for (const c of HTTP_TOKENS) {
  test(c.name, async () => {
    const token = await adminToken(c.env);
    assert.deepEqual(claims(token), c.claims);
    assert.deepEqual(await listGroups(token), { status: 401, message: c.message });
  });
}

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
