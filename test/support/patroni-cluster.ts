import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { binDir, createDatabaseAt } from "./pg-cluster.js";
import { skipOutsideCi } from "./proxies.js";
import { freePort } from "./serve-process.js";

/**
 * A throwaway high-availability PostgreSQL for tests, as issue 34 deploys it: a
 * single-node etcd (v3 API), two Patroni nodes with `synchronous_mode: true`,
 * and HAProxy running docs/deploy/haproxy-patroni.cfg as written (only its
 * addresses and ports filled in from its environment variables), all on
 * 127.0.0.1 on free ports, in one temporary directory that also holds every
 * log. PostgreSQL and Patroni run as the `postgres` OS user when we are root.
 * Everything is torn down by destroy(), and killed when the test process exits.
 */

/** Debian's binaries (patroni, etcd-server, haproxy, postgresql-15). */
const PATRONI = "/usr/bin/patroni";
const ETCD = "/usr/bin/etcd";
const HAPROXY = "/usr/sbin/haproxy";

/** The file operators copy, used as it is. */
export const HAPROXY_PATRONI_CONFIG = new URL("../../docs/deploy/haproxy-patroni.cfg", import.meta.url).pathname;

/** What is missing to run a cluster (Debian package names), or none. */
export function patroniClusterMissing(): string[] {
  const missing: string[] = [];
  if (!existsSync(PATRONI)) missing.push("patroni");
  if (!existsSync(ETCD)) missing.push("etcd-server");
  if (!existsSync(HAPROXY)) missing.push("haproxy");
  if (binDir() === undefined) missing.push("postgresql");
  return missing;
}

/**
 * The `skip` option of a suite that needs the cluster: a reason when a package is missing on a developer's
 * machine, false when all are installed. Under CI=true a missing package throws, so a CI that forgot to install
 * it fails instead of passing a suite it never ran.
 */
export function skipUnlessPatroniInstalled(): string | false {
  const missing = patroniClusterMissing();
  return missing.length === 0 ? false : skipOutsideCi(missing);
}

/** One Patroni member. */
export interface PatroniNode {
  /** Patroni's member name, also the server's name in haproxy-patroni.cfg (node1, node2). */
  name: string;
  pgPort: number;
  apiPort: number;
  dataDir: string;
  logFile: string;
}

/** A member as Patroni's REST API `/cluster` shows it. */
export interface ClusterMember {
  name: string;
  role: string;
  state: string;
  timeline?: number;
  lag?: number | string;
}

export interface PatroniCluster {
  /** The temporary directory: data directories, configs and every log. */
  dir: string;
  nodes: readonly PatroniNode[];
  /** HAProxy's port on 127.0.0.1: the PostgreSQL clients connect to. */
  port: number;
  /** postgres://postgres@127.0.0.1:<HAProxy>/<database>: whichever node is the primary. */
  url(database?: string): string;
  /** A URL straight to one node, bypassing HAProxy. */
  directUrl(node: string, database?: string): string;
  /** CREATE DATABASE through HAProxy. */
  createDatabase(name: string): Promise<void>;
  /** Patroni's members, from the first REST API that answers `/cluster`. */
  members(): Promise<ClusterMember[]>;
  /** The leader's member name, from `/cluster` (waits, bounded, while there is none). */
  primary(): Promise<string>;
  /** SIGKILLs the primary's postmaster (its pid from postmaster.pid); when it was sent, on performance.now()'s clock. */
  killPrimaryPostmaster(): Promise<{ node: string; atMs: number }>;
  /**
   * A planned switchover from the primary to the synchronous standby (Patroni REST `POST /switchover`, which
   * answers once it is done); when it was asked for, on performance.now()'s clock.
   */
  switchover(): Promise<{ from: string; to: string; atMs: number; answer: string }>;
  /**
   * Resolves once a node other than old answers `/primary` with 200 (both REST APIs polled every 50 ms), with
   * the time of that first 200 on performance.now()'s clock. A liveness bound (timeoutMs, 60 s by default).
   */
  waitForNewPrimary(old: string, timeoutMs?: number): Promise<{ node: string; atMs: number }>;
  /** Resolves once both members run, one the leader and the other its synchronous standby (bounded). */
  waitForHealthy(timeoutMs?: number): Promise<void>;
  /** HAProxy's log lines so far (server state changes: "Server postgres_primary/node1 is DOWN…"). */
  haproxyLog(): string;
  /** The last lines of every log (etcd, each Patroni with its PostgreSQL, HAProxy), for a failure's message. */
  logs(lines?: number): string;
  /** Stops everything and removes the directory. Safe to call twice. */
  destroy(): void;
}

