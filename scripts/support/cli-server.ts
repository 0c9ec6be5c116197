import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { inspectorUrl } from "./heap-probe.js";

/** The repository root: the scripts run the real command from there, as a user would. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * The API's own address, fixed so that `admin-token` (a separate process that
 * never learns the server's port) mints tokens whose audience the server accepts.
 */
const BASE_URL = "http://platform-api.scripts.invalid";

/** How long a server may take to print its start-up line before the script gives up. */
const START_TIMEOUT_MS = 60_000;

/** The environment of every command the scripts run over dataDir. */
function environment(dataDir: string, logLevel: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PLATFORM_DATA_DIR: dataDir,
    PLATFORM_BASE_URL: BASE_URL,
    HOST: "127.0.0.1",
    PORT: "0",
    LOG_LEVEL: logLevel,
    PLATFORM_SHUTDOWN_GRACE_MS: "2000",
    // Benchmarks and the soak stop their servers with no balancer to tell: no drain.
    PLATFORM_DRAIN_MS: "0",
  };
}

/** How a server process ended. */
export interface ServerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A `platform-api serve` child process that has printed its address. */
export interface ServerProcess {
  url: string;
  port: number;
  /** The server's own pid, from its log line (the child may be a wrapper such as strace). */
  pid: number;
  child: ChildProcess;
  /** Settles when the child exits. */
  exited: Promise<ServerExit>;
  /** The last lines the process printed, for error reports. */
  logTail(): string;
  /** The inspector's WebSocket URL, when started with `inspect`. */
  inspectorUrl?: string;
}

/** Pids of the servers (and their wrappers) still running, killed if the script ends first. */
const running = new Set<number>();
let cleanupInstalled = false;

/** Makes sure no server outlives the script, whether it ends normally, by an error or by a signal. */
function killLeftoversOnExit(): void {
  if (cleanupInstalled) return;
  cleanupInstalled = true;
  process.on("exit", () => {
    for (const pid of running) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  });
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => process.exit(130));
}

/**
 * Starts `node bin/platform-api.js serve` over dataDir on a free port and
 * resolves once its JSON log says "platform-api … listening on http://…". wrapper, if given,
 * is a command line the server runs under (e.g. strace and its options); inspect starts
 * node's inspector on a free loopback port (see heap-probe.ts).
 */
export function startServerProcess(
  dataDir: string,
  opts: { wrapper?: string[]; env?: Record<string, string>; inspect?: boolean } = {},
): Promise<ServerProcess> {
  const node = opts.inspect ? [process.execPath, "--inspect=127.0.0.1:0"] : [process.execPath];
  const argv = [...(opts.wrapper ?? []), ...node, "bin/platform-api.js", "serve"];
  const env = { ...environment(dataDir, "info"), ...opts.env };
  const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  const tail: string[] = [];
  const remember = (line: string) => {
    tail.push(line);
    if (tail.length > 40) tail.shift();
  };
  const logTail = () => tail.join("\n");
  killLeftoversOnExit();
  // The child, and the server itself once its log names it (they differ under a wrapper).
  const pids = child.pid === undefined ? [] : [child.pid];
  for (const pid of pids) running.add(pid);
  const exited = new Promise<ServerExit>((resolve) =>
    child.once("exit", (code, signal) => {
      for (const pid of pids) running.delete(pid);
      resolve({ code, signal });
    }),
  );
  let inspector: string | undefined;
  createInterface({ input: child.stderr! }).on("line", (line) => {
    inspector ??= inspectorUrl(line);
    remember(line);
  });
  const lines = createInterface({ input: child.stdout! });

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the server did not start within ${START_TIMEOUT_MS} ms:\n${logTail()}`));
    }, START_TIMEOUT_MS);
    void exited.then((exit) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${exit.signal ?? exit.code}) before listening:\n${logTail()}`));
    });
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    // Keep reading after the address line too: a full pipe would stall the server.
    lines.on("line", (line) => {
      remember(line);
      const address = listeningAddress(line);
      if (!address) return;
      clearTimeout(timer);
      pids.push(address.pid);
      running.add(address.pid);
      resolve({ ...address, child, exited, logTail, ...(inspector === undefined ? {} : { inspectorUrl: inspector }) });
    });
  });
}

/** The address and pid in the JSON start-up line ("platform-api … listening on http://…"), if it is one. */
function listeningAddress(line: string): { url: string; port: number; pid: number } | undefined {
  let entry: { msg?: unknown; pid?: unknown };
  try {
    entry = JSON.parse(line) as typeof entry;
  } catch {
    return undefined;
  }
  const m = typeof entry.msg === "string" ? /^platform-api \S+ listening on (http:\/\/[^\s]+) /.exec(entry.msg) : null;
  if (!m || typeof entry.pid !== "number") return undefined;
  const url = m[1]!;
  return { url, port: Number(new URL(url).port), pid: entry.pid };
}

/** Runs `platform-api admin-token` over dataDir and returns the administrator's API token. */
export function mintAdminToken(dataDir: string, env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["bin/platform-api.js", "admin-token"], {
      cwd: ROOT,
      env: { ...environment(dataDir, "silent"), ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    child.once("error", reject);
    child.once("close", (code) => {
      const token = stdout.trim();
      if (code === 0 && token !== "") resolve(token);
      else reject(new Error(`admin-token exited ${code}: ${stderr}`));
    });
  });
}

/** Sends SIGTERM to the server and waits for it to exit; throws unless it exits 0. */
export async function stopServerProcess(server: ServerProcess): Promise<void> {
  process.kill(server.pid, "SIGTERM");
  const exit = await server.exited;
  if (exit.code !== 0) throw new Error(`the server exited ${exit.signal ?? exit.code} on SIGTERM:\n${server.logTail()}`);
}
