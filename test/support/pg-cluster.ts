import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPgBouncer, type PgBouncer } from "./pgbouncer.js";
import { freePort } from "./serve-process.js";

/**
 * A throwaway PostgreSQL cluster for tests: Debian's binaries, initdb in a
 * temp directory, listening on 127.0.0.1 on a free port with trust auth.
 * PostgreSQL refuses to run as root, so as root it runs as the `postgres`
 * OS user. fsync is off unless durable (functional suites do not need it).
 */
export interface PgCluster {
  port: number;
  /** postgres://postgres@127.0.0.1:PORT/<database> */
  url(database?: string): string;
  createDatabase(name: string): Promise<void>;
  stop(mode?: "fast" | "immediate"): void;
  start(): void;
  destroy(): void;
}

/** The newest installed PostgreSQL's bin directory, or undefined. */
export function binDir(): string | undefined {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? undefined : join(root, versions[0], "bin");
}

/** True when PostgreSQL's server binaries are installed (suites skip with a reason otherwise). */
export function pgAvailable(): boolean {
  return binDir() !== undefined;
}

/** A test's skip option where PostgreSQL is not installed: false, or why it is skipped. */
export const PG_SKIP: false | string = !pgAvailable() && "PostgreSQL is not installed (apt-get install postgresql)";

const asRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL binary, as the postgres user when we are root. */
function run(bin: string, args: string[]): void {
  const argv = asRoot ? ["runuser", "-u", "postgres", "--", bin, ...args] : [bin, ...args];
  const res = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8", cwd: tmpdir() });
  if (res.status !== 0) throw new Error(`${bin} ${args.join(" ")} failed: ${res.stderr || res.stdout}`);
}

const live = new Set<PgCluster>();
process.once("exit", () => {
  for (const cluster of live) {
    try {
      cluster.destroy();
    } catch {
      // best effort
    }
  }
});

/** A temp directory PostgreSQL's binaries may write (owned by the postgres user when we are root). */
function clusterDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "platform-pg-"));
  if (asRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o700);
  }
  return dir;
}

/** Starts a new cluster. */
export async function startPgCluster(opts: { durable?: boolean } = {}): Promise<PgCluster> {
  const bin = binDir();
  if (!bin) throw new Error(PG_SKIP || "PostgreSQL is not installed");
  const dir = clusterDir();
  const data = join(dir, "data");
  run(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"]);
  return runCluster(bin, dir, opts);
}

/**
 * Starts a hot standby of primary: pg_basebackup (-R: it follows primary by streaming replication) into a new
 * directory, started on a port of its own. It accepts connections and reads, and refuses writes (read-only).
 */
export async function startPgStandby(primary: PgCluster): Promise<PgCluster> {
  const bin = binDir()!;
  const dir = clusterDir();
  run(join(bin, "pg_basebackup"), [
    "-D",
    join(dir, "data"),
    "-R",
    "--checkpoint=fast",
    "-h",
    "127.0.0.1",
    "-p",
    String(primary.port),
    "-U",
    "postgres",
  ]);
  return runCluster(bin, dir, {});
}

/** Creates database name through the connection to url (a cluster's postgres database). */
export async function createDatabaseAt(url: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name.replace(/"/g, "")}"`);
  } finally {
    await client.end();
  }
}

/** Runs the cluster whose data directory is dir/data on a free port of 127.0.0.1. */
async function runCluster(bin: string, dir: string, opts: { durable?: boolean }): Promise<PgCluster> {
  const data = join(dir, "data");
  const port = await freePort();
  const settings = [
    `-c listen_addresses=127.0.0.1`,
    `-c unix_socket_directories=${dir}`,
    `-c port=${port}`,
    `-c max_connections=200`,
    ...(opts.durable ? [] : ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]),
  ].join(" ");
  const cluster: PgCluster = {
    port,
    url: (database = "postgres") => `postgres://postgres@127.0.0.1:${port}/${database}`,
    createDatabase: (name) => createDatabaseAt(cluster.url(), name),
    stop(mode = "fast") {
      run(join(bin, "pg_ctl"), ["-D", data, "-m", mode, "-w", "stop"]);
    },
    start() {
      run(join(bin, "pg_ctl"), ["-D", data, "-o", settings, "-l", join(dir, "log"), "-w", "start"]);
    },
    destroy() {
      live.delete(cluster);
      try {
        cluster.stop("immediate");
      } catch {
        // already stopped
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  cluster.start();
  live.add(cluster);
  return cluster;
}

let shared: Promise<PgCluster> | undefined;
let databases = 0;

/** The cluster of this test process, started on first use. */
export function sharedPgCluster(): Promise<PgCluster> {
  shared ??= startPgCluster();
  return shared;
}

let bouncer: Promise<PgBouncer> | undefined;

/**
 * A fresh empty database on this process's cluster. With
 * PLATFORM_TEST_PGBOUNCER=1 (npm run test:pgbouncer), its URL goes through
 * a PgBouncer in transaction pooling mode in front of the cluster.
 */
export async function freshPgDatabase(): Promise<string> {
  const cluster = await sharedPgCluster();
  const name = `t${process.pid}_${++databases}`;
  await cluster.createDatabase(name);
  if (process.env.PLATFORM_TEST_PGBOUNCER !== "1") return cluster.url(name);
  bouncer ??= startPgBouncer(cluster.port);
  return (await bouncer).url(name);
}
