import { execFileSync } from "node:child_process";
import http from "node:http";
import https from "node:https";
import { createServer } from "node:net";
import { cleanEnv, startChild, WAIT_MS, type Exit, type RunningChild } from "./child-process.js";
import { parseLogLine, type LogLine } from "./log-lines.js";
import { cliAdminToken } from "./platform-cli.js";

export { cleanEnv } from "./child-process.js";

export type { LogLine } from "./log-lines.js";

/** How to start `serve`, beyond its settings. */
export interface ServeOptions {
  /** Arguments after `serve`. */
  args?: readonly string[];
  /**
   * The whole command line, in place of `node bin/platform-api.js serve <args>` (e.g. a systemd unit's ExecStart):
   * its output need not be JSON lines, so the start waits for /readyz alone.
   */
  command?: readonly string[];
  /** env is the server's whole environment (with what cleanEnv keeps of ours): none of the test defaults. */
  bare?: boolean;
  /** Settings the defaults set that stay unset (e.g. HOST, for the dual-stack default). */
  unset?: readonly string[];
  /** Appends stdout to this file instead of reading it (lines() and logged() then see nothing). */
  stdoutFile?: string;
  /** The bound of the start (a liveness bound: generous on a loaded machine). */
  timeoutMs?: number;
}

/** `platform-api serve` running as a child process, as an operator starts it. */
export interface ServeProcess extends RunningChild {
  port: number;
  /** http://127.0.0.1:<port> (https:// with TLS). */
  url: string;
  /** The JSON log lines printed on stdout so far (at LOG_LEVEL=info, the start-up line and every phase of the stop). */
  lines(): LogLine[];
  /** The first log line that matches, printed already or to come; rejects if the process ends first or after timeoutMs. */
  logged(match: (line: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
  /** SIGTERM (SIGKILL 10 s later); resolves with how it ended. Safe to call twice, and after the process ended. */
  stop(): Promise<Exit>;
  /** An administrator API token from `platform-api admin-token` with the server's settings (its data, its base URL). */
  adminToken(): Promise<string>;
  /** The pids of the process's children (with PLATFORM_WORKERS, its workers), from ps. */
  workerPids(): number[];
}

/**
 * The test defaults under env, as startTestServer's: loopback, quiet, no drain before the close
 * (test/operations/drain.test.ts tests the drain) and a short grace period.
 */
const DEFAULTS: Record<string, string> = {
  HOST: "127.0.0.1",
  LOG_LEVEL: "warn",
  PLATFORM_DRAIN_MS: "0",
  PLATFORM_SHUTDOWN_GRACE_MS: "2000",
};

/** A start-up line: "platform-api <version> listening on http(s)://…". */
export const isListening = (line: LogLine): boolean => /^platform-api \S+ listening on https?:\/\//.test(line.msg);

/** A port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** Whether GET /readyz answers 200 (over TLS, whatever certificate the server has). */
function ready(port: number, tls: boolean): Promise<boolean> {
  return new Promise((resolve) => {
    const get = tls ? https.get : http.get;
    const req = get(
      { host: "127.0.0.1", port, path: "/readyz", agent: false, rejectUnauthorized: false, servername: "localhost" },
      (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      },
    );
    req.setTimeout(10_000, () => req.destroy());
    req.on("error", () => resolve(false));
  });
}

/** The JSON log lines among a child's stdout lines, parsed once each. */
function jsonLines(run: RunningChild): () => LogLine[] {
  const parsed: LogLine[] = [];
  let seen = 0;
  return () => {
    const raw = run.stdoutLines();
    for (; seen < raw.length; seen++) {
      if (!raw[seen]!.startsWith("{")) continue; // e.g. the pretty lines on a terminal
      parsed.push(parseLogLine(raw[seen]!));
    }
    return parsed;
  };
}

/** One attempt on port; what it printed, if it ended before it was ready (e.g. the port was taken meanwhile). */
async function tryServe(
  port: number,
  settings: Record<string, string>,
  opts: ServeOptions,
  deadline: number,
): Promise<ServeProcess | string> {
  const env: Record<string, string> = { ...settings, PORT: String(port) };
  const argv = opts.command ?? [process.execPath, "bin/platform-api.js", "serve", ...(opts.args ?? [])];
  const run = startChild(argv, { env: cleanEnv(env), stdoutFile: opts.stdoutFile });
  const lines = jsonLines(run);
  const stop = async (): Promise<Exit> => {
    const late = run.kill("SIGTERM") ? setTimeout(() => run.kill("SIGKILL"), 10_000) : undefined;
    try {
      return await run.exited;
    } finally {
      clearTimeout(late);
    }
  };
  const tls = env.PLATFORM_TLS_CERT_FILE !== undefined;
  const srv: ServeProcess = {
    ...run,
    port,
    url: `${tls ? "https" : "http"}://127.0.0.1:${port}`,
    lines,
    logged: (match, what, timeoutMs) => run.until(() => lines().find(match), `log line: ${what}`, timeoutMs),
    stop,
    workerPids: () =>
      execFileSync("ps", ["-o", "pid=", "--ppid", String(run.pid)], { encoding: "utf8" })
        .split("\n")
        .map((l) => Number(l.trim()))
        .filter((n) => n > 0),
    adminToken: () => {
      if (env.PLATFORM_DATA_DIR === undefined) throw new Error("adminToken() needs the server's PLATFORM_DATA_DIR");
      return cliAdminToken(env.PLATFORM_DATA_DIR, { ...env, LOG_LEVEL: "silent" });
    },
  };
  try {
    while (!(await ready(port, tls))) {
      if (!run.running()) {
        await run.exited; // all of its output read
        return run.output();
      }
      if (Date.now() > deadline) throw new Error(`serve was not ready within the deadline:\n${run.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // /readyz answers once one worker listens, and maybe before the start-up line is written: where the level
    // shows them, wait for the start-up line of the server or of every worker.
    const processes = Number(env.PLATFORM_WORKERS ?? "1");
    const shown = ["info", "debug", "trace"].includes(env.LOG_LEVEL ?? "info");
    if (processes > 1 && !shown) throw new Error("PLATFORM_WORKERS > 1 needs LOG_LEVEL=info, where each worker says it listens");
    if (shown && opts.stdoutFile === undefined && opts.command === undefined) {
      await run.until(
        () =>
          new Set(
            lines()
              .filter(isListening)
              .map((l) => l.pid),
          ).size >= processes,
        processes > 1 ? `${processes} workers listening` : "the start-up line",
        Math.max(deadline - Date.now(), 1),
      );
    }
    return srv;
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * Starts `node bin/platform-api.js serve` (the compiled server: run `npm run build` first) with env
 * (PLATFORM_DATA_DIR at least) over the test defaults (DEFAULTS) on a free port, and waits until /readyz
 * answers and, at LOG_LEVEL=info, the start-up line is written (with PLATFORM_WORKERS=N, each worker's: N
 * needs info). The port is fixed before the start, so the server's default base URL,
 * http://localhost:<port>, is its real address; a port taken between probe and start is retried with
 * another. With env.PORT, that port is used as it is. Whatever still runs when the test file's process
 * exits is killed.
 */
export async function startServeProcess(env: Record<string, string>, opts: ServeOptions = {}): Promise<ServeProcess> {
  const deadline = Date.now() + (opts.timeoutMs ?? WAIT_MS);
  const settings = opts.bare ? { ...env } : { ...DEFAULTS, ...env };
  for (const name of opts.unset ?? []) delete settings[name];
  let output = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const served = await tryServe(env.PORT !== undefined ? Number(env.PORT) : await freePort(), settings, opts, deadline);
    if (typeof served !== "string") return served;
    output = served;
    if (!output.includes("EADDRINUSE") || env.PORT !== undefined) break;
  }
  throw new Error(`serve exited before it was ready (is dist/ built? npm run build):\n${output}`);
}
