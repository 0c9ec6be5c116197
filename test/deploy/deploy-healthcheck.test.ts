/**
 * The container image's HEALTHCHECK, run exactly as deploy/Dockerfile states
 * it (its exec-form command parsed out of the file, with the image's ENV and
 * what `docker run -e` would add) against a real server: exit code 0 while the
 * server serves, 1 when it cannot be reached, and 0 with
 * PLATFORM_PROXY_PROTOCOL=on too, where every connection must open with a
 * PROXY header (the probe sends one), and with TLS on the port. Docker itself
 * is not needed: the command is what Docker runs inside the container.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runChild } from "../support/child-process.js";
import { startTestServer } from "../support/server.js";
import { createTestCa, type TestCa } from "../support/test-ca.js";

const DOCKERFILE = fileURLToPath(new URL("../../deploy/Dockerfile", import.meta.url));

/** The Dockerfile's instructions, as Docker reads them: continuation lines joined, comments and blank lines left out. */
function instructions(): string[] {
  const lines = readFileSync(DOCKERFILE, "utf8")
    .split("\n")
    .filter((l) => !/^\s*#/.test(l));
  return lines
    .join("\n")
    .replace(/\\[ \t]*\n/g, "")
    .split("\n")
    .filter((l) => l.trim() !== "");
}

/** The HEALTHCHECK's command (exec form) and options; there must be exactly one. */
function healthcheck(): { argv: string[]; options: string[] } {
  const found = instructions().filter((l) => /^HEALTHCHECK\s/i.test(l));
  assert.equal(found.length, 1, "one HEALTHCHECK");
  const m = /^HEALTHCHECK\s+((?:--\S+\s+)*)CMD\s+(\[.*\])\s*$/i.exec(found[0]!);
  assert.ok(m, `HEALTHCHECK ... CMD [exec form]: ${found[0]}`);
  const argv = JSON.parse(m[2]!) as unknown;
  assert.ok(Array.isArray(argv) && argv.every((a) => typeof a === "string"), "a JSON array of strings");
  return { argv, options: m[1]!.trim().split(/\s+/) };
}

/** The runtime stage's ENV (the last stage's, as the container gets it). */
function imageEnv(): Record<string, string> {
  const all = instructions();
  const lastFrom = Math.max(...all.map((l, i) => (/^FROM\s/i.test(l) ? i : -1)));
  const env: Record<string, string> = {};
  for (const line of all.slice(lastFrom).filter((l) => /^ENV\s/i.test(l)))
    for (const [, k, v] of line.slice(4).matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S*)/g)) env[k!] = v!;
  return env;
}

