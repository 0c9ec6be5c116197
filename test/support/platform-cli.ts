import { join } from "node:path";
import { cleanEnv, ROOT, runChild, startChild, type RunningChild } from "./child-process.js";

/** What a run of the command line printed and how it exited (code -1 when a signal ended it). */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Where a command's data is: a data directory, or a test server's storage (its PostgreSQL database too); null
 * for a command that reads none (--help, --version).
 */
export type CliStorage = string | { dataDir: string; databaseUrl: string } | null;

/** How to run the command, beyond its arguments and settings. */
export interface CliOptions {
  /** A command line the command runs under (e.g. setpriv and its options). */
  wrapper?: readonly string[];
  /** Options of node itself, before the command's file (e.g. --import of a loader hook). */
  nodeArgs?: readonly string[];
  /** The working directory (the repository root by default). */
  cwd?: string;
  /** Past this the command is killed and the run ends with a note on stderr (a liveness bound). */
  timeoutMs?: number;
}

/** The command line of `platform-api args`, and its environment: ours without the server's settings, plus storage's and env. */
function command(storage: CliStorage, args: readonly string[], env: Record<string, string>, opts: CliOptions) {
  const where: Record<string, string> =
    storage === null
      ? {}
      : typeof storage === "string"
        ? { PLATFORM_DATA_DIR: storage }
        : { PLATFORM_DATA_DIR: storage.dataDir, PLATFORM_DATABASE_URL: storage.databaseUrl };
  return {
    argv: [...(opts.wrapper ?? []), process.execPath, ...(opts.nodeArgs ?? []), join(ROOT, "bin/platform-api.js"), ...args],
    options: { cwd: opts.cwd, env: cleanEnv({ ...where, LOG_LEVEL: "silent", ...env }) },
  };
}

/**
 * Runs the real `platform-api` command (bin/platform-api.js) to its end in a child process from the
 * repository root, over a data directory or a test server's storage, as a user would.
 */
export async function platformCli(
  storage: CliStorage,
  args: readonly string[],
  env: Record<string, string> = {},
  opts: CliOptions = {},
): Promise<CliRun> {
  const { argv, options } = command(storage, args, env, opts);
  const run = await runChild(argv, { ...options, timeoutMs: opts.timeoutMs });
  return { code: run.code ?? -1, stdout: run.stdout, stderr: run.stderr };
}

/** The command started, for a test that talks to it while it runs (e.g. `auth login` waiting for its browser). */
export function startPlatformCli(
  storage: CliStorage,
  args: readonly string[],
  env: Record<string, string> = {},
  opts: CliOptions = {},
): RunningChild & { done: Promise<CliRun> } {
  const { argv, options } = command(storage, args, env, opts);
  const run = startChild(argv, options);
  const done = run.finished.then((f) => ({ code: f.code ?? -1, stdout: f.stdout, stderr: f.stderr }));
  done.catch(() => {});
  return { ...run, done };
}

/** The counts an import-advisories run printed ("created: N" lines). */
export function importCounts(run: CliRun): { created: number; updated: number; unchanged: number; skipped: number } {
  const count = (label: string) => {
    const m = new RegExp(`^${label}: (\\d+)$`, "m").exec(run.stdout);
    if (!m) throw new Error(`no "${label}:" line in the output:\n${run.stdout}\n${run.stderr}`);
    return Number(m[1]);
  };
  return { created: count("created"), updated: count("updated"), unchanged: count("unchanged"), skipped: count("skipped") };
}

/** An administrator API token from `platform-api admin-token` over storage, with env (the server's base URL); throws on failure. */
export async function cliAdminToken(storage: CliStorage, env: Record<string, string> = {}): Promise<string> {
  const run = await platformCli(storage, ["admin-token"], env);
  const token = run.stdout.trim();
  if (run.code !== 0 || token === "") throw new Error(`admin-token exited ${run.code}: ${run.stderr}`);
  return token;
}
