import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./serve-process.js";

/** Debian's PgBouncer (apt-get install pgbouncer). */
export const PGBOUNCER = "/usr/sbin/pgbouncer";

/** True when Debian's PgBouncer is installed. */
export function pgbouncerAvailable(): boolean {
  return existsSync(PGBOUNCER);
}

/** A PgBouncer in transaction pooling mode in front of one PostgreSQL cluster, every database passed through. */
export interface PgBouncer {
  port: number;
  /** The URL of database through the pooler (postgres://postgres@127.0.0.1:PORT/<database>). */
  url(database?: string): string;
  /** Its log so far (for a failure's message). */
  log(): string;
  stop(): void;
}

/**
 * Starts Debian's pgbouncer on 127.0.0.1 with pool_mode = transaction in
 * front of the PostgreSQL at upstreamPort: each transaction of a client may
 * run on another server connection, so session state (advisory locks,
 * session settings, LISTEN, SQL PREPARE) does not follow the client. As root
 * it runs as the `postgres` user (it refuses root).
 */
export async function startPgBouncer(
  upstreamPort: number,
  opts: { poolSize?: number; maxServerConnections?: number; settings?: readonly string[] } = {},
): Promise<PgBouncer> {
  const dir = mkdtempSync(join(tmpdir(), "platform-pgbouncer-"));
  const asRoot = process.getuid?.() === 0;
  const port = await freePort();
  const logFile = join(dir, "pgbouncer.log");
  writeFileSync(join(dir, "userlist.txt"), `"postgres" ""\n`);
  writeFileSync(
    join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      // Every database name, passed through to the one cluster.
      `* = host=127.0.0.1 port=${upstreamPort}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      `unix_socket_dir = ${dir}`,
      "auth_type = trust",
      `auth_file = ${join(dir, "userlist.txt")}`,
      "pool_mode = transaction",
      `default_pool_size = ${opts.poolSize ?? 20}`,
      "max_client_conn = 2000",
      // Tests make a database each, and PgBouncer keeps a pool per database: server connections of databases no
      // longer used close after a second idle, and all of them together stay below the cluster's max_connections
      // (200) — a pool over the cap waits for another's idle connection to close.
      "server_idle_timeout = 1",
      `max_user_connections = ${opts.maxServerConnections ?? 150}`,
      ...(opts.settings ?? []),
      `logfile = ${logFile}`,
      "log_connections = 0",
      "log_disconnections = 0",
      "",
    ].join("\n"),
  );
  if (asRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    for (const f of ["", "userlist.txt", "pgbouncer.ini"]) chownSync(join(dir, f), uid, gid);
  }
  const argv = [PGBOUNCER, join(dir, "pgbouncer.ini")];
  const child: ChildProcess = asRoot
    ? spawn("runuser", ["-u", "postgres", "--", ...argv], { stdio: "ignore" })
    : spawn(argv[0]!, argv.slice(1), { stdio: "ignore" });
  // It must not keep the test process alive: it is killed when the process exits.
  child.unref();
  const log = () => (existsSync(logFile) ? readFileSync(logFile, "utf8") : "");
  const stop = () => {
    child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", () => child.kill("SIGKILL"));
  // Ready when it accepts a connection (an event: the listening socket), or failed when it exits first.
  for (let tries = 0; ; tries++) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited (${child.exitCode}): ${log()}`);
    if (await accepts(port)) break;
    if (tries > 600) {
      stop();
      throw new Error(`pgbouncer did not listen on ${port}: ${log()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { port, url: (database = "postgres") => `postgres://postgres@127.0.0.1:${port}/${database}`, log, stop };
}

/** Whether something accepts TCP connections on 127.0.0.1:port now. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
