/**
 * Durability under SIGKILL: every write acknowledged before a kill -9 is there after the restart.
 *
 * Runs the real `platform-api serve` as a child process over one data
 * directory. Each round, concurrent writers create groups under a few
 * organizations, half over REST and half over gRPC, and record every create
 * the server acknowledged (200 / OK with its uid). After a random number of
 * acknowledgements the server gets SIGKILL; while it is down, a read-only
 * connection runs PRAGMA integrity_check and foreign_key_check; then the
 * server restarts on the same directory and every acknowledged write must be
 * readable by uid with the same name. At the end every acknowledged write of
 * every round is read again, the server stops with SIGTERM and the closed
 * database is checked once more.
 *
 *   npx tsx scripts/durability-kill.ts [--rounds 20] [--writes 1000] [--concurrency 16] [--quick] [--keep] [--inject-loss] [--postgres]
 *
 * --postgres runs the servers on a throwaway PostgreSQL cluster with fsync on
 * (Debian's binaries): every other round PostgreSQL itself is also stopped
 * with `pg_ctl -m immediate` (a crash) and started again, and the database
 * check looks for orphaned rows instead of SQLite's integrity_check.
 *
 * --writes is the mean number of acknowledged writes per round: the kill
 * comes after a random count between half and one and a half times it.
 * Exits 1 if any acknowledged write is lost or any check fails.
 * --inject-loss adds one acknowledgement the server never gave (a uid never
 * created), to show that the check catches a loss.
 */
import { randomInt } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import Database from "better-sqlite3";
import pg from "pg";
import { startPgCluster, type PgCluster } from "../test/support/pg-cluster.js";
import { mintAdminToken, startServerProcess, stopServerProcess, type ServerProcess } from "./support/cli-server.js";
import { grpcGroupsClient, restCall, restCreateGroup, type CreatedGroup } from "./support/groups-client.js";

/** A create the server acknowledged. */
interface Ack extends CreatedGroup {
  round: number;
  via: "rest" | "grpc";
}

/** What one round did. */
interface Round {
  attempted: number;
  acks: Ack[];
  /** Creates that failed while the server was still meant to be up. */
  failures: string[];
}

const ORGANIZATIONS = 4;
/** Writers give up after this many failures with the server up, so a broken server ends the round. */
const MAX_FAILURES = 10;

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string" },
    writes: { type: "string" },
    concurrency: { type: "string" },
    quick: { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
    "inject-loss": { type: "boolean", default: false },
    postgres: { type: "boolean", default: false },
  },
});
const rounds = positive("rounds", args.rounds ?? (args.quick ? "3" : "20"));
const writes = positive("writes", args.writes ?? (args.quick ? "200" : "1000"));
const concurrency = positive("concurrency", args.concurrency ?? "16");

function positive(name: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} ${raw}: must be a positive integer`);
    process.exit(2);
  }
  return n;
}

/** Runs one round against a running server: writes until the random kill, then waits for the process to die. */
async function writeUntilKilled(round: number, server: ServerProcess, token: string, orgs: readonly string[]): Promise<Round> {
  const result: Round = { attempted: 0, acks: [], failures: [] };
  const killAfter = randomInt(Math.ceil(writes / 2), Math.floor((writes * 3) / 2) + 1);
  const grpc = grpcGroupsClient(server.port, token);
  let killed = false;
  const kill = () => {
    if (killed) return;
    killed = true;
    process.kill(server.pid, "SIGKILL");
  };

  const writer = async (w: number) => {
    const via = w % 2 === 0 ? "rest" : "grpc";
    while (!killed) {
      const i = result.attempted++;
      const parent = orgs[i % orgs.length]!;
      const name = `round ${round} write ${i}`;
      try {
        const created = via === "rest" ? await restCreateGroup(server.url, token, parent, name) : await grpc.createGroup(parent, name);
        // Acknowledged, even if the answer arrives after the kill: the server said it committed.
        result.acks.push({ ...created, round, via });
        if (created.name !== name)
          result.failures.push(`${created.uid}: acknowledged with name ${JSON.stringify(created.name)}, sent ${JSON.stringify(name)}`);
        if (result.acks.length === killAfter) kill();
      } catch (err) {
        if (killed) continue;
        result.failures.push(`${via} create ${i}: ${(err as Error).message}`);
        if (result.failures.length >= MAX_FAILURES) kill();
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => writer(w)));
  grpc.close();
  const exit = await server.exited;
  if (exit.signal !== "SIGKILL") result.failures.push(`the server ended with ${exit.signal ?? `exit ${exit.code}`}, not SIGKILL`);
  return result;
}

/** PRAGMA integrity_check and foreign_key_check over a read-only connection; returns the problems found. */
function checkDatabase(dataDir: string): string[] {
  const db = new Database(join(dataDir, "platform.db"), { readonly: true, fileMustExist: true });
  try {
    const integrity = (db.pragma("integrity_check") as { integrity_check: string }[]).map((r) => r.integrity_check);
    const foreignKeys = db.pragma("foreign_key_check") as unknown[];
    const problems: string[] = [];
    if (integrity.length !== 1 || integrity[0] !== "ok") problems.push(`integrity_check: ${integrity.join("; ")}`);
    if (foreignKeys.length > 0) problems.push(`foreign_key_check: ${JSON.stringify(foreignKeys.slice(0, 5))}`);
    return problems;
  } finally {
    db.close();
  }
}

/** Reads every ack back by uid (GET); returns the ones missing or changed, and reads that failed outright. */
async function verify(
  server: ServerProcess,
  token: string,
  acks: readonly Ack[],
): Promise<{ lost: Map<string, string>; errors: string[] }> {
  const lost = new Map<string, string>();
  const errors: string[] = [];
  let next = 0;
  const reader = async () => {
    while (next < acks.length) {
      const ack = acks[next++]!;
      try {
        const res = await restCall(server.url, token, "GET", `/iam/v2beta1/groups/${ack.uid}`);
        const where = `${ack.uid} (round ${ack.round}, ${ack.via})`;
        if (res.status !== 200) lost.set(ack.uid, `${where}: GET answered ${res.status} ${JSON.stringify(res.body)}`);
        else if (res.body.name !== ack.name)
          lost.set(ack.uid, `${where}: name ${JSON.stringify(res.body.name)}, acknowledged ${JSON.stringify(ack.name)}`);
      } catch (err) {
        errors.push(`${ack.uid}: ${(err as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, reader));
  return { lost, errors };
}

