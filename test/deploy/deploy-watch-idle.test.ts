/**
 * Issue 30, item 4: a WatchEvents stream with no event stays open behind each
 * docs/deploy/ proxy, with the server's default heartbeat interval. HAProxy's
 * `timeout server 60s` cut a REST and a gRPC watch after 60 s without an
 * event, and a REST watch on a quiet feed got HAProxy's 504 (no response
 * headers until the first event). Each proxy runs its shipped config as the
 * deploy-*.test.ts suites run it (Debian's packages, TLS in front), all three
 * at once: a REST watch and a native gRPC watch wait 75 s (past HAProxy's 60 s
 * and its client side's 75 s) with no event, then an event is committed and
 * both streams, still open, receive it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ENVIRONMENT_VARIABLES } from "../../src/config.js";
import { within } from "../support/assertions.js";
import { skipUnlessInstalled, startProxy, type ProxyKind } from "../support/proxies.js";
import { startTestServer } from "../support/server.js";
import { createTestCa } from "../support/test-ca.js";
import { openWatch } from "../support/watch-clients.js";

/** Longer than every idle timeout of the shipped configs (HAProxy: server 60 s, client 75 s). */
const QUIET_MS = 75_000;

/** What the deploy README tells operators to set behind each proxy. */
const SERVER_ENV: Record<ProxyKind, Record<string, string>> = {
  haproxy: { PLATFORM_PROXY_PROTOCOL: "on" },
  nginx: { PLATFORM_TRUSTED_PROXIES: "127.0.0.1/32" },
  caddy: { PLATFORM_TRUSTED_PROXIES: "127.0.0.1/32" },
};

describe("a quiet WatchEvents stream stays open behind each docs/deploy/ proxy", { concurrency: true }, () => {
  test("the server's heartbeat interval is its documented default, below every shipped proxy's idle timeout", () => {
    const heartbeat = ENVIRONMENT_VARIABLES.find((v) => v.name === "PLATFORM_EVENT_WATCH_HEARTBEAT_MS");
    assert.equal(heartbeat?.default, "15000");
  });

  for (const kind of ["haproxy", "nginx", "caddy"] as const) {
    test(
      `behind ${kind}: a REST and a gRPC watch, ${QUIET_MS / 1000} s without an event, then receive the next one`,
      {
        skip: skipUnlessInstalled(kind),
      },
      async () => {
        const dir = mkdtempSync(join(tmpdir(), `watch-idle-${kind}-`));
        // The default heartbeat interval: nothing in env sets PLATFORM_EVENT_WATCH_HEARTBEAT_MS.
        const srv = await startTestServer({ env: SERVER_ENV[kind] });
        const ca = createTestCa(join(dir, "tls"));
        const proxy = await startProxy(kind, { dir, upstreamPort: srv.port, ca });
        const diagnose = () => `\n--- ${kind} output ---\n${proxy.output()}`;
        try {
          const tls = { ca: ca.ca };
          // Through the proxy: behind HAProxy the server takes only connections that open with a PROXY header.
          const createGroup = (path: string, name: string) => createVia(proxy.port, tls.ca, path, srv.adminToken, name);
          const org = await createGroup("/iam/v2beta1/groups", `quiet behind ${kind}`);
          const watches = (["rest-h1", "grpc-js"] as const).map(
            (protocol) => [protocol, openWatch(protocol, proxy.url, srv.adminToken, { descendantsOf: org }, tls)] as const,
          );
          for (const [protocol, w] of watches) {
            await within(30_000, w.opened, `${protocol}: the response headers through ${kind}${diagnose()}`);
            await within(30_000, w.heartbeats(1), `${protocol}: the opening heartbeat through ${kind}${diagnose()}`);
          }
          await new Promise((resolve) => setTimeout(resolve, QUIET_MS));
          for (const [protocol, w] of watches) assert.equal(w.ended, false, `${protocol} through ${kind} was cut while quiet${diagnose()}`);
          const child = await createGroup(`/iam/v2beta1/groups/${org}`, "after the quiet");
          for (const [protocol, w] of watches) {
            const [event] = await within(30_000, w.take(1), `${protocol}: the event through ${kind}${diagnose()}`);
            assert.equal(event!.subject, child);
            assert.equal(w.ended, false, `${protocol} through ${kind} ended`);
            w.cancel();
          }
        } finally {
          await proxy.stop();
          await srv.close();
          rmSync(dir, { recursive: true, force: true });
        }
      },
    );
  }
});

/** POST {name} to path through the proxy on port (TLS, trusting ca); the created group's uid. */
function createVia(port: number, ca: Buffer, path: string, token: string, name: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: "127.0.0.1",
        port,
        servername: "localhost",
        ca,
        method: "POST",
        path,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json", host: `localhost:${port}` },
        agent: false,
      },
      (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
        res.on("end", () => (res.statusCode === 200 ? resolve((JSON.parse(text) as { uid: string }).uid) : reject(new Error(text))));
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify({ name }));
  });
}
