import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type { ServerProcess } from "./cli-server.js";

/** One reading of the server's resident set. */
export interface RssSample {
  /** Milliseconds since the sampler started. */
  atMs: number;
  kib: number;
}

/** The VmRSS of pid in KiB, from /proc/<pid>/status; undefined once the process is gone. */
export function residentKib(pid: number): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds (user + system) pid has used, from /proc/<pid>/stat; undefined once the process is gone. */
export function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces: utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

/** USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux architecture Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

/** Reads the server's RSS every intervalMs until stopped. */
export function sampleRss(pid: number, intervalMs = 1000): { samples: RssSample[]; stop(): void } {
  const started = performance.now();
  const samples: RssSample[] = [];
  const take = () => {
    const kib = residentKib(pid);
    if (kib !== undefined) samples.push({ atMs: performance.now() - started, kib });
  };
  take();
  const timer = setInterval(take, intervalMs);
  return { samples, stop: () => clearInterval(timer) };
}

/**
 * The request ids of the calls the server ran, from its access log (one
 * `"msg":"rpc"` line per call, written when the handler finishes, before the
 * answer is sent). Lines are only parsed between start() and the end of the
 * output, so the bulk of a long run costs nothing. `ended` settles once the
 * server's stdout is closed, i.e. every line it wrote has been read.
 */
export function watchAccessLog(server: ServerProcess): { start(): void; ran: Set<string>; ended: Promise<void> } {
  const ran = new Set<string>();
  let recording = false;
  const lines = createInterface({ input: server.child.stdout! });
  lines.on("line", (line) => {
    if (!recording || !line.includes('"msg":"rpc"')) return;
    const m = /"reqId":"([^"]+)"/.exec(line);
    if (m) ran.add(m[1]!);
  });
  const ended = new Promise<void>((resolve) => lines.once("close", resolve));
  return { start: () => (recording = true), ran, ended };
}