/**
 * Reads the whole change feed's group.created events: each acknowledged
 * create must have exactly one, and each event's group must exist (a write
 * rolled back by the kill left no event, and a committed one its event).
 */
async function verifyEvents(server: ServerProcess, token: string, acks: readonly Ack[]): Promise<{ problems: string[]; events: number }> {
  const counts = new Map<string, number>();
  let cursor = "";
  for (;;) {
    const res = await restCall(
      server.url,
      token,
      "GET",
      `/events/v1/events?type_prefix=api.platform.iam.group.created&page_size=200${cursor ? `&page_token=${cursor}` : ""}`,
    );
    if (res.status !== 200) return { problems: [`ListEvents answered ${res.status} ${JSON.stringify(res.body)}`], events: counts.size };
    const page = res.body as { events: { subject: string }[]; nextPageToken: string };
    for (const e of page.events) counts.set(e.subject, (counts.get(e.subject) ?? 0) + 1);
    cursor = page.nextPageToken;
    if (page.events.length < 200) break;
  }
  const problems: string[] = [];
  for (const ack of acks) {
    const n = counts.get(ack.uid) ?? 0;
    if (n !== 1) problems.push(`events: ${ack.uid} (round ${ack.round}) has ${n} group.created events, not 1`);
  }
  const acknowledged = new Set(acks.map((a) => a.uid));
  for (const subject of counts.keys()) {
    if (acknowledged.has(subject)) continue;
    // Committed but not acknowledged (the kill came between): its group must be there.
    const res = await restCall(server.url, token, "GET", `/iam/v2beta1/groups/${subject}`);
    if (res.status !== 200) problems.push(`events: an event for ${subject}, whose group is not there (${res.status})`);
  }
  console.log(`events: ${counts.size} group.created events read back, ${problems.length} problem(s)`);
  return { problems, events: counts.size };
}

/** With --postgres: the cluster and the environment that points the server at its database. */
let cluster: PgCluster | undefined;
let env: Record<string, string> = {};

/** Starts the server over dataDir (or the PostgreSQL database) and mints an administrator token for it. */
async function start(dataDir: string): Promise<{ server: ServerProcess; token: string }> {
  const server = await startServerProcess(dataDir, { env });
  return { server, token: await mintAdminToken(dataDir, env) };
}