/** Runs the health check command with the image's environment and `extra` (docker run -e); resolves with its exit code. */
async function runHealthcheck(extra: Record<string, string>): Promise<number> {
  const { argv } = healthcheck();
  // Only PATH from this process (Docker's default PATH finds node in the image the same way).
  const env = { PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin", ...imageEnv(), ...extra };
  const run = await runChild(argv, { env, timeoutMs: 60_000 });
  if (run.code === null) throw new Error(`the health check ended by ${run.signal}:\n${run.stderr}`);
  return run.code;
}

describe("deploy/Dockerfile's HEALTHCHECK", () => {
  let dir: string;
  let ca: TestCa;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "deploy-healthcheck-"));
    ca = createTestCa(join(dir, "tls"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("is one exec-form node command, its own timeout under Docker's", () => {
    const { argv, options } = healthcheck();
    assert.deepEqual(argv.slice(0, 2), ["node", "-e"]);
    assert.ok(options.includes("--timeout=5s"), options.join(" "));
    assert.match(argv[2]!, /timeout: 4000/, "the probe gives up before Docker does");
    assert.equal(imageEnv().PORT, "8080");
  });

  /** [what the server runs with, what the container's environment adds for the probe, the exit code wanted] */
  const cases: [string, Record<string, string>, Record<string, string>, number][] = [
    ["plain HTTP", {}, {}, 0],
    ["PLATFORM_PROXY_PROTOCOL=on", { PLATFORM_PROXY_PROTOCOL: "on" }, { PLATFORM_PROXY_PROTOCOL: "on" }, 0],
    ["PLATFORM_PROXY_PROTOCOL=true", { PLATFORM_PROXY_PROTOCOL: "true" }, { PLATFORM_PROXY_PROTOCOL: "true" }, 0],
    ["PLATFORM_PROXY_PROTOCOL=' YES '", { PLATFORM_PROXY_PROTOCOL: " YES " }, { PLATFORM_PROXY_PROTOCOL: " YES " }, 0],
    ["PLATFORM_PROXY_PROTOCOL=1", { PLATFORM_PROXY_PROTOCOL: "1" }, { PLATFORM_PROXY_PROTOCOL: "1" }, 0],
    ["PLATFORM_PROXY_PROTOCOL=off", { PLATFORM_PROXY_PROTOCOL: "off" }, { PLATFORM_PROXY_PROTOCOL: "off" }, 0],
    // The probe follows the setting: without it, a PROXY-protocol port refuses the probe (what the old command did).
    ["a PROXY-protocol port probed without the setting", { PLATFORM_PROXY_PROTOCOL: "on" }, {}, 1],
    ["a plain port probed with PLATFORM_PROXY_PROTOCOL=on", {}, { PLATFORM_PROXY_PROTOCOL: "on" }, 1],
    [
      "PLATFORM_PROXY_PROTOCOL=on with 127.0.0.1/32 among PLATFORM_TRUSTED_PROXIES",
      { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TRUSTED_PROXIES: "10.0.0.5/32,127.0.0.1/32" },
      { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TRUSTED_PROXIES: "10.0.0.5/32,127.0.0.1/32" },
      0,
    ],
    // As the Dockerfile's comment says: trusted proxies that leave out 127.0.0.1 refuse the probe's PROXY header.
    [
      "PLATFORM_PROXY_PROTOCOL=on with PLATFORM_TRUSTED_PROXIES leaving out 127.0.0.1",
      { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TRUSTED_PROXIES: "10.0.0.5/32" },
      { PLATFORM_PROXY_PROTOCOL: "on", PLATFORM_TRUSTED_PROXIES: "10.0.0.5/32" },
      1,
    ],
  ];
  for (const [label, serverEnv, probeEnv, code] of cases) {
    test(`${label}: exit ${code}`, async () => {
      const srv = await startTestServer({ env: serverEnv });
      try {
        assert.equal(await runHealthcheck({ PORT: String(srv.port), ...probeEnv }), code);
      } finally {
        await srv.close();
      }
    });
  }

  test("TLS on the port, with and without PLATFORM_PROXY_PROTOCOL: exit 0", async () => {
    const tls = { PLATFORM_TLS_CERT_FILE: ca.certFile, PLATFORM_TLS_KEY_FILE: ca.keyFile };
    for (const proxy of [{}, { PLATFORM_PROXY_PROTOCOL: "on" }] as Record<string, string>[]) {
      const env = { ...tls, ...proxy };
      const srv = await startTestServer({ env });
      try {
        assert.match(srv.url, /^https:/);
        assert.equal(await runHealthcheck({ PORT: String(srv.port), ...env }), 0, JSON.stringify(proxy));
      } finally {
        await srv.close();
      }
    }
  });

  test("a server that is gone: exit 1, with the setting on or off", async () => {
    const srv = await startTestServer({ env: { PLATFORM_PROXY_PROTOCOL: "on" } });
    const port = String(srv.port);
    await srv.close();
    assert.equal(await runHealthcheck({ PORT: port, PLATFORM_PROXY_PROTOCOL: "on" }), 1);
    assert.equal(await runHealthcheck({ PORT: port }), 1);
  });
});
