/**
 * `npm run bench:noisy`: what each attack of issue 21 costs everybody else.
 * The server runs as users run it (compiled, `platform-api serve`, SQLite,
 * logs at info to this script's pipe). One legitimate client in this process
 * calls REST GetGroup, gRPC GetGroup and /sts/exchange (a fresh ID token each
 * time, so every exchange verifies a signature) one after another, first
 * alone for BENCH_PHASE seconds, then for as long again while an attack runs
 * from another process (bench/attacks.ts, from 127.0.0.2). Each row gives the
 * client's p99 with the attack against its p99 alone, measured back to back,
 * the server's peak RSS during the attack against its peak alone, and the
 * share of a core the server used in each phase (what the attack made the
 * server do, as opposed to what the attacker's own process took from the
 * shared cores).
 * Goal: every ratio within 2×, RSS within quiet + 2 × the message limit.
 *
 * Environment: BENCH_PHASE seconds per phase (6), BENCH_ONLY=<attack name>.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { GetGroupRequestSchema, GroupsService } from "../gen/platformapi/iam/v2beta1/groups_pb.js";
import { mintAdminToken, ROOT, startServerProcess, stopServerProcess, type ServerProcess } from "../scripts/support/cli-server.js";
import { restCall, restCreateGroup } from "../scripts/support/groups-client.js";
import { cpuSeconds, residentKib } from "../scripts/support/server-watch.js";
import { LatencyLog } from "../scripts/support/soak-stats.js";
import { methodDefinition } from "../src/server/grpc/adapter.js";
import { OidcIssuer } from "../test/support/oidc-issuer.js";

const PHASE_MS = Number(process.env.BENCH_PHASE ?? 6) * 1000;
const ONLY = process.env.BENCH_ONLY;
/** The server's PLATFORM_MAX_MESSAGE_BYTES (its default). */
const MESSAGE_LIMIT = 4 * 1024 * 1024;
/** The API's own address in cli-server.ts: the audience of the ID tokens exchanged. */
const BASE_URL = "http://platform-api.scripts.invalid";
const ATTACKS = [
  "grpc-web-body",
  "reflection-unread",
  "reflection-cpu",
  "static-flood",
  "issuer-starve",
  "org-spam",
  "unknown-keys",
  "connection-pin",
] as const;
const CALLS = ["REST Get", "gRPC Get", "STS exchange"] as const;
/** A legitimate call that takes longer than this counts as failed (and its latency as this). */
const CALL_TIMEOUT_MS = 30_000;

interface Setup {
  server: ServerProcess;
  issuer: OidcIssuer;
  admin: string;
  groupUid: string;
  /** The legitimate workload identity, exchanged for with issuer's tokens. */
  workload: string;
  /** Options each attack needs (another tenant's identity, a no-role identity's token). */
  attackOptions: Record<string, Record<string, string>>;
}

