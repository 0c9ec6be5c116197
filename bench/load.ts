/**
 * The load generators of `npm run bench`: autocannon for HTTP/1.1 and h2load
 * (Debian's nghttp2-client) for h2c, each returning one row of the table.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import autocannon from "autocannon";

/** One measured row. */
export interface Row {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  /** CPU time the target process spent per request, in µs (Linux /proc only). */
  cpuPerRequest?: number;
}

/** User + system CPU time of a process (all its threads) in ms, from /proc; null where there is no /proc. */
export function cpuMillis(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, in clock ticks of 10 ms
  } catch {
    return null;
  }
}

/** HTTP/1.1 load with autocannon: `connections` keep-alive connections, one request at a time on each; every answer must be 2xx. */
export async function autocannonLoad(
  name: string,
  url: string,
  opts: Partial<autocannon.Options> & { durationS: number; connections: number },
): Promise<Row> {
  const { durationS, ...rest } = opts;
  const result = await autocannon({ url, duration: durationS, ...rest });
  const bad = result.non2xx + result.errors;
  if (bad > 0) {
    const statuses = Object.entries(result.statusCodeStats ?? {})
      .map(([code, { count }]) => `${code}×${count}`)
      .join(", ");
    throw new Error(`${name}: ${bad} failed requests (statuses ${statuses}; ${result.errors} errors, ${result.timeouts} timeouts)`);
  }
  return { name, rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 };
}

/** Where h2load is installed, or undefined. */
export const H2LOAD = ["/usr/bin/h2load", "/usr/local/bin/h2load"].find((p) => existsSync(p));

/** What one h2load row sends: a GET without body, else a POST of body with these headers. */
export interface H2Request {
  url: string;
  headers: Record<string, string>;
  body?: Uint8Array;
}

/**
 * h2c load with h2load, the same settings for every row (one thread, 4
 * connections × 32 concurrent streams, prior knowledge). Counts the streams
 * answered with HTTP 200 and fails on any other; a caller whose protocol
 * answers errors with 200 too (gRPC) checks the server's own count.
 */
export async function h2loadRow(name: string, request: H2Request, opts: { durationS: number; dir: string }): Promise<Row> {
  if (!H2LOAD) throw new Error("h2load is not installed (Debian: apt-get install nghttp2-client)");
  const log = join(opts.dir, "h2load.log");
  const args = ["-D", String(opts.durationS), "-c", "4", "-m", "32", "-t", "1", "--log-file", log];
  if (request.body) {
    const body = join(opts.dir, "h2load-body.bin");
    writeFileSync(body, request.body);
    args.push("-d", body);
  }
  for (const [header, value] of Object.entries(request.headers)) args.push("-H", `${header}: ${value}`);
  args.push(request.url);
  rmSync(log, { force: true }); // h2load appends to an existing log
  await new Promise<void>((resolve, reject) => {
    const child = spawn(H2LOAD, args, { stdio: "ignore" });
    child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${name}: h2load exited ${code}`))));
  });
  const answers = readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .map((l) => l.split(/\s+/));
  const failed = answers.filter((f) => f[1] !== "200");
  if (failed.length > 0) throw new Error(`${name}: ${failed.length} of ${answers.length} streams answered ${failed[0]![1]}, not 200`);
  const micros = answers.map((f) => Number(f[2])).sort((a, b) => a - b);
  const at = (q: number) => Math.round(micros[Math.floor(q * (micros.length - 1))]! / 1000);
  return { name, rps: micros.length / opts.durationS, p50: at(0.5), p99: at(0.99) };
}
