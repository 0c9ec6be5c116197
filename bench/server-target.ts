/**
 * The API server as `npm run bench` measures it: seeded, then run as users
 * run it (`npm start`), in a process of its own.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, openSync } from "node:fs";
import * as Net from "node:net";
import { join } from "node:path";
import { adminSubject } from "../src/auth/authenticator.js";
import { TokenService } from "../src/auth/tokens.js";
import { openStore } from "../src/store/open.js";

/** The bench servers keep /metrics private as a deployment should; okCount reads it with this token. */
const BENCH_METRICS_TOKEN = "bench-metrics-token";

/** A running server: its process, port and the file its stdout (its log) goes to. */
export interface ServerTarget {
  child: ChildProcess;
  port: number;
  logFile: string;
}

/**
 * `platform-api serve` as users run it (`npm start`): the compiled bin under
 * plain node, LOG_LEVEL=logLevel, stdout appended to logFile; on PostgreSQL
 * with `workers` processes when databaseUrl is set, else SQLite in dataDir.
 * `profile` are node options to preload (the CPU profiler). Resolves once
 * /readyz answers 200.
 */
export async function startServer(opts: {
  dataDir: string;
  databaseUrl: string;
  workers: number;
  logLevel: string;
  logFile: string;
  profile: string[];
  /** The checkout whose compiled bin to run (default: this one). */
  root?: string;
}): Promise<ServerTarget> {
  const probe = Net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
  const env = {
    ...process.env,
    PORT: String(port),
    HOST: "127.0.0.1",
    PLATFORM_DATABASE_URL: opts.databaseUrl,
    PLATFORM_DATA_DIR: opts.dataDir,
    PLATFORM_WORKERS: String(opts.workers),
    PLATFORM_BASE_URL: "http://bench.local",
    PLATFORM_AUTH_URL: "http://bench.local",
    PLATFORM_METRICS_TOKEN: BENCH_METRICS_TOKEN,
    LOG_LEVEL: opts.logLevel,
  };
  const stdout = openSync(opts.logFile, "a");
  const child = spawn(
    process.execPath,
    [...opts.profile, join(opts.root ?? join(import.meta.dirname, ".."), "bin", "platform-api.js"), "serve"],
    {
      env,
      stdio: ["ignore", stdout, "inherit"],
    },
  );
  closeSync(stdout);
  for (let i = 0; i < 300 && child.exitCode === null; i++) {
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) return { child, port, logFile: opts.logFile };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGKILL");
  throw new Error(`the server (LOG_LEVEL=${opts.logLevel}) did not become ready; its log: ${opts.logFile}`);
}

/** Stops a server as an operator would (SIGTERM) and waits for it to exit. */
export async function stopServer(server: ServerTarget): Promise<void> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  const exited = new Promise((r) => server.child.once("exit", r));
  server.child.kill("SIGTERM");
  await exited;
}

/** platform_requests_total of OK GetGroup calls over `protocol`, from the server's /metrics. */
export async function okCount(port: number, protocol: string): Promise<number> {
  const text = await (
    await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { authorization: `Bearer ${BENCH_METRICS_TOKEN}` } })
  ).text();
  const line = text
    .split("\n")
    .find(
      (l) =>
        l.startsWith("platform_requests_total{") &&
        l.includes('method="GetGroup"') &&
        l.includes(`protocol="${protocol}"`) &&
        l.includes('code="ok"'),
    );
  return line ? Number(line.split(" ").pop()) : 0;
}

/** Seeds `groups` groups: organizations of 100 with folders below, in one transaction; returns an admin token. */
export async function seed(dataDir: string, databaseUrl: string, groups: number): Promise<{ uid: string; orgUid: string; token: string }> {
  const store = await openStore({ dataDir, databaseUrl });
  const tokens = await TokenService.open(store.keys, { issuer: "http://bench.local", audience: "http://bench.local" });
  const token = (await tokens.mint(await adminSubject(store.keys))).token;
  const now = Date.now();
  let first = "";
  let org = "";
  await store.transaction(async (tx) => {
    for (let i = 0; i < groups; i++) {
      const isOrg = i % 100 === 0;
      const uid = isOrg ? randomBytes(20).toString("hex") : `${org}/${randomBytes(8).toString("hex")}`;
      if (isOrg) org = uid;
      first ||= uid;
      await tx.groups.create({
        uid,
        parentUid: isOrg ? null : org,
        name: `group ${i}`,
        description: "seeded for the benchmark",
        verified: false,
        resourceLimits: {},
        createTime: now + i,
        updateTime: now + i,
      });
    }
  });
  await store.close();
  return { uid: first, orgUid: first, token };
}