const asRoot = process.getuid?.() === 0;
const postgresIds = (): { uid: number; gid: number } | undefined =>
  asRoot
    ? {
        uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim()),
        gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim()),
      }
    : undefined;

/** Dynamic configuration (bootstrap.dcs), written to etcd by the first node. */
const DCS = {
  // Patroni's rule: loop_wait + 2 * retry_timeout <= ttl. Patroni 3.0.2 checks none of it (it ran with ttl 5,
  // loop_wait 1, retry_timeout 2); its later documentation gives minimums of ttl 20, loop_wait 1 and
  // retry_timeout 3, the smallest values here, so the test stays valid on newer Patroni. loop_wait is what makes
  // failovers fast here: the leader's loop notices a crashed postmaster within it, and both a crash (with
  // primary_start_timeout 0) and a switchover release the leader key at once, so ttl (the wait for a leader
  // whose Patroni died) plays no part in this test; retry_timeout 3 keeps a loaded CI machine's slow etcd or
  // PostgreSQL call from demoting the leader.
  ttl: 20,
  loop_wait: 1,
  retry_timeout: 3,
  maximum_lag_on_failover: 1048576,
  // A commit is acknowledged only once the synchronous standby has it: a failover loses no acknowledged write.
  synchronous_mode: true,
  // A crashed primary fails over to the standby instead of being restarted in place (Patroni 3.0 reads
  // primary_start_timeout; master_start_timeout is its old name, remapped).
  primary_start_timeout: 0,
  // fsync and synchronous_commit stay on (PostgreSQL's defaults): what a crash keeps is what this test is about.
  postgresql: {
    use_pg_rewind: true,
    use_slots: true,
    parameters: { max_connections: 100, wal_log_hints: "on" },
  },
};

function nodeConfig(node: PatroniNode, etcdPort: number, dir: string, bin: string): string {
  const config = {
    scope: "platform-ha",
    name: node.name,
    restapi: { listen: `127.0.0.1:${node.apiPort}`, connect_address: `127.0.0.1:${node.apiPort}` },
    etcd3: { hosts: `127.0.0.1:${etcdPort}` },
    watchdog: { mode: "off" },
    bootstrap: {
      dcs: DCS,
      initdb: [{ encoding: "UTF8" }, { locale: "C" }, "data-checksums"],
    },
    postgresql: {
      listen: `127.0.0.1:${node.pgPort}`,
      connect_address: `127.0.0.1:${node.pgPort}`,
      data_dir: node.dataDir,
      bin_dir: bin,
      pgpass: join(dir, `${node.name}.pgpass`),
      // Trust on loopback, for the superuser and replication: a throwaway cluster.
      pg_hba: ["local all all trust", "host replication replicator 127.0.0.1/32 trust", "host all all 127.0.0.1/32 trust"],
      authentication: {
        superuser: { username: "postgres" },
        replication: { username: "replicator" },
        rewind: { username: "postgres" },
      },
      // A node whose data cannot be rewound after a failover is cloned again from the primary.
      remove_data_directory_on_rewind_failure: true,
      remove_data_directory_on_diverged_timelines: true,
      parameters: { unix_socket_directories: dir },
    },
  };
  // JSON is YAML.
  return JSON.stringify(config, null, 2);
}

/** A background process whose output goes to a file in the cluster's directory. */
interface Proc {
  child: ChildProcess;
  logFile: string;
}

function startProc(
  argv: string[],
  logFile: string,
  opts: { env?: NodeJS.ProcessEnv; ids?: { uid: number; gid: number }; cwd: string },
): Proc {
  const fd = openSync(logFile, "a");
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ["ignore", fd, fd],
    ...(opts.ids ?? {}),
  });
  closeSync(fd);
  child.on("error", () => {});
  // It must not keep the test process alive; whatever still runs at exit is killed (see live below).
  child.unref();
  return { child, logFile };
}

