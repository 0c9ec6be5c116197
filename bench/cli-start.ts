/**
 * How long the `platform-api` command takes, whole process, for the commands
 * that must not load the server (issue 24): `--version`, `--help`, `keygen`,
 * `sign-jwt`, `admin-token` (on a SQLite data directory a server made), and
 * `serve --help`. Each is run as users run it, `node bin/platform-api.js
 * <args>` (compiled: npm run build first), in rounds that alternate every
 * command with a bare `node -e 0`, the yardstick: a slow spell of a shared
 * machine moves both sides of a ratio alike. Prints per command the median
 * wall time, the median CPU (user + system of the finished child, from
 * /proc/self/stat's cutime and cstime: 10 ms ticks) and the median ratio of
 * its wall time to bare node's in the same round.
 *
 *   npx tsx bench/cli-start.ts
 *   BENCH_COMPARE=<another built checkout> npx tsx bench/cli-start.ts   # before and after, same rounds
 *   BENCH_ROUNDS=21 npx tsx bench/cli-start.ts                          # default 11
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 11);
const ROOT = resolve(fileURLToPath(new URL("..", import.meta.url)));
const COMPARE = process.env.BENCH_COMPARE === undefined ? undefined : resolve(process.env.BENCH_COMPARE);
const work = mkdtempSync(join(tmpdir(), "platform-cli-bench-"));
const SIGN = ["--issuer", "https://ci.example", "--subject", "bench", "--audience", "http://localhost:8080"];

/** One command line to time: its label and its arguments in round n. */
interface Case {
  label: string;
  args: (checkout: Checkout, n: number) => string[];
}

/** A built checkout whose command is timed, and the data directory its own server made. */
interface Checkout {
  name: string;
  root: string;
  dataDir: string;
  key: string;
}

const CASES: Case[] = [
  { label: "--version", args: () => ["--version"] },
  { label: "--help", args: () => ["--help"] },
  { label: "keygen --out <new file>", args: (c, n) => ["keygen", "--out", join(work, `${c.name}-${n}.jwk`)] },
  { label: "sign-jwt --key …", args: (c) => ["sign-jwt", "--key", c.key, ...SIGN] },
  { label: "admin-token (SQLite)", args: () => ["admin-token"] },
  { label: "serve --help", args: () => ["serve", "--help"] },
];

/** CPU seconds of this process's reaped children so far (utime + stime ticks of /proc/self/stat, at 100 Hz). */
function childCpuSeconds(): number {
  const fields = readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

/** Runs one command to its end; its wall and CPU seconds. */
function timed(file: string, args: string[], env: NodeJS.ProcessEnv): { wall: number; cpu: number } {
  const cpu = childCpuSeconds();
  const started = performance.now();
  const run = spawnSync(file, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  const wall = (performance.now() - started) / 1000;
  if (run.status !== 0) throw new Error(`${args.join(" ")} exited ${run.status}: ${run.stderr.toString()}`);
  return { wall, cpu: childCpuSeconds() - cpu };
}

/** Starts the checkout's server on a fresh data directory until it has listened once, so admin-token has a database. */
async function prepare(name: string, root: string): Promise<Checkout> {
  const bin = join(root, "bin", "platform-api.js");
  if (!existsSync(join(root, "dist", "src", "main.js"))) throw new Error(`${root} is not built: run npm run build there`);
  const dataDir = join(work, `${name}-data`);
  const server = spawn(process.execPath, [bin, "serve"], {
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", PLATFORM_DATA_DIR: dataDir, LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolveListening, reject) => {
    let output = "";
    server.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("listening on")) resolveListening();
    });
    server.on("exit", (code) => reject(new Error(`${name}'s server exited ${code} before listening:\n${output}`)));
  });
  const exited = new Promise((done) => server.on("exit", done));
  server.kill("SIGTERM");
  await exited;
  const key = join(work, `${name}-signing.jwk`);
  timed(process.execPath, [bin, "keygen", "--out", key], process.env);
  return { name, root, dataDir, key };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function main(): Promise<void> {
  const checkouts = [await prepare("this", ROOT), ...(COMPARE ? [await prepare("compared", COMPARE)] : [])];
  const samples = new Map<string, { wall: number; cpu: number; ratio: number }[]>();
  const bare: number[] = [];
  for (let n = 0; n < ROUNDS; n++) {
    for (const c of CASES) {
      for (const checkout of checkouts) {
        const yardstick = timed(process.execPath, ["-e", "0"], process.env);
        bare.push(yardstick.wall);
        const env = { ...process.env, PLATFORM_DATA_DIR: checkout.dataDir, LOG_LEVEL: "silent" };
        const t = timed(process.execPath, [join(checkout.root, "bin", "platform-api.js"), ...c.args(checkout, n)], env);
        const key = `${checkout.name}\t${c.label}`;
        samples.set(key, [...(samples.get(key) ?? []), { ...t, ratio: t.wall / yardstick.wall }]);
      }
    }
  }
  const ms = (s: number) => `${Math.round(s * 1000)} ms`;
  console.log(`platform-api command start, ${ROUNDS} rounds; bare \`node -e 0\`: median ${ms(median(bare))} wall`);
  console.log(`| checkout | command | wall (median) | CPU (median) | × bare node |\n|---|---|---|---|---|`);
  for (const [key, runs] of samples) {
    const [name, label] = key.split("\t");
    const where = name === "this" ? ROOT : COMPARE;
    console.log(
      `| ${where} | \`${label}\` | ${ms(median(runs.map((r) => r.wall)))} | ${ms(median(runs.map((r) => r.cpu)))} | ${median(runs.map((r) => r.ratio)).toFixed(1)}× |`,
    );
  }
}

try {
  await main();
} finally {
  rmSync(work, { recursive: true, force: true });
}
