/**
 * Soak under mixed load, then SIGTERM under that load (issue 7, "Load").
 *
 * Runs the real `platform-api serve` as a child process over a fresh data
 * directory, seeds a few organizations with folders, and runs --concurrency
 * workers for --seconds: half call over REST (the global fetch, keep-alive
 * connections of undici's default agent), half over gRPC (@grpc/grpc-js, one
 * HTTP/2 connection). Each call is one step of the mix: 70% reads (GetGroup,
 * ListGroups page walks that follow nextPageToken, Validate = GET
 * /auth/v1/ok), 30% writes (CreateGroup, UpdateGroup, DeleteGroup of the
 * worker's own groups). Every call's latency and outcome is recorded; the
 * server's VmRSS is read every second, and in the middle of the run and at
 * its end the server's inspector (started with --inspect on loopback) runs a
 * full garbage collection before its live heap and RSS are read.
 *
 * At the end of --seconds, with the workers still running at full rate, the
 * server gets SIGTERM. Every call settled after the signal (the ones in
 * flight at the signal and the ones sent after it) must either succeed or be
 * refused before the server ran it: connection refused, 503 with
 * `Connection: close`, or gRPC UNAVAILABLE for a call absent from the
 * server's access log. Anything else is a reset: a connection or stream
 * broken under a sent request, or a refusal of a call the server did run.
 * The server must then exit 0.
 *
 *   npm run soak -- [--seconds 180] [--concurrency 32] [--quick]
 *
 * --quick is --seconds 30 --concurrency 8: long enough for the caches to fill
 * before the middle of the run. Exits 1 on any error, any reset, an exit
 * other than 0, or memory growth beyond the bounds below.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { mintAdminToken, startServerProcess, type ServerProcess } from "./support/cli-server.js";
import { restCreateGroup } from "./support/groups-client.js";
import { connectHeapProbe, type HeapProbe } from "./support/heap-probe.js";
import { cpuSeconds, residentKib, sampleRss, watchAccessLog, type RssSample } from "./support/server-watch.js";
import { CallFailedError, grpcSoakApi, restSoakApi, type Protocol, type SoakApi } from "./support/soak-api.js";
import { count, FailureTally, LatencyLog, mib, ms } from "./support/soak-stats.js";

const ORGANIZATIONS = 4;
const FOLDERS_PER_ORGANIZATION = 25;
const PAGE_SIZE = 20;
/** A page walk starts over after this many pages. */
const WALK_PAGES = 5;
/** Groups a worker keeps of its own: below the first it does not delete, at the second it does not create. */
const OWN_GROUPS = [5, 40] as const;
/**
 * Memory is read twice, each time right after a full garbage collection: in
 * the middle of the run and at its end. Growth before the middle is warm-up
 * (the caches fill to their budgets, V8 sizes its heap to the allocation rate
 * and may let the old generation grow to several times the live data, so raw
 * RSS says little); a leak keeps growing in the second half.
 */
const CHECKPOINT_SHARE = 0.5;
/** Growth from the middle to the end fails the soak beyond both bounds: the live JS heap, and RSS for native memory. */
const GROWTH_LIMITS = { heap: { percent: 20, mib: 12 }, rss: { percent: 50, mib: 64 } } as const;
/** The access log is read from this long before the signal, to cover every call in flight at it. */
const LOG_LEAD_MS = 5_000;

type Op = "GetGroup" | "ListGroups" | "Validate" | "CreateGroup" | "UpdateGroup" | "DeleteGroup";
const READS: ReadonlySet<Op> = new Set(["GetGroup", "ListGroups", "Validate"]);
/** Weights of each step; each step is exactly one call. */
const MIX: readonly [Op, number][] = [
  ["GetGroup", 30],
  ["ListGroups", 25],
  ["Validate", 15],
  ["CreateGroup", 10],
  ["UpdateGroup", 10],
  ["DeleteGroup", 10],
];

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string" },
    concurrency: { type: "string" },
    quick: { type: "boolean", default: false },
  },
});
const seconds = positive("seconds", args.seconds ?? (args.quick ? "30" : "180"));
const concurrency = positive("concurrency", args.concurrency ?? (args.quick ? "8" : "32"));
/** Workers 0 … restWorkers-1 call over REST, the others over gRPC. */
const restWorkers = Math.ceil(concurrency / 2);

