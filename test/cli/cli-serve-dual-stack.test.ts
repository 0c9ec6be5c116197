/**
 * `serve` without HOST listens on every IPv6 and IPv4 address (issue 24: the default 0.0.0.0 left IPv6
 * clients out): the start-up line says http://[::]:<port>, an IPv4 client and, where this machine has IPv6
 * loopback, an IPv6 one ([::1]) both get answers. Where the kernel has no IPv6 at all, listening on "::"
 * fails and the server falls back to 0.0.0.0 with a warning; an explicit HOST is never replaced.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { listen } from "../../src/app/lifecycle.js";
import { loadConfig } from "../../src/config.js";
import type { Store } from "../../src/store/store.js";
import { startServeProcess } from "../support/serve-process.js";

const dir = mkdtempSync(join(tmpdir(), "platform-dual-stack-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Whether this machine can listen on the IPv6 loopback address (a container may have no IPv6). */
async function hasIpv6Loopback(): Promise<boolean> {
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => probe.once("error", reject).listen(0, "::1", resolve));
    return true;
  } catch {
    return false;
  } finally {
    probe.close();
  }
}

test("serve with HOST unset answers IPv4 and IPv6 clients on one port", async (t) => {
  const srv = await startServeProcess({ LOG_LEVEL: "info", PLATFORM_DATA_DIR: join(dir, "data") }, { unset: ["HOST"] });
  t.after(() => srv.stop());
  const started = await srv.logged((l) => l.listen !== undefined, "the start-up line");
  assert.equal(started.listen, `http://[::]:${srv.port}`, "the start-up line names [::]");

  const v4 = await fetch(`http://127.0.0.1:${srv.port}/healthz`);
  assert.equal(v4.status, 200);
  if (await hasIpv6Loopback()) {
    const v6 = await fetch(`http://[::1]:${srv.port}/healthz`);
    assert.equal(v6.status, 200, "an IPv6 client connects");
  } else {
    t.diagnostic("no IPv6 loopback on this machine: the IPv6 client was not tried");
  }

  const { code } = await srv.stop();
  assert.equal(code, 0, srv.output());
});

/** A stand-in for the fastify instance whose listen fails like a kernel without IPv6 for the hosts given. */
function appWithout(unavailable: string[]) {
  const hosts: string[] = [];
  const lines: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
  const log = (level: string) => (fields: Record<string, unknown>, msg: string) => lines.push({ level, msg, fields });
  const app = {
    log: { level: "info", info: log("info"), warn: log("warn") },
    server: { address: () => ({ port: 8080, address: "0.0.0.0", family: "IPv4" }) },
    async listen(opts: { host: string }) {
      hosts.push(opts.host);
      if (unavailable.includes(opts.host)) throw Object.assign(new Error(`listen EAFNOSUPPORT ${opts.host}`), { code: "EAFNOSUPPORT" });
    },
  };
  return { app: app as unknown as FastifyInstance, hosts, lines };
}

const store = { describe: () => ({ backend: "sqlite", location: "/srv/data/platform.db" }) } as unknown as Store;

test("without IPv6 in the kernel, the default falls back to 0.0.0.0 and says so", async () => {
  const { app, hosts, lines } = appWithout(["::"]);
  assert.equal(await listen(app, loadConfig({ PORT: "8080" }), store), 8080);
  assert.deepEqual(hosts, ["::", "0.0.0.0"]);
  assert.deepEqual(
    lines.filter((l) => l.level === "warn").map((l) => l.msg),
    ["IPv6 is not available here: listening on 0.0.0.0 (IPv4 only)"],
  );
  assert.equal(lines.find((l) => l.level === "info")?.fields.listen, "http://0.0.0.0:8080");
});

test("an explicit HOST is used as given: its failure is the operator's to see", async () => {
  const { app, hosts } = appWithout(["::1"]);
  await assert.rejects(listen(app, loadConfig({ PORT: "8080", HOST: "::1" }), store), { code: "EAFNOSUPPORT" });
  assert.deepEqual(hosts, ["::1"]);
});

test("HOST defaults to :: (dual stack)", () => {
  assert.equal(loadConfig({}).host, "::");
  assert.equal(loadConfig({ HOST: "0.0.0.0" }).host, "0.0.0.0");
});