const running = (p: Proc | undefined) => p !== undefined && p.child.exitCode === null && p.child.signalCode === null;

function readIfExists(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

const tail = (text: string, n: number) => text.split("\n").slice(-n).join("\n");

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** GET (or another method) on a Patroni REST API: the status and body, or status 0 when it did not answer. */
async function api(
  port: number,
  path: string,
  init: { method?: string; body?: unknown; timeoutMs?: number } = {},
): Promise<{ status: number; text: string }> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, {
      method: init.method ?? "GET",
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      headers: init.body === undefined ? {} : { "content-type": "application/json" },
      signal: AbortSignal.timeout(init.timeoutMs ?? 5_000),
    });
    return { status: res.status, text: await res.text() };
  } catch {
    return { status: 0, text: "" };
  }
}

/** Polls check until it returns something other than undefined; throws after timeoutMs (a liveness bound). */
async function poll<T>(
  check: () => Promise<T | undefined>,
  what: string,
  timeoutMs: number,
  logs: () => string,
  everyMs = 100,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const found = await check();
    if (found !== undefined) return found;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms\n${logs()}`);
    await sleep(everyMs);
  }
}

const live = new Set<PatroniCluster>();
function destroyAll(): void {
  for (const cluster of live) {
    try {
      cluster.destroy();
    } catch {
      // best effort
    }
  }
}
process.once("exit", destroyAll);
// A test process ended by a signal (the test runner's timeout, ^C) runs no exit handler: exit instead, so that
// this one and the others (the servers' children killed by child-process.ts) run.
for (const [signal, code] of [
  ["SIGINT", 130],
  ["SIGTERM", 143],
] as const) {
  process.once(signal, () => process.exit(code));
}

/** Starts etcd, two Patroni nodes and HAProxy; resolves once the primary is reachable through HAProxy with a synchronous standby. */
export async function startPatroniCluster(opts: { timeoutMs?: number } = {}): Promise<PatroniCluster> {
  const missing = patroniClusterMissing();
  if (missing.length > 0) throw new Error(`not installed: ${missing.join(", ")}`);
  const bin = binDir()!;
  const timeoutMs = opts.timeoutMs ?? 90_000;
  const ids = postgresIds();
  const dir = mkdtempSync(join(tmpdir(), "platform-patroni-"));
  if (ids) chownSync(dir, ids.uid, ids.gid);
  chmodSync(dir, 0o700);
  const [etcdPort, etcdPeerPort, haproxyPort, ...nodePorts] = await Promise.all(Array.from({ length: 7 }, () => freePort()));
  const nodes: PatroniNode[] = [1, 2].map((n) => ({
    name: `node${n}`,
    pgPort: nodePorts[(n - 1) * 2]!,
    apiPort: nodePorts[(n - 1) * 2 + 1]!,
    dataDir: join(dir, `node${n}`, "data"),
    logFile: join(dir, `node${n}.log`),
  }));
  const etcdLog = join(dir, "etcd.log");
  const haproxyLogFile = join(dir, "haproxy.log");
  const procs: { etcd?: Proc; haproxy?: Proc; patroni: Proc[] } = { patroni: [] };
  let destroyed = false;

  const logs = (lines = 60) =>
    [["etcd", etcdLog], ...nodes.map((n) => [`patroni ${n.name}`, n.logFile]), ["haproxy", haproxyLogFile]]
      .map(([name, file]) => `----- ${name} (${file}) -----\n${tail(readIfExists(file!), lines)}`)
      .join("\n");

  const members = async (): Promise<ClusterMember[]> => {
    for (const node of nodes) {
      const res = await api(node.apiPort, "/cluster");
      if (res.status === 200) return (JSON.parse(res.text) as { members: ClusterMember[] }).members;
    }
    return [];
  };
  const leaderOf = (ms: ClusterMember[]) => ms.find((m) => m.role === "leader" || m.role === "master" || m.role === "primary");

  const cluster: PatroniCluster = {
    dir,
    nodes,
    port: haproxyPort!,
    url: (database = "postgres") => `postgres://postgres@127.0.0.1:${haproxyPort}/${database}`,
    directUrl: (name, database = "postgres") => `postgres://postgres@127.0.0.1:${nodes.find((n) => n.name === name)!.pgPort}/${database}`,
    createDatabase: (name) => createDatabaseAt(cluster.url(), name),
    members,
    primary: () =>
      poll(
        async () => {
          const leader = leaderOf(await members());
          return leader?.state === "running" ? leader.name : undefined;
        },
        "a running leader",
        timeoutMs,
        logs,
      ),
    async killPrimaryPostmaster() {
      const name = await cluster.primary();
      const node = nodes.find((n) => n.name === name)!;
      const pid = Number(readFileSync(join(node.dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
      if (!(pid > 0)) throw new Error(`no postmaster pid in ${node.dataDir}/postmaster.pid`);
      const atMs = performance.now();
      process.kill(pid, "SIGKILL");
      return { node: name, atMs };
    },
    async switchover() {
      const from = await cluster.primary();
      const candidate = (await members()).find((m) => m.name !== from && m.role === "sync_standby" && m.state === "running");
      if (!candidate) throw new Error(`no running synchronous standby to switch over to: ${JSON.stringify(await members())}\n${logs()}`);
      const leader = nodes.find((n) => n.name === from)!;
      const atMs = performance.now();
      const deadline = atMs + timeoutMs;
      for (;;) {
        const body = { leader: from, candidate: candidate.name };
        const res = await api(leader.apiPort, "/switchover", { method: "POST", body, timeoutMs: 60_000 });
        if (res.status === 200) return { from, to: candidate.name, atMs, answer: res.text };
        // Refused before anything was done (412: the candidate not yet a healthy synchronous standby in Patroni's
        // eyes; 503: no switchover possible right now) with the leader unchanged: asked again, within the bound.
        const again = (res.status === 412 || res.status === 503) && leaderOf(await members())?.name === from;
        if (!again || performance.now() > deadline) throw new Error(`POST /switchover answered ${res.status}: ${res.text}\n${logs()}`);
        await sleep(500);
      }
    },
    waitForNewPrimary: (old, bound = 60_000) =>
      poll(
        async () => {
          const others = nodes.filter((n) => n.name !== old);
          const answers = await Promise.all(others.map((n) => api(n.apiPort, "/primary", { timeoutMs: 2_000 })));
          const atMs = performance.now();
          const i = answers.findIndex((a) => a.status === 200);
          return i < 0 ? undefined : { node: others[i]!.name, atMs };
        },
        `a primary other than ${old}`,
        bound,
        logs,
        50,
      ),
    waitForHealthy: (bound = timeoutMs) =>
      poll(
        async () => {
          const ms = await members();
          const leader = leaderOf(ms);
          const standby = ms.find((m) => m.role === "sync_standby");
          return leader?.state === "running" && standby?.state === "running" && ms.length === nodes.length ? true : undefined;
        },
        "a running leader and a running synchronous standby",
        bound,
        logs,
        200,
      ).then(() => undefined),
    haproxyLog: () => readIfExists(haproxyLogFile),
    logs,
    destroy() {
      if (destroyed) return;
      destroyed = true;
      live.delete(cluster);
      // Patroni first, so that it restarts nothing; then each PostgreSQL, stopped "immediate" by pg_ctl (its
      // shared memory released), or killed.
      for (const p of procs.patroni) if (running(p)) p.child.kill("SIGKILL");
      for (const node of nodes) {
        if (!existsSync(join(node.dataDir, "postmaster.pid"))) continue;
        const argv = [join(bin, "pg_ctl"), "-D", node.dataDir, "-m", "immediate", "-w", "-t", "10", "stop"];
        const res = spawnSync(asRoot ? "runuser" : argv[0]!, asRoot ? ["-u", "postgres", "--", ...argv] : argv.slice(1), {
          cwd: tmpdir(),
          stdio: "ignore",
          timeout: 15_000,
        });
        if (res.status !== 0) {
          const pid = Number(readIfExists(join(node.dataDir, "postmaster.pid")).split("\n")[0]);
          if (pid > 0) {
            try {
              process.kill(pid, "SIGKILL");
            } catch {
              // gone
            }
          }
        }
      }
      if (running(procs.haproxy)) procs.haproxy!.child.kill("SIGKILL");
      if (running(procs.etcd)) procs.etcd!.child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    },
  };
  live.add(cluster);

  try {
    // etcd, as whoever we are (it needs no particular user), its data in the cluster's directory.
    mkdirSync(join(dir, "etcd"), { mode: 0o700 });
    procs.etcd = startProc(
      [
        ETCD,
        "--name=etcd0",
        `--data-dir=${join(dir, "etcd", "data")}`,
        `--listen-client-urls=http://127.0.0.1:${etcdPort}`,
        `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
        `--listen-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
        `--initial-cluster=etcd0=http://127.0.0.1:${etcdPeerPort}`,
        "--initial-cluster-state=new",
      ],
      etcdLog,
      { cwd: dir },
    );
    await poll(
      async () => {
        if (!running(procs.etcd)) throw new Error(`etcd exited:\n${logs()}`);
        const res = await api(etcdPort!, "/health");
        return res.status === 200 && /"health":\s*"true"/.test(res.text) ? true : undefined;
      },
      "etcd healthy",
      timeoutMs,
      logs,
    );

    // Both Patroni nodes at once: one wins the initialize key and runs initdb, the other clones it.
    for (const node of nodes) {
      mkdirSync(join(dir, node.name), { mode: 0o700 });
      if (ids) chownSync(join(dir, node.name), ids.uid, ids.gid);
      const configFile = join(dir, `${node.name}.yml`);
      writeFileSync(configFile, nodeConfig(node, etcdPort!, dir, bin));
      if (ids) chownSync(configFile, ids.uid, ids.gid);
      // As the postgres user (spawn's uid/gid: what runuser -u postgres does, minus a login environment).
      const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, LANG: "C.UTF-8", PYTHONUNBUFFERED: "1" };
      procs.patroni.push(startProc([PATRONI, configFile], node.logFile, { env, ids, cwd: dir }));
    }
    await poll(
      async () => {
        for (const p of procs.patroni) if (!running(p)) throw new Error(`a Patroni node exited:\n${logs()}`);
        const ms = await members();
        return leaderOf(ms)?.state === "running" && ms.some((m) => m.role === "sync_standby" && m.state === "running") ? true : undefined;
      },
      "a leader and a synchronous standby",
      timeoutMs,
      logs,
      200,
    );

    // HAProxy with the deploy file as written: only its environment variables are ours.
    const haproxyEnv = {
      ...process.env,
      PATRONI_LISTEN: `127.0.0.1:${haproxyPort}`,
      PATRONI_NODE_1: `127.0.0.1:${nodes[0]!.pgPort}`,
      PATRONI_NODE_1_API_PORT: String(nodes[0]!.apiPort),
      PATRONI_NODE_2: `127.0.0.1:${nodes[1]!.pgPort}`,
      PATRONI_NODE_2_API_PORT: String(nodes[1]!.apiPort),
    };
    procs.haproxy = startProc([HAPROXY, "-db", "-f", HAPROXY_PATRONI_CONFIG], haproxyLogFile, { env: haproxyEnv, cwd: dir });
    // Servers start UP in HAProxy 2.6: wait until the standby has been marked DOWN, then for a connection
    // through HAProxy to reach the primary.
    const standby = (await members()).find((m) => m.role !== "leader")!.name;
    await poll(
      async () => {
        if (!running(procs.haproxy)) throw new Error(`haproxy exited:\n${logs()}`);
        return new RegExp(`postgres_primary/${standby} is DOWN`).test(cluster.haproxyLog()) ? true : undefined;
      },
      `HAProxy marking ${standby} DOWN`,
      timeoutMs,
      logs,
    );
    await poll(
      async () => {
        const client = new pg.Client({ connectionString: cluster.url(), connectionTimeoutMillis: 2_000 });
        try {
          await client.connect();
          const { rows } = await client.query<{ standby: boolean }>("SELECT pg_is_in_recovery() AS standby");
          return rows[0]?.standby === false ? true : undefined;
        } catch {
          return undefined;
        } finally {
          await client.end().catch(() => {});
        }
      },
      "the primary through HAProxy",
      timeoutMs,
      logs,
    );
    return cluster;
  } catch (err) {
    cluster.destroy();
    throw err;
  }
}
