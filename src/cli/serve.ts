/** `platform-api serve`: the server, one process or a primary and its workers. */
import { environmentHelp, type Config } from "../config.js";
import { StartupError, systemErrorCode } from "../startup-error.js";
import { isWorker, onCloseNow, runPrimary } from "../workers.js";
import { parseCommandArgs } from "./args.js";
import type { Command } from "./command.js";
import { commandConfig, openCommandStore } from "./environment.js";

const USAGE = "usage: platform-api serve   (settings are environment variables: PORT=9090 platform-api serve; --help lists them)";

/** The listener could not bind: one line naming the address and the cause. */
function listenError(err: unknown, cfg: Config): unknown {
  const code = systemErrorCode(err);
  const where = `${cfg.host.includes(":") ? `[${cfg.host}]` : cfg.host}:${cfg.port}`;
  if (code === "EADDRINUSE")
    return new StartupError(`port ${cfg.port} is already in use (${where}, EADDRINUSE); stop what holds it or set PORT`);
  if (code === "EACCES") return new StartupError(`not allowed to listen on ${where} (EACCES); ports below 1024 need privileges: set PORT`);
  if (code === "EADDRNOTAVAIL")
    return new StartupError(`cannot listen on ${where}: HOST is not an address of this machine (EADDRNOTAVAIL)`);
  return err;
}

export const serveCommand: Command = {
  summary: "start the server (the default command)",
  help: `${USAGE}

Starts the server on PORT, serving REST, gRPC, Connect and gRPC-Web; with PLATFORM_WORKERS=N, N worker processes share the port. SIGTERM or SIGINT stops it gracefully: /readyz and gRPC health answer NOT_SERVING for PLATFORM_DRAIN_MS while calls are still served, then the listener closes and calls in flight have PLATFORM_SHUTDOWN_GRACE_MS to finish; a second signal skips the rest of the drain. With PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE the port serves TLS, and SIGHUP (or a change to either file) re-reads them; SIGHUP never stops the server (without TLS it logs that there is nothing to re-read). It creates the database on first start. Start-up problems (an invalid setting, a port in use, an unusable data directory or database) print one line and exit 2.

environment (name=default):
${environmentHelp()}`,
  async run(args) {
    parseCommandArgs(args, USAGE);
    const cfg = commandConfig();
    // SIGHUP (systemctl reload) never stops the server, whenever it comes: Node's default for it is to exit at once,
    // with no drain and no line. Until the server is up there is nothing to re-read (it is reading everything now).
    let reload = () => {};
    process.on("SIGHUP", () => reload());
    // Imported here, not at the top: `serve --help` and the other commands never load the server.
    const { prepareStore, startServer } = await import("../app/start.js");
    if (cfg.workers > 1 && !isWorker()) {
      // The schema is migrated and the keys made once, here, before the workers start, so they never race to.
      const store = await openCommandStore(cfg, true);
      try {
        await prepareStore(store, Date.now());
      } finally {
        await store.close();
      }
      // Checked once here, or each worker would print the same start-up error.
      if (cfg.tls) (await import("../server/http/tls.js")).checkTlsFiles(cfg.tls);
      return runPrimary(cfg.workers, cfg);
    }
    const store = await openCommandStore(cfg, true);
    const server = await startServer({ config: cfg, store }).catch(async (err: unknown) => {
      await store.close().catch(() => {});
      throw listenError(err, cfg);
    });
    // A second signal skips the rest of the drain. A worker takes that from its primary only: the one
    // Ctrl-C or systemd stop reaches every process of the group, so a worker sees each signal twice.
    let signals = 0;
    const stop = (signal: string) => {
      if (++signals > 1) {
        if (!isWorker()) void server.close();
        return;
      }
      server.app.log.info({ signal }, "shutting down");
      server.close().then(
        () => process.exit(0),
        (err: unknown) => {
          server.app.log.error({ err }, "shutdown failed");
          process.exit(1);
        },
      );
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
    if (isWorker()) onCloseNow(() => void server.close());
    // SIGHUP (systemctl reload; from the primary, in a worker) re-reads what can be re-read: the TLS certificate.
    reload = () => {
      if (cfg.tls) server.reloadTls("SIGHUP");
      else server.app.log.info({ signal: "SIGHUP" }, "reload: nothing to re-read (TLS is off); still serving");
    };
    return new Promise<number>(() => {});
  },
};