/** PostgreSQL's side of the check: no row whose parent, group or role is gone. */
async function checkPostgres(): Promise<string[]> {
  const client = new pg.Client({ connectionString: env.PLATFORM_DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query<{ what: string; n: number }>(`
      SELECT 'groups without their parent' AS what, count(*)::int AS n FROM groups g WHERE g.parent_uid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM groups p WHERE p.uid = g.parent_uid)
      UNION ALL SELECT 'role bindings without their group or role', count(*)::int FROM role_bindings b
        WHERE NOT EXISTS (SELECT 1 FROM groups g WHERE g.uid = b.parent_uid) OR NOT EXISTS (SELECT 1 FROM roles r WHERE r.uid = b.role_uid)`);
    return rows.filter((r) => r.n > 0).map((r) => `${r.what}: ${r.n}`);
  } finally {
    await client.end();
  }
}

async function main(): Promise<number> {
  const dataDir = mkdtempSync(join(tmpdir(), "platform-durability-"));
  if (args.postgres) {
    cluster = await startPgCluster({ durable: true });
    await cluster.createDatabase("durability");
    env = { PLATFORM_DATABASE_URL: cluster.url("durability") };
  }
  console.log(
    `durability${args.postgres ? " (PostgreSQL, fsync on; crashed every other round)" : ""}: ${rounds} rounds, ~${writes} writes each, ${concurrency} concurrent writers (REST and gRPC), data in ${dataDir}`,
  );
  const problems: string[] = [];
  const allAcks: Ack[] = [];
  let attempted = 0;
  const lost = new Set<string>();
  let integrityOk = 0;

  let { server, token } = await start(dataDir);
  const orgs: string[] = [];
  for (let o = 0; o < ORGANIZATIONS; o++) {
    const org = await restCreateGroup(server.url, token, null, `durability org ${o}`);
    orgs.push(org.uid);
    allAcks.push({ ...org, round: 0, via: "rest" });
  }

  for (let round = 1; round <= rounds; round++) {
    const r = await writeUntilKilled(round, server, token, orgs);
    if (args["inject-loss"] && round === 1) r.acks.push({ uid: `${orgs[0]}/${"0".repeat(16)}`, name: "never created", round, via: "rest" });
    attempted += r.attempted;
    allAcks.push(...r.acks);
    if (cluster && round % 2 === 0) {
      cluster.stop("immediate");
      cluster.start();
    }
    const dbProblems = cluster ? await checkPostgres() : checkDatabase(dataDir);
    if (dbProblems.length === 0) integrityOk++;
    ({ server, token } = await start(dataDir));
    const check = await verify(server, token, r.acks);
    for (const uid of check.lost.keys()) lost.add(uid);
    const roundProblems = [
      ...r.failures,
      ...dbProblems,
      ...[...check.lost.values()].map((l) => `lost ${l}`),
      ...check.errors.map((e) => `unverified ${e}`),
    ];
    problems.push(...roundProblems.map((p) => `round ${round}: ${p}`));
    console.log(
      `round ${round}/${rounds}: attempted ${r.attempted}, acknowledged ${r.acks.length}, SIGKILL, ` +
        `lost ${check.lost.size}, integrity ${dbProblems.length === 0 ? "ok" : "FAILED"}` +
        (roundProblems.length > 0 ? `\n  ${roundProblems.slice(0, 10).join("\n  ")}` : ""),
    );
  }

  // Every round's writes again, after all the later kills and recoveries.
  const final = await verify(server, token, allAcks);
  for (const uid of final.lost.keys()) lost.add(uid);
  problems.push(...[...final.lost.values()].map((l) => `final read: lost ${l}`), ...final.errors.map((e) => `final read: unverified ${e}`));
  // The outbox: every acknowledged create has exactly one event, and every event's group exists (no event without its write).
  const feed = await verifyEvents(server, token, allAcks);
  problems.push(...feed.problems);
  await stopServerProcess(server);
  const finalDb = cluster ? await checkPostgres() : checkDatabase(dataDir);
  cluster?.destroy();
  problems.push(...finalDb.map((p) => `after a clean stop: ${p}`));

  const acknowledged = allAcks.length;
  console.log("");
  console.log(`rounds: ${rounds}`);
  console.log(
    `kills: ${rounds} (SIGKILL during concurrent creates)${cluster ? `, PostgreSQL crashed ${Math.floor(rounds / 2)} times` : ""}`,
  );
  console.log(`writes attempted: ${attempted + ORGANIZATIONS}`);
  console.log(`acknowledged: ${acknowledged}`);
  console.log(`lost: ${lost.size}`);
  console.log(`integrity ok: ${integrityOk}/${rounds} after kills, ${finalDb.length === 0 ? "ok" : "FAILED"} after a clean stop`);
  console.log(
    `figure: ${rounds} kills, ${acknowledged.toLocaleString("en-US")} acknowledged writes, ${lost.size} lost, integrity ${integrityOk}/${rounds} ok`,
  );
  // The data stays for a post-mortem after a real failure, not after the injected one.
  const keep = args.keep || (problems.length > 0 && !args["inject-loss"]);
  if (problems.length > 0) console.log(`\n${problems.length} problem(s):\n  ${problems.slice(0, 30).join("\n  ")}`);
  if (keep) console.log(`data kept in ${dataDir}`);
  else rmSync(dataDir, { recursive: true, force: true });
  return problems.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
