import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** `platform-api serve` running as a child process, as an operator starts it. */
export interface ServeProcess {
  port: number;
  /** The server's process id (the primary's, with PLATFORM_WORKERS). */
  pid: number;
  /** What the server printed so far (stdout and stderr), for failure messages. */
  output(): string;
  /** SIGTERM, then SIGKILL after 10 s; resolves once the process is gone. Safe to call twice. */
  stop(): Promise<void>;
}

/** Our environment without anything the server or node's test runner reads, plus env. */
export function cleanEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(PORT|HOST|LOG_LEVEL|PLATFORM_.*|NODE_TEST_CONTEXT|NODE_OPTIONS)$/.test(k)) out[k] = v;
  }
  return { ...out, ...env };
}

/** A port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** Resolves when the child has exited (at once if it already has). */
async function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  await once(child, "exit");
}

/** One attempt: serve on port; what it printed when it exits before it is ready (e.g. the port was taken meanwhile). */
async function tryServe(port: number, env: Record<string, string>, deadline: number): Promise<ServeProcess | string> {
  const child = spawn(process.execPath, ["bin/platform-api.js", "serve"], {
    cwd: ROOT,
    // No drain by default: a test that stops the server waits for nothing (test/operations/drain.test.ts tests the drain).
    env: cleanEnv({ HOST: "127.0.0.1", LOG_LEVEL: "warn", PLATFORM_DRAIN_MS: "0", ...env, PORT: String(port) }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  const closed = once(child, "close").catch(() => {});
  let output = "";
  child.stdout!.setEncoding("utf8").on("data", (s: string) => (output += s));
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (output += s));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited(child);
      clearTimeout(timer);
    }
  };
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        await closed; // all of its output read
        return output;
      }
      if (Date.now() > deadline) throw new Error(`serve was not ready within the deadline:\n${output}`);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (res) => res.ok,
        () => false,
      );
      if (ready) return { port, pid: child.pid!, output: () => output, stop };
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * Starts `node bin/platform-api.js serve` (the compiled server: run `npm run
 * build` first) on a free port, with env (PLATFORM_DATA_DIR at least), and
 * waits until /readyz answers. The port is fixed before start, so the
 * server's default base URL, http://localhost:<port>, is its real address;
 * a port taken between probe and start is retried with another.
 */
export async function startServeProcess(env: Record<string, string>, timeoutMs = 60_000): Promise<ServeProcess> {
  const deadline = Date.now() + timeoutMs;
  let output = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const served = await tryServe(await freePort(), env, deadline);
    if (typeof served !== "string") return served;
    output = served;
    if (!output.includes("EADDRINUSE")) break;
  }
  throw new Error(`serve exited before it was ready (is dist/ built? npm run build):\n${output}`);
}