function positive(name: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} ${raw}: must be a positive integer`);
    process.exit(2);
  }
  return n;
}

/** A call settled after the signal, judged once the server's log is complete. */
interface DrainCall {
  protocol: Protocol;
  op: Op;
  reqId: string;
  sentBeforeSignal: boolean;
  failure?: CallFailedError;
}

/** What the workers share. */
interface Run {
  /** performance.now() when SIGTERM was sent. */
  signalAt?: number;
  stopped: boolean;
  latency: LatencyLog;
  failures: FailureTally;
  calls: Record<Protocol, number>;
  reads: number;
  inFlight: Record<Protocol, number>;
  drain: DrainCall[];
}

/** The groups every worker reads: organizations and their folders, never deleted. */
interface Seeded {
  organizations: string[];
  all: string[];
}

const pick = <T>(list: readonly T[]): T => list[Math.floor(Math.random() * list.length)]!;

/** The next step's operation, kept to operations the worker's own groups allow. */
function nextOp(own: number): Op {
  let r = Math.random() * MIX.reduce((sum, [, w]) => sum + w, 0);
  let op: Op = MIX[0]![0];
  for (const [candidate, weight] of MIX) {
    op = candidate;
    if ((r -= weight) < 0) break;
  }
  if (op === "DeleteGroup" && own < OWN_GROUPS[0]) return "CreateGroup";
  if (op === "UpdateGroup" && own === 0) return "CreateGroup";
  if (op === "CreateGroup" && own >= OWN_GROUPS[1]) return "DeleteGroup";
  return op;
}

/** One worker: one call at a time until the run stops. */
async function worker(w: number, api: SoakApi, seeded: Seeded, run: Run): Promise<void> {
  const own: string[] = [];
  let walk = { root: "", token: "", pages: 0 };
  for (let n = 0; !run.stopped; n++) {
    const op = nextOp(own.length);
    const reqId = `soak-${w}-${n}`;
    const sentBeforeSignal = run.signalAt === undefined;
    const started = performance.now();
    let failure: CallFailedError | undefined;
    run.inFlight[api.protocol]++;
    try {
      switch (op) {
        case "GetGroup":
          await api.getGroup(reqId, own.length > 0 && Math.random() < 0.5 ? pick(own) : pick(seeded.all));
          break;
        case "ListGroups": {
          if (walk.token === "" || walk.pages >= WALK_PAGES) walk = { root: pick(seeded.organizations), token: "", pages: 0 };
          const page = await api.listGroups(reqId, walk.root, PAGE_SIZE, walk.token);
          // Seeded folders alone fill the first page of every organization.
          if (walk.pages === 0 && page.uids.length !== PAGE_SIZE)
            throw new CallFailedError("answer", `first page of ${walk.root} has ${page.uids.length} groups`);
          walk = { ...walk, token: page.nextPageToken, pages: walk.pages + 1 };
          break;
        }
        case "Validate":
          await api.whoAmI(reqId);
          break;
        case "CreateGroup":
          own.push(await api.createGroup(reqId, pick(seeded.all), `soak w${w} n${n}`));
          break;
        case "UpdateGroup":
          await api.updateGroup(reqId, pick(own), `soak update ${n}`);
          break;
        case "DeleteGroup": {
          const i = Math.floor(Math.random() * own.length);
          await api.deleteGroup(reqId, own[i]!);
          own.splice(i, 1);
          break;
        }
      }
    } catch (err) {
      failure = err instanceof CallFailedError ? err : new CallFailedError("answer", String(err));
    }
    run.inFlight[api.protocol]--;
    if (run.signalAt !== undefined) {
      run.drain.push({ protocol: api.protocol, op, reqId, sentBeforeSignal, failure });
      // Refusals come back at once; do not spin on them while the server goes away.
      if (failure) await sleep(5);
      continue;
    }
    run.calls[api.protocol]++;
    if (READS.has(op)) run.reads++;
    if (failure) run.failures.add(`${api.protocol} ${op}: ${failure.kind}: ${failure.message}`);
    else run.latency.add(`${api.protocol} ${op}`, performance.now() - started);
  }
}

/** Organizations with folders, created over REST before the workers start. */
async function seed(url: string, token: string): Promise<Seeded> {
  const seeded: Seeded = { organizations: [], all: [] };
  await Promise.all(
    Array.from({ length: ORGANIZATIONS }, async (_, o) => {
      const org = await restCreateGroup(url, token, null, `soak org ${o}`);
      seeded.organizations.push(org.uid);
      seeded.all.push(org.uid);
      for (let f = 0; f < FOLDERS_PER_ORGANIZATION; f++)
        seeded.all.push((await restCreateGroup(url, token, org.uid, `soak folder ${f}`)).uid);
    }),
  );
  return seeded;
}

/** How each call settled after the signal went, by when it was sent. */
function judgeDrain(run: Run, ranOnServer: ReadonlySet<string>) {
  const tally = () => ({ calls: 0, ok: 0, refused: 0, resets: 0, errors: 0 });
  const before = tally();
  const after = tally();
  const refusals = new FailureTally();
  const resets: string[] = [];
  const errors: string[] = [];
  for (const c of run.drain) {
    const t = c.sentBeforeSignal ? before : after;
    t.calls++;
    const f = c.failure;
    if (!f) t.ok++;
    else if (f.kind === "answer") {
      t.errors++;
      errors.push(`${c.protocol} ${c.op} ${c.reqId}: ${f.message}`);
    } else if (f.kind === "refused" && !ranOnServer.has(c.reqId)) {
      t.refused++;
      refusals.add(`${c.protocol}: ${f.message.replace(/^.*?: /, "")}`);
    } else {
      t.resets++;
      const when = c.sentBeforeSignal ? "in flight at the signal" : "sent after the signal";
      resets.push(
        `${c.protocol} ${c.op} ${c.reqId} (${when}, ${ranOnServer.has(c.reqId) ? "ran on the server" : "absent from the server's log"}): ${f.kind}: ${f.message}`,
      );
    }
  }
  return { before, after, refusals, resets, errors };
}

/** RSS samples for the trend: the median of each tenth of the run, and the peak. */
function rssTrend(samples: readonly RssSample[], soakMs: number) {
  const median = (from: number, to: number): number | undefined => {
    const kib = samples.filter((s) => s.atMs >= from * soakMs && s.atMs < to * soakMs).map((s) => s.kib);
    kib.sort((a, b) => a - b);
    return kib.length === 0 ? undefined : kib[Math.floor((kib.length - 1) / 2)];
  };
  const tenths = Array.from({ length: 10 }, (_, i) => median(i / 10, (i + 1) / 10));
  return { tenths, peak: Math.max(...samples.map((s) => s.kib)) };
}

/** One memory figure from the middle of the run to its end, judged against its limit. */
function growth(midKib: number, endKib: number, limit: { percent: number; mib: number }) {
  const kib = endKib - midKib;
  const percent = (kib / midKib) * 100;
  const exceeded = percent > limit.percent && kib / 1024 > limit.mib;
  const text = `${mib(midKib)} → ${mib(endKib)} (${kib >= 0 ? "+" : ""}${mib(kib)}, ${percent.toFixed(1)}%)`;
  return { text, exceeded, limit: `fails beyond +${limit.percent}% and +${limit.mib} MiB` };
}

function machine(): string {
  const cpu = os.cpus()[0]?.model.trim() ?? "unknown CPU";
  return `${os.availableParallelism()} cores (${cpu}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}, Node ${process.version}; client and server share the cores`;
}

/** The server's memory right after a full GC. */
interface MemoryReading {
  heapKib: number;
  rssKib: number;
}

/** Collects garbage in the server, then reads its live heap and its RSS. */
async function readMemory(probe: HeapProbe, pid: number): Promise<MemoryReading> {
  const heapKib = (await probe.liveBytes()) / 1024;
  return { heapKib, rssKib: residentKib(pid) ?? Number.NaN };
}

/** What the soak and the drain measured, before judgement. */
interface Outcome {
  run: Run;
  soakMs: number;
  inFlightAtSignal: Record<Protocol, number>;
  /** Percent of one core over the soak. */
  cpu: { server: number; client: number };
  rss: RssSample[];
  /** Right after a full GC, in the middle of the run and at its end. */
  memory: { mid: MemoryReading; end: MemoryReading };
  exit: { code: number | null; signal: NodeJS.Signals | null };
  exitMs: number;
  /** Request ids in the server's access log from shortly before the signal to its exit. */
  ranOnServer: Set<string>;
}

/** Runs the workers for --seconds, then sends SIGTERM under full load and waits for the server to exit. */
async function soakThenSignal(server: ServerProcess, token: string, seeded: Seeded, probe: HeapProbe): Promise<Outcome> {
  const accessLog = watchAccessLog(server);
  const apis = { rest: restSoakApi(server.url, token), grpc: grpcSoakApi(server.port, token) };
  const run: Run = {
    stopped: false,
    latency: new LatencyLog(),
    failures: new FailureTally(),
    calls: { rest: 0, grpc: 0 },
    reads: 0,
    inFlight: { rest: 0, grpc: 0 },
    drain: [],
  };
  const rss = sampleRss(server.pid);
  const serverCpu = cpuSeconds(server.pid) ?? 0;
  const clientCpu = process.cpuUsage();
  const started = performance.now();
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w, w < restWorkers ? apis.rest : apis.grpc, seeded, run));
  const progress = setInterval(
    () => {
      const at = Math.round((performance.now() - started) / 1000);
      const last = rss.samples[rss.samples.length - 1];
      console.log(
        `  ${at} s: ${count(run.calls.rest + run.calls.grpc)} calls, ${run.failures.total} errors, RSS ${last ? mib(last.kib) : "?"}`,
      );
    },
    Math.max(5, Math.round(seconds / 6)) * 1000,
  );

  const leadMs = Math.min(LOG_LEAD_MS, (seconds * 1000) / 2);
  const memoryMid = sleep(seconds * 1000 * CHECKPOINT_SHARE).then(() => readMemory(probe, server.pid));
  await sleep(seconds * 1000 - leadMs);
  accessLog.start();
  await sleep(leadMs);
  clearInterval(progress);
  rss.stop();
  const soakMs = performance.now() - started;
  const memory = { mid: await memoryMid, end: await readMemory(probe, server.pid) };
  await probe.close();
  const inFlightAtSignal = { ...run.inFlight };
  const clientUsed = process.cpuUsage(clientCpu);
  const cpu = {
    server: (((cpuSeconds(server.pid) ?? serverCpu) - serverCpu) / (soakMs / 1000)) * 100,
    client: ((clientUsed.user + clientUsed.system) / 1000 / soakMs) * 100,
  };

  run.signalAt = performance.now();
  process.kill(server.pid, "SIGTERM");
  const exit = await server.exited;
  const exitMs = performance.now() - run.signalAt;
  run.stopped = true;
  await Promise.all(workers);
  apis.grpc.close();
  await Promise.race([accessLog.ended, sleep(10_000)]);
  return { run, soakMs, inFlightAtSignal, cpu, rss: rss.samples, memory, exit, exitMs, ranOnServer: accessLog.ran };
}

/** Prints the summary and its figure line; returns the problems found. */
function report(o: Outcome, server: ServerProcess): string[] {
  const { run, soakMs, exit } = o;
  const drain = judgeDrain(run, o.ranOnServer);
  const trend = rssTrend(o.rss, soakMs);
  const heap = growth(o.memory.mid.heapKib, o.memory.end.heapKib, GROWTH_LIMITS.heap);
  const rss = growth(o.memory.mid.rssKib, o.memory.end.rssKib, GROWTH_LIMITS.rss);
  const total = run.calls.rest + run.calls.grpc;
  const errors = run.failures.total + drain.before.errors + drain.after.errors;
  const resets = drain.before.resets + drain.after.resets;
  const perSecond = (n: number) => count(Math.round(n / (soakMs / 1000)));
  const percentOf = (n: number) => `${((n / total) * 100).toFixed(1)}%`;
  const rs = run.latency.summary((k) => k.startsWith("rest "));
  const gs = run.latency.summary((k) => k.startsWith("grpc "));
  const inFlight = o.inFlightAtSignal.rest + o.inFlightAtSignal.grpc;
  const exitStatus = exit.signal ?? exit.code;

  console.log("");
  console.log(`duration: ${(soakMs / 1000).toFixed(1)} s, ${concurrency} workers`);
  console.log(
    `calls: ${count(total)} (REST ${count(run.calls.rest)}, gRPC ${count(run.calls.grpc)}), reads ${percentOf(run.reads)}, writes ${percentOf(total - run.reads)}`,
  );
  console.log(`req/s: REST ${perSecond(run.calls.rest)}, gRPC ${perSecond(run.calls.grpc)}, total ${perSecond(total)}`);
  for (const [label, s] of [
    ["REST", rs],
    ["gRPC", gs],
    ["all", run.latency.summary()],
  ] as const) {
    console.log(`latency ${label}: p50 ${ms(s.p50)}, p99 ${ms(s.p99)}, max ${ms(s.max)}`);
  }
  for (const key of run.latency.keys()) {
    const s = run.latency.summary((k) => k === key);
    console.log(
      `  ${key.padEnd(17)} ${count(s.calls).padStart(9)} calls  p50 ${ms(s.p50).padStart(8)}  p99 ${ms(s.p99).padStart(8)}  max ${ms(s.max).padStart(8)}`,
    );
  }
  console.log(`memory after a full GC, mid-run → end: live heap ${heap.text}, ${heap.limit}; RSS ${rss.text}, ${rss.limit}`);
  console.log(
    `rss by tenth of the run (MiB): ${trend.tenths.map((kib) => (kib === undefined ? "-" : (kib / 1024).toFixed(0))).join(" ")}; peak ${mib(trend.peak)}`,
  );
  console.log(
    `cpu: server ${o.cpu.server.toFixed(0)}% of one core, soak client ${o.cpu.client.toFixed(0)}% of one core (${os.availableParallelism()} cores)`,
  );
  const describe = (t: typeof drain.before) =>
    `${count(t.calls)} calls, ${count(t.ok)} completed, ${count(t.refused)} refused cleanly, ${t.resets} reset, ${t.errors} failed otherwise`;
  console.log(`drain: SIGTERM with ${inFlight} calls in flight (${o.inFlightAtSignal.rest} REST, ${o.inFlightAtSignal.grpc} gRPC)`);
  console.log(`  in flight at the signal: ${describe(drain.before)}`);
  console.log(`  sent after the signal: ${describe(drain.after)}`);
  for (const line of drain.refusals.top(6)) console.log(`  refused: ${line}`);
  console.log(`server exit: ${exitStatus}, ${Math.round(o.exitMs)} ms after SIGTERM`);
  console.log(`errors: ${errors}`);
  console.log(`resets: ${resets}`);
  console.log(
    `figure: ${seconds} s soak, ${concurrency} workers, ${count(total)} calls (REST ${perSecond(run.calls.rest)} req/s p99 ${ms(rs.p99)}, ` +
      `gRPC ${perSecond(run.calls.grpc)} req/s p99 ${ms(gs.p99)}), ${errors} errors, live heap ${heap.text}, RSS ${rss.text} (mid-run → end, after a full GC), ` +
      `SIGTERM with ${inFlight} in flight: ${resets} resets, exit ${exitStatus}`,
  );

  return [
    ...run.failures.top(10).map((f) => `error: ${f}`),
    ...drain.errors.slice(0, 10).map((e) => `error after the signal: ${e}`),
    ...drain.resets.slice(0, 20).map((r) => `reset: ${r}`),
    ...(exit.code === 0 ? [] : [`the server exited ${exitStatus} on SIGTERM:\n${server.logTail()}`]),
    ...(heap.exceeded ? [`the live heap grew: ${heap.text}`] : []),
    ...(rss.exceeded ? [`RSS grew: ${rss.text}`] : []),
    ...(inFlight === 0 ? ["no call was in flight at the signal: the drain was not exercised"] : []),
  ];
}

async function main(): Promise<number> {
  const dataDir = mkdtempSync(join(os.tmpdir(), "platform-soak-"));
  // No drain: the soak's clients ignore /readyz and keep calling (a balancer would stop sending). Its answers would say
  // Connection: close, and every call would open a new connection, some landing in the listener's backlog as it
  // closes (reset by the kernel). Without one, calls on open connections are answered SHUTTING_DOWN, new ones refused.
  // A small answer cache, full long before mid-run: the heap's growth from there is then a leak, not the cache
  // filling towards its 16 MiB default (a --quick run with creates throughout never fills that one).
  const server = await startServerProcess(dataDir, { inspect: true, env: { PLATFORM_DRAIN_MS: "0", PLATFORM_CACHE_BYTES: "1048576" } });
  if (server.inspectorUrl === undefined) throw new Error(`the server printed no inspector URL:\n${server.logTail()}`);
  const probe = await connectHeapProbe(server.inspectorUrl);
  const token = await mintAdminToken(dataDir);
  const seeded = await seed(server.url, token);
  console.log(
    `soak: ${seconds} s, ${concurrency} workers (${restWorkers} REST, ${concurrency - restWorkers} gRPC), server pid ${server.pid}, data in ${dataDir}`,
  );
  console.log(`machine: ${machine()}`);
  const problems = report(await soakThenSignal(server, token, seeded, probe), server);
  if (problems.length > 0) {
    console.log(`\n${problems.length} problem(s):\n  ${problems.join("\n  ")}`);
    console.log(`data kept in ${dataDir}`);
  } else rmSync(dataDir, { recursive: true, force: true });
  return problems.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