async function setUp(dataDir: string): Promise<Setup> {
  const server = await startServerProcess(dataDir, { env: { PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true" } });
  const admin = await mintAdminToken(dataDir);
  const issuer = await OidcIssuer.start("noisy");
  const org = await restCreateGroup(server.url, admin, null, "neighbours");
  const group = await restCreateGroup(server.url, admin, org.uid, "team");
  const identity = async (parent: string, claimMatch: object) => {
    const res = await restCall(server.url, admin, "POST", `/iam/v2beta1/identities/${parent}`, { name: `id ${Math.random()}`, claimMatch });
    if (res.status !== 200) throw new Error(`identity: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.uid as string;
  };
  const workload = await identity(org.uid, { issuer: issuer.url, subject: "workload" });
  const spammer = await identity(org.uid, { issuer: issuer.url, subject: "spammer" });
  const hostileOrg = await restCreateGroup(server.url, admin, null, "hostile tenant");
  const hostile = await identity(hostileOrg.uid, { issuerPattern: "http://127\\.0\\.0\\.1:\\d+/.*", subject: "x" });
  const spamToken = await exchange(server.url, issuer.idToken({ sub: "spammer", aud: BASE_URL }), spammer);
  return {
    server,
    issuer,
    admin,
    groupUid: group.uid,
    workload,
    attackOptions: { "issuer-starve": { identity: hostile, audience: BASE_URL }, "org-spam": { token: spamToken } },
  };
}

/** /sts/exchange of an ID token for an API token of identity. */
async function exchange(url: string, idToken: string, identity: string): Promise<string> {
  const res = await fetch(`${url}/sts/exchange?aud=${encodeURIComponent(BASE_URL)}&identity=${identity}`, {
    headers: { authorization: `Bearer ${idToken}` },
  });
  const body = (await res.json()) as { token?: string };
  if (res.status !== 200 || body.token === undefined) throw new Error(`exchange: ${res.status} ${JSON.stringify(body)}`);
  return body.token;
}

/** The legitimate client: the three calls in turn for ms; latencies of successes, failures counted. */
async function legitimate(s: Setup, ms: number): Promise<{ log: LatencyLog; failures: Record<string, number> }> {
  const log = new LatencyLog();
  const failures: Record<string, number> = {};
  const Ctor = grpc.makeGenericClientConstructor({ getGroup: methodDefinition(GroupsService, GroupsService.method.getGroup) }, "Groups");
  const client = new Ctor(`127.0.0.1:${s.server.port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${s.admin}`);
  const calls: Record<(typeof CALLS)[number], () => Promise<unknown>> = {
    "REST Get": async () => {
      const res = await restCall(s.server.url, s.admin, "GET", `/iam/v2beta1/groups/${s.groupUid}`);
      if (res.status !== 200) throw new Error(String(res.status));
    },
    "gRPC Get": () =>
      new Promise((resolve, reject) =>
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (client as any).getGroup(
          create(GetGroupRequestSchema, { uid: s.groupUid }),
          md,
          { deadline: Date.now() + 60_000 },
          (err: unknown) => (err ? reject(err as Error) : resolve(undefined)),
        ),
      ),
    "STS exchange": () =>
      exchange(s.server.url, s.issuer.idToken({ sub: "workload", aud: BASE_URL, jti: String(Math.random()) }), s.workload),
  };
  const end = performance.now() + ms;
  while (performance.now() < end) {
    for (const name of CALLS) {
      const started = performance.now();
      try {
        await Promise.race([calls[name](), new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), CALL_TIMEOUT_MS))]);
        log.add(name, performance.now() - started);
      } catch {
        failures[name] = (failures[name] ?? 0) + 1;
      }
    }
  }
  client.close();
  return { log, failures };
}

/** Peak RSS (KiB) of pid while work runs, sampled every 100 ms, and the share of one core pid used meanwhile. */
async function peakRss<T>(pid: number, work: Promise<T>): Promise<{ result: T; peakKib: number; cpuShare: number }> {
  let peakKib = residentKib(pid) ?? 0;
  const timer = setInterval(() => (peakKib = Math.max(peakKib, residentKib(pid) ?? 0)), 100);
  const started = performance.now();
  const cpuBefore = cpuSeconds(pid) ?? 0;
  try {
    const result = await work;
    return { result, peakKib, cpuShare: ((cpuSeconds(pid) ?? 0) - cpuBefore) / ((performance.now() - started) / 1000) };
  } finally {
    clearInterval(timer);
  }
}

/** Starts an attack in its own process and resolves once it says it is under way. */
async function startAttack(name: string, port: number, options: Record<string, string> = {}) {
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bench/attacks.ts"), name, String(port), JSON.stringify(options)], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout });
  await new Promise<void>((resolve, reject) => {
    lines.on("line", (l) => l === "READY" && resolve());
    child.once("exit", (code) => reject(new Error(`attack ${name} exited ${code}`)));
  });
  return {
    async stop() {
      child.kill("SIGKILL");
      if (child.exitCode === null && child.signalCode === null) await once(child, "exit");
    },
  };
}

const fmt = (ms: number) => `${ms.toFixed(1)} ms`;

/** One attack against a fresh server: the legitimate client alone, then under the attack; one table row per call. */
async function measure(name: (typeof ATTACKS)[number]): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "platform-noisy-"));
  const s = await setUp(dataDir);
  const pid = s.server.pid;
  try {
    await legitimate(s, 1000); // warm-up: caches, JIT, connections
    const quiet = await peakRss(pid, legitimate(s, PHASE_MS));
    const attack = await startAttack(name, s.server.port, s.attackOptions[name]);
    const loud = await peakRss(pid, legitimate(s, PHASE_MS)).finally(() => attack.stop());
    const growth = (loud.peakKib - quiet.peakKib) / 1024;
    const over = growth * 1024 * 1024 > 2 * MESSAGE_LIMIT ? " ✗" : "";
    const rss = `${(quiet.peakKib / 1024).toFixed(0)} → ${(loud.peakKib / 1024).toFixed(0)} MiB (${growth >= 0 ? "+" : ""}${growth.toFixed(0)}${over})`;
    const cpu = `${(quiet.cpuShare * 100).toFixed(0)}% → ${(loud.cpuShare * 100).toFixed(0)}%`;
    for (const call of CALLS) {
      const q = quiet.result.log.summary((k) => k === call);
      const l = loud.result.log.summary((k) => k === call);
      const ratio = q.p99 > 0 ? l.p99 / q.p99 : Infinity;
      const failed = `${loud.result.failures[call] ?? 0}/${l.calls + (loud.result.failures[call] ?? 0)}`;
      const mark = ratio > 2 ? " ✗" : "";
      console.log(
        `| ${name} | ${call} | ${fmt(q.p99)} | ${fmt(l.p99)} | ${ratio.toFixed(2)}×${mark} | ${failed} | ${call === CALLS[0] ? rss : ""} | ${call === CALLS[0] ? cpu : ""} |`,
      );
    }
  } finally {
    await stopServerProcess(s.server).catch((err: unknown) => console.error(`${name}: ${String(err).split("\n")[0]}`));
    await s.issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const seconds = PHASE_MS / 1000;
console.log(
  `noisy neighbour: a fresh server per attack, ${seconds} s quiet then ${seconds} s attacked; goal p99 ≤ 2× quiet, RSS ≤ quiet + 8 MiB`,
);
console.log(
  "| attack | call | p99 quiet | p99 attacked | ratio | failed attacked | peak RSS quiet → attacked | server CPU quiet → attacked |",
);
console.log("|---|---|---:|---:|---:|---:|---|---|");
for (const name of ATTACKS) if (ONLY === undefined || name === ONLY) await measure(name);
