import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The repository root: commands run from there, as from a checkout. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** How a process ended. */
export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** How a process ended and everything it printed. */
export interface Finished extends Exit {
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved as they arrived. */
  output: string;
}

/** A child process started by a test: what it printed so far, waits on its output, signals and its end. */
export interface RunningChild {
  child: ChildProcess;
  /** The pid of the process started (a wrapper's, if the command line has one). */
  pid: number;
  stdout(): string;
  stderr(): string;
  /** stdout and stderr interleaved as they arrived, for failure messages. */
  output(): string;
  /** The complete lines of stdout so far. */
  stdoutLines(): readonly string[];
  /** Settles once the process has exited and all its output is read. */
  exited: Promise<Exit>;
  /** exited, with everything it printed. */
  finished: Promise<Finished>;
  /** Whether it is still running. */
  running(): boolean;
  /** Sends signal while it runs; whether it was sent. */
  kill(signal?: NodeJS.Signals): boolean;
  /**
   * Resolves with check's first result other than undefined, null or false, checked now and after each piece of output;
   * rejects if the process ends first, or after timeoutMs (a liveness bound, not a timing assertion).
   */
  until<T>(check: () => T | undefined | null | false, what: string, timeoutMs?: number): Promise<T>;
  /** until stdout or stderr (or both, as output()) matches pattern. */
  waitFor(pattern: RegExp, from?: "stdout" | "stderr" | "output", timeoutMs?: number): Promise<RegExpExecArray>;
}

/** The bound of a wait on a child's output when the test gives none: generous for a loaded CI machine. */
export const WAIT_MS = 120_000;

/** Children still running, killed when the test file's process exits (a failed test leaves none behind). */
const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/**
 * Starts argv (the program first) from the repository root (or cwd) with exactly env, its stdin
 * ignored (or a pipe) and its stdout and stderr read (stdout appended to stdoutFile instead, if given).
 */
export function startChild(
  argv: readonly string[],
  opts: { env: NodeJS.ProcessEnv; cwd?: string; stdoutFile?: string; stdin?: "ignore" | "pipe" },
): RunningChild {
  const fd = opts.stdoutFile === undefined ? undefined : openSync(opts.stdoutFile, "a");
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: opts.cwd ?? ROOT,
    env: opts.env,
    stdio: [opts.stdin ?? "ignore", fd ?? "pipe", "pipe"],
  });
  if (fd !== undefined) closeSync(fd);
  running.add(child);
  let stdout = "";
  let stderr = "";
  let output = "";
  const lines: string[] = [];
  let partial = "";
  let closed = false;
  const waiters = new Set<{ check: () => boolean; fail: (err: Error) => void }>();
  const recheck = () => {
    for (const w of waiters) if (w.check()) waiters.delete(w);
  };
  child.stdout?.setEncoding("utf8").on("data", (s: string) => {
    stdout += s;
    output += s;
    const parts = (partial + s).split("\n");
    partial = parts.pop()!;
    lines.push(...parts);
    recheck();
  });
  child.stderr!.setEncoding("utf8").on("data", (s: string) => {
    stderr += s;
    output += s;
    recheck();
  });
  const exited = new Promise<Exit>((resolve, reject) => {
    child.once("error", (err) => {
      running.delete(child);
      reject(err);
    });
    child.once("close", (code, signal) => {
      closed = true;
      running.delete(child);
      if (partial !== "") lines.push(partial);
      partial = "";
      resolve({ code, signal });
    });
  });
  const failWaiters = (why: string) => {
    for (const w of waiters) w.fail(new Error(why));
    waiters.clear();
  };
  void exited.then(
    (exit) => {
      recheck();
      failWaiters(`the process ended (${exit.signal ?? exit.code})`);
    },
    (err: Error) => failWaiters(`the process did not start: ${err.message}`),
  );
  const finished = exited.then((exit) => ({ ...exit, stdout, stderr, output }));
  finished.catch(() => {}); // a test that never awaits it is told by exited
  const isRunning = () => child.exitCode === null && child.signalCode === null;
  const until = <T>(check: () => T | undefined | null | false, what: string, timeoutMs = WAIT_MS): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => settle(new Error(`not within ${timeoutMs} ms`)), timeoutMs);
      const waiter = {
        check: () => {
          const found = check();
          if (found === undefined || found === null || found === false) return false;
          clearTimeout(timer);
          resolve(found);
          return true;
        },
        fail: (err: Error) => settle(err),
      };
      const settle = (err: Error) => {
        clearTimeout(timer);
        waiters.delete(waiter);
        reject(new Error(`${what}: ${err.message}; what it printed:\n${output}`));
      };
      if (waiter.check()) return;
      if (closed) return settle(new Error(`the process ended (${child.signalCode ?? child.exitCode})`));
      waiters.add(waiter);
    });
  return {
    child,
    pid: child.pid ?? -1,
    stdout: () => stdout,
    stderr: () => stderr,
    output: () => output,
    stdoutLines: () => lines,
    exited,
    finished,
    running: isRunning,
    kill: (signal = "SIGTERM") => isRunning() && child.kill(signal),
    until,
    waitFor: (pattern, from = "output", timeoutMs) =>
      until(() => pattern.exec(from === "stdout" ? stdout : from === "stderr" ? stderr : output), `${pattern} on ${from}`, timeoutMs),
  };
}

/**
 * Runs argv to its end (see startChild). Past timeoutMs it is sent killSignal (then SIGKILL 10 s later),
 * and stderr ends with a line saying so.
 */
export async function runChild(
  argv: readonly string[],
  opts: Parameters<typeof startChild>[1] & { timeoutMs?: number; killSignal?: NodeJS.Signals },
): Promise<Finished> {
  const run = startChild(argv, opts);
  const timeoutMs = opts.timeoutMs ?? WAIT_MS;
  let late: NodeJS.Timeout | undefined;
  const timer = setTimeout(() => {
    run.kill(opts.killSignal ?? "SIGKILL");
    late = setTimeout(() => run.kill("SIGKILL"), 10_000);
  }, timeoutMs);
  try {
    const finished = await run.finished;
    if (late === undefined) return finished;
    const note = `\n(${argv.join(" ")}: stopped after ${timeoutMs} ms)`;
    return { ...finished, stderr: finished.stderr + note, output: finished.output + note };
  } finally {
    clearTimeout(timer);
    clearTimeout(late);
  }
}

/** Our environment without anything the server or node's test runner reads, plus env. */
export function cleanEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(PORT|HOST|LOG_LEVEL|PLATFORM_.*|NODE_TEST_CONTEXT|NODE_OPTIONS)$/.test(k)) out[k] = v;
  }
  return { ...out, ...env };
}

/** Runs argv to its end (see runChild) and returns its stdout; throws, with its stderr, unless it exits 0. */
export async function outputOf(argv: readonly string[], opts: Parameters<typeof runChild>[1]): Promise<string> {
  const run = await runChild(argv, opts);
  if (run.code !== 0) throw new Error(`${argv.join(" ")} failed (${run.signal ?? run.code}):\n${run.stderr}`);
  return run.stdout;
}

/**
 * Runs scripts/<script> with tsx from the repository root to its end; past timeoutMs it gets SIGTERM, so that
 * it stops the servers it started. Its exit code (-1 for a signal) and its output.
 */
export async function runScript(script: string, args: readonly string[], timeoutMs: number): Promise<{ code: number; output: string }> {
  const run = await runChild([process.execPath, "--import", "tsx", `scripts/${script}`, ...args], {
    env: process.env,
    timeoutMs,
    killSignal: "SIGTERM",
  });
  return { code: run.code ?? -1, output: run.output };
}
