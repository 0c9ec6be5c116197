/**
 * synchronous=FULL, counted (one fsync per committed group of writes, none skipped).
 *
 * We cannot cut the power, so we count the syncs instead. The real
 * `platform-api serve` runs under `strace -f -e trace=fsync,fdatasync`;
 * the script makes N group creates one after the other over REST, then N
 * reads of them, and counts the sync calls made between the first request
 * and the last answer of each phase. With synchronous=FULL every commit
 * syncs the WAL, so creates show at least one sync each; reads commit
 * nothing and should show about none.
 *
 *   npx tsx scripts/fsync-per-commit.ts [--creates 200] [--reads 200]
 *
 * Exits 1 when creates average under one sync each, 2 when strace is missing
 * or cannot trace here.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { mintAdminToken, startServerProcess, stopServerProcess, type ServerProcess } from "./support/cli-server.js";
import { restCall, restCreateGroup } from "./support/groups-client.js";

const { values: args } = parseArgs({ options: { creates: { type: "string" }, reads: { type: "string" } } });
const creates = positive("creates", args.creates ?? "200");
const reads = positive("reads", args.reads ?? "200");

function positive(name: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} ${raw}: must be a positive integer`);
    process.exit(2);
  }
  return n;
}

/** Why strace cannot be used here, or undefined when it can trace a child. */
function straceUnavailable(): string | undefined {
  const probe = spawnSync("strace", ["-f", "-o", "/dev/null", "true"], { encoding: "utf8" });
  if (probe.error) return "strace is not installed; install it with: apt-get install -y strace";
  if (probe.status !== 0) return `strace cannot trace here (exit ${probe.status}): ${probe.stderr.trim()}`;
  return undefined;
}

/** Wall-clock milliseconds with sub-millisecond precision, comparable with strace -ttt. */
const nowMs = () => performance.timeOrigin + performance.now();

/** Runs phase and returns the wall-clock window it took. */
async function timed(phase: () => Promise<void>): Promise<[number, number]> {
  const start = nowMs();
  await phase();
  return [start, nowMs()];
}

/** The start times (ms) of the fsync and fdatasync calls in an `strace -f -ttt` log, by call. */
function syncCalls(log: string): { at: number; call: string }[] {
  const calls: { at: number; call: string }[] = [];
  for (const line of log.split("\n")) {
    // "<pid> <seconds.micros> fdatasync(12) = 0", or "... fdatasync(12 <unfinished ...>"
    const m = /^\d+\s+(\d+\.\d+)\s+(fsync|fdatasync)\(/.exec(line);
    if (m) calls.push({ at: Number(m[1]) * 1000, call: m[2]! });
  }
  return calls;
}

async function main(): Promise<number> {
  const unavailable = straceUnavailable();
  if (unavailable) {
    console.error(unavailable);
    return 2;
  }
  const dataDir = mkdtempSync(join(tmpdir(), "platform-fsync-"));
  const trace = join(dataDir, "strace.log");
  try {
    // The server creates the database and the signing key at start, before either measured window.
    const server: ServerProcess = await startServerProcess(dataDir, {
      wrapper: ["strace", "-f", "-ttt", "-e", "trace=fsync,fdatasync", "-o", trace],
    });
    const token = await mintAdminToken(dataDir);
    // A first write outside the windows: the WAL file is created on it.
    const org = await restCreateGroup(server.url, token, null, "fsync org");
    const uids: string[] = [];
    const createWindow = await timed(async () => {
      for (let i = 0; i < creates; i++) uids.push((await restCreateGroup(server.url, token, org.uid, `fsync write ${i}`)).uid);
    });
    const readWindow = await timed(async () => {
      for (let i = 0; i < reads; i++) {
        const res = await restCall(server.url, token, "GET", `/iam/v2beta1/groups/${uids[i % uids.length]}`);
        if (res.status !== 200) throw new Error(`read answered ${res.status}`);
      }
    });
    await stopServerProcess(server);

    const calls = syncCalls(readFileSync(trace, "utf8"));
    const within = ([from, to]: [number, number]) => calls.filter((c) => c.at >= from && c.at <= to);
    const duringCreates = within(createWindow);
    const duringReads = within(readWindow);
    const perCommit = duringCreates.length / creates;
    const perRead = duringReads.length / reads;
    const byCall = (list: typeof calls) =>
      ["fsync", "fdatasync"].map((name) => `${name} ${list.filter((c) => c.call === name).length}`).join(", ");
    console.log(`creates: ${creates} sequential REST creates, ${duringCreates.length} syncs (${byCall(duringCreates)})`);
    console.log(`reads: ${reads} sequential REST gets, ${duringReads.length} syncs (${byCall(duringReads)})`);
    console.log(`whole run (start-up, warm-up and shutdown included): ${calls.length} syncs (${byCall(calls)})`);
    console.log(`fsyncs per commit: ${perCommit.toFixed(2)} (${creates} creates), reads: ${perRead.toFixed(2)} per request`);
    if (perCommit < 1) {
      console.log("FAILED: fewer than one sync per commit; synchronous=FULL is not in effect");
      return 1;
    }
    return 0;
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
