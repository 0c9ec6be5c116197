import cluster, { type Worker } from "node:cluster";
import type { MetricsSettings } from "./server/observe/metrics-access.js";
import type { ClusterMetrics } from "./server/observe/metrics-cluster.js";

/** The exit code of a start-up error the operator must fix (the command line's, for configuration too). */
const START_UP_FAILED = 2;

/** How long a worker that died is given before it is started again, at most. */
const MAX_RESTART_DELAY_MS = 10_000;

/** The message by which the primary tells its workers to skip the rest of their drain (a second signal). */
const CLOSE_NOW = "platform-api:close-now";

/** What the primary process writes about its workers (one JSON line each, like the workers' own logs). */
function note(level: "info" | "warn" | "error", msg: string, fields: Record<string, unknown> = {}): void {
  const levels = { info: 30, warn: 40, error: 50 };
  process.stdout.write(
    `${JSON.stringify({ level: levels[level], time: Date.now(), pid: process.pid, role: "primary", msg, ...fields })}\n`,
  );
}

/**
 * Runs `count` worker processes of this same command on the one port
 * (node:cluster hands each incoming connection to one of them), restarts a
 * worker that dies, and on SIGTERM/SIGINT passes the signal on and exits 0
 * once every worker has drained and shut down gracefully; a second signal
 * tells them to skip the rest of the drain. A worker that fails to start with
 * exit code 2 (a start-up error, already printed) stops them all with code 2.
 * SIGHUP (systemctl reload) is passed on to every worker, which re-reads
 * what it can; it never stops the primary.
 * The primary answers every worker's /metrics with the whole cluster's
 * numbers (metrics-cluster.ts), and with PLATFORM_METRICS_ADDR serves them on
 * that address itself (a bind failure rejects with StartupError before any
 * worker starts); it says once where they can be scraped (the workers serve
 * the public port's /metrics to whom the same settings allow). Resolves with
 * the exit code.
 */
export async function runPrimary(count: number, settings: MetricsSettings): Promise<number> {
  // Loaded here, not with the command line: only the primary of a worker cluster needs them.
  const [{ ClusterMetrics }, { listenForScrapes }, { metricsStartupNote }, { Registry }] = await Promise.all([
    import("./server/observe/metrics-cluster.js"),
    import("./server/http/metrics-endpoint.js"),
    import("./server/observe/metrics-access.js"),
    import("prom-client"),
  ]);
  // Each live worker and its slot (1..count): a replacement takes the slot of the worker it replaces.
  const live = new Map<Worker, number>();
  const metrics = new ClusterMetrics(() => live);
  const addr = settings.metricsAddr;
  const listener =
    addr &&
    (await listenForScrapes(addr, settings.metricsToken, {
      contentType: Registry.PROMETHEUS_CONTENT_TYPE,
      exposition: () => metrics.exposition(),
    }));
  const where = metricsStartupNote(settings, listener?.url);
  note("info", where.msg, where.fields);
  const code = await superviseWorkers(count, live, metrics);
  await listener?.close();
  return code;
}

/** runPrimary's workers: started, restarted, stopped; resolves with the exit code. */
function superviseWorkers(count: number, live: Map<Worker, number>, metrics: ClusterMetrics): Promise<number> {
  return new Promise<number>((done) => {
    let stopping = false;
    let failures = 0;
    // Workers that have started listening (and so handle SIGHUP).
    const listening = new Set<Worker>();
    let exitCode = 0;
    const startedAt = Date.now();
    let stopAt = 0;
    // The primary's last line: every worker has exited, with the code the command exits with.
    const resolve = (code: number) => {
      note(code === 0 ? "info" : "error", "all workers stopped", { exitCode: code, stoppingMs: Date.now() - (stopAt || startedAt) });
      done(code);
    };
    const start = (slot: number) => {
      const worker = cluster.fork();
      live.set(worker, slot);
      worker.on("message", (message: unknown) => metrics.onMessage(worker, message));
      let listened = false;
      worker.on("exit", (code, signal) => {
        live.delete(worker);
        listening.delete(worker);
        const restarting = !stopping && !(code === START_UP_FAILED && !listened);
        metrics.retire(worker, restarting);
        if (stopping) {
          if (live.size === 0) resolve(exitCode);
          return;
        }
        if (code === START_UP_FAILED && !listened) {
          // The worker printed what the operator must fix (port in use, unusable data): another would fail alike.
          exitCode = START_UP_FAILED;
          stop("SIGTERM");
          return;
        }
        failures++;
        const delay = Math.min(MAX_RESTART_DELAY_MS, 100 * 2 ** Math.min(failures, 7));
        note("error", "worker died; starting another", { worker: worker.process.pid, code, signal, restartInMs: delay });
        setTimeout(() => {
          if (!stopping) start(slot);
        }, delay).unref();
      });
      worker.on("listening", () => {
        listened = true;
        listening.add(worker);
        failures = 0;
      });
    };
    for (let slot = 1; slot <= count; slot++) start(slot);
    note("info", `started ${count} workers`, { workers: count });
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) return;
      stopping = true;
      stopAt = Date.now();
      note("info", "shutting down", { signal });
      if (live.size === 0) resolve(exitCode);
      for (const worker of live.keys()) worker.process.kill(signal);
    };
    // A signal once stopping (a second Ctrl-C) tells the workers to skip the rest of their drain.
    const closeNow = (signal: NodeJS.Signals) => {
      note("info", "closing now: the drain is cut short", { signal });
      for (const worker of live.keys()) if (worker.isConnected()) worker.send(CLOSE_NOW, () => {});
    };
    const onSignal = (signal: NodeJS.Signals) => (stopping ? closeNow(signal) : stop(signal));
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    // Each worker re-reads what it can (the TLS certificate) and logs it; the primary only passes the signal on.
    // Only to workers that are listening: one still starting reads everything anyway, and until its handler is on,
    // SIGHUP would end it.
    process.on("SIGHUP", () => {
      note("info", "reload: SIGHUP passed on to the workers", { signal: "SIGHUP", workers: listening.size });
      for (const worker of listening) worker.process.kill("SIGHUP");
    });
  });
}

/** In a worker: calls fn when the primary says to skip the rest of the drain. */
export function onCloseNow(fn: () => void): void {
  process.on("message", (message) => {
    if (message === CLOSE_NOW) fn();
  });
}

/** True in a worker process started by runPrimary. */
export const isWorker = (): boolean => cluster.isWorker;
