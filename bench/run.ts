/**
 * `npm run bench`: the performance budget (docs/performance.md), measured side by side
 * in one run. Rows are compared with ceilings measured in the same rounds,
 * so runs on different or busy machines stay comparable: a bare fastify
 * route returning the very status, headers and bytes the server answered
 * (HTTP rows), and a bare @grpc/grpc-js server returning the very message
 * bytes and metadata (the gRPC row), each in a plain node process
 * (bench/ceilings.mjs). HTTP/1.1 rows load with autocannon (50 connections),
 * h2c rows with h2load (4 connections × 32 streams, one thread). The API
 * server runs as users run it (`npm start`): `node bin/platform-api.js
 * serve`, compiled, at the default LOG_LEVEL, its stdout (one JSON line per
 * RPC) appended to a file. The cost of logging is a ratio of the same run,
 * between two more servers that serve only REST Get, one at that level and one
 * at LOG_LEVEL=silent: a server that has served every row runs REST Get some
 * 7% slower than a fresh one whatever its level (V8 has seen more shapes), so
 * the main server cannot be the logged half of the pair.
 *
 * Environment: BENCH_ROUNDS (5), BENCH_DURATION seconds per row (4),
 * BENCH_GROUPS (100000), BENCH_ONLY=<comma-separated scenario key substrings;
 * one ending in $ names a whole key: "restGet$" is REST Get alone>
 * (the ceilings those rows are compared with run too), BENCH_CPU_PROF=<dir>
 * for one V8 CPU profile of the server per scenario, BENCH_LOG_LEVEL (the
 * measured server's LOG_LEVEL, default info), and BENCH_BACKEND=postgres
 * (`npm run bench:postgres`): the same rows on a throwaway PostgreSQL cluster
 * with fsync on, served with 1 and then 2 worker processes.
 * BENCH_COMPARE=<another checkout, built> runs that checkout's server too, on
 * the same data, and measures its REST Get, gRPC Get, List and Connect rows
 * in the same rounds: before and after a change, on a noisy machine.
 */
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import http2 from "node:http2";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import type autocannon from "autocannon";
import { GetGroupRequestSchema } from "../gen/platformapi/iam/v2beta1/groups_pb.js";
import { startPgCluster, type PgCluster } from "../test/support/pg-cluster.js";
import { recordGrpcAnswer, recordHttpAnswer, startCeiling, type Ceiling } from "./ceiling-targets.js";
import { postgresCommitRate, sqliteCommitRate } from "./commit-rate.js";
import { autocannonLoad, cpuMillis, H2LOAD, h2loadRow, type H2Request, type Row } from "./load.js";
import { printBudget, printCpuPerCall, printTable, Samples, type ScenarioInfo } from "./report.js";
import { okCount, seed, startServer, stopServer, type ServerTarget } from "./server-target.js";

const DURATION = Number(process.env.BENCH_DURATION ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const GROUPS = Number(process.env.BENCH_GROUPS ?? 100_000);
const CONNECTIONS = 50;
/** BENCH_CPU_PROF=<dir>: the measured server writes one V8 CPU profile per scenario there, <pid>-<n>.cpuprofile (open in Chrome DevTools). */
const CPU_PROF_DIR = process.env.BENCH_CPU_PROF;
/**
 * BENCH_ONLY=<substrings, comma-separated>: run only the rows whose key contains one; "restGet" runs every REST Get
 * row, "restGet$" (a whole key) only the REST Get row, without the logging pair.
 */
const ONLY = process.env.BENCH_ONLY?.toLowerCase()
  .split(",")
  .map((s) => s.trim())
  .filter(Boolean);
const POSTGRES = process.env.BENCH_BACKEND === "postgres";
/** BENCH_LOG_LEVEL: the measured server's LOG_LEVEL; by default the server's own default, as users run it. */
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? "info";
const GET_GROUP = "/platformapi.iam.v2beta1.GroupsService/GetGroup";
/** BENCH_COMPARE: the root of another built checkout whose server is measured alongside (the rows COMPARED). */
const COMPARE = process.env.BENCH_COMPARE;
const COMPARED = ["restGet", "listFirst", "grpcGet", "connectGet", "create"];

/** One row of the table: which process it loads, how, and which ceiling it is compared with. */
interface Scenario extends ScenarioInfo {
  /** The process whose CPU is counted (default: the main server). */
  target?: ChildProcess;
  run: () => Promise<Row>;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "platform-bench-"));
  if (CPU_PROF_DIR) mkdirSync(CPU_PROF_DIR, { recursive: true });
  let cluster: PgCluster | undefined;
  try {
    let databaseUrl = "";
    if (POSTGRES) {
      // fsync on: the figures are what a durable deployment gets.
      cluster = await startPgCluster({ durable: true });
      await cluster.createDatabase("bench");
      databaseUrl = cluster.url("bench");
    }
    const seeded = await seed(dataDir, databaseUrl, GROUPS);
    const commitRate = POSTGRES ? await postgresCommitRate(cluster!.url(), DURATION, 10) : sqliteCommitRate(dataDir, DURATION);
    console.log(
      `single-row commits of a bare table, same engine and disk: ${Math.round(commitRate)}/s${POSTGRES ? " (10 connections)" : ""}`,
    );
    // BENCH_CPU_PROF: on SQLite, one profile per scenario (SIGUSR2, see profile-on-signal.mjs); on PostgreSQL,
    // each process writes one profile of its whole run when it exits.
    const profile = !CPU_PROF_DIR
      ? []
      : POSTGRES
        ? ["--cpu-prof", "--cpu-prof-dir", CPU_PROF_DIR]
        : ["--import", join(import.meta.dirname, "profile-on-signal.mjs")];
    for (const processes of POSTGRES ? [1, 2] : [1]) {
      const start = (logLevel: string, logFile: string) =>
        startServer({ dataDir, databaseUrl, workers: processes, logLevel, logFile, profile });
      // As users run it: the default level, one JSON line per RPC appended to a file.
      const server = await start(LOG_LEVEL, join(dataDir, `server-${processes}.log`));
      const pair: Partial<LoggingPair> = {};
      let baseline: ServerTarget | undefined;
      try {
        if (COMPARE)
          baseline = await startServer({
            dataDir,
            databaseUrl,
            workers: processes,
            logLevel: LOG_LEVEL,
            logFile: join(dataDir, "baseline.log"),
            profile: [],
            root: COMPARE,
          });
        // The cost of logging: two servers with the same history, differing only in their level.
        if (selected("restGetLogged") || selected("restGetSilent")) {
          pair.logged = await start(LOG_LEVEL, join(dataDir, `server-${processes}-logged.log`));
          pair.silent = await start("silent", join(dataDir, `server-${processes}-silent.log`));
        }
        await measure(
          server,
          pair.logged && pair.silent ? (pair as LoggingPair) : undefined,
          seeded,
          dataDir,
          commitRate,
          processes,
          baseline,
        );
      } finally {
        const started = [server, pair.logged, pair.silent, baseline].filter((s): s is ServerTarget => s !== undefined);
        await Promise.all(started.map(stopServer));
      }
      const size = statSync(server.logFile).size;
      console.log(`(the LOG_LEVEL=${LOG_LEVEL} server wrote ${(size / 2 ** 20).toFixed(1)} MiB of log to its stdout file)`);
    }
  } finally {
    cluster?.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Whether the row with this key was asked for (BENCH_ONLY). */
function selected(key: string): boolean {
  return !ONLY || ONLY.some((o) => (o.endsWith("$") ? key.toLowerCase() === o.slice(0, -1) : key.toLowerCase().includes(o)));
}

/** Two servers that serve only the REST Get rows of the logging cost: one at LOG_LEVEL, one silent. */
interface LoggingPair {
  logged: ServerTarget;
  silent: ServerTarget;
}

/** The status of one h2c request with prior knowledge: whether the server serves this protocol over HTTP/2. */
async function h2cStatus(request: H2Request): Promise<number> {
  const url = new URL(request.url);
  const session = http2.connect(url.origin);
  try {
    return await new Promise<number>((resolve, reject) => {
      session.once("error", reject);
      const stream = session.request({
        ":method": request.body ? "POST" : "GET",
        ":path": url.pathname + url.search,
        ...request.headers,
      });
      stream.once("response", (headers) => resolve(Number(headers[":status"])));
      stream.once("error", reject);
      stream.resume();
      stream.end(request.body && Buffer.from(request.body));
    });
  } finally {
    session.close();
  }
}

/** Every row against one running server (and the logging pair), in rounds, then the table and the budget. */
async function measure(
  server: ServerTarget,
  pair: LoggingPair | undefined,
  seeded: { uid: string; orgUid: string; token: string },
  dataDir: string,
  commitRate: number,
  processes: number,
  baseline?: ServerTarget,
): Promise<void> {
  const headers = { authorization: `Bearer ${seeded.token}` };
  const ceilings: Ceiling[] = [];
  try {
    const base = `http://127.0.0.1:${server.port}`;
    const getPath = `/iam/v2beta1/groups/${seeded.uid}`;
    const listPath = `/iam/v2beta1/groups?page_size=50`;
    const getGroup = toBinary(GetGroupRequestSchema, create(GetGroupRequestSchema, { uid: seeded.uid }));
    const http1 = (name: string, url: string, opts: Partial<autocannon.Options> = {}) =>
      autocannonLoad(name, url, { connections: CONNECTIONS, durationS: DURATION, ...opts, headers: { ...headers, ...opts.headers } });
    const h2c = (name: string, request: H2Request) => h2loadRow(name, request, { durationS: DURATION, dir: dataDir });

    // The ceilings answer what the server answered, byte for byte, on exact routes.
    const answers = [await recordHttpAnswer(base + getPath, headers), await recordHttpAnswer(base + listPath, headers)];
    const httpCeiling = await startCeiling("http", { routes: answers }, join(dataDir, "ceiling-http.json"));
    ceilings.push(httpCeiling);
    const grpcAnswer = H2LOAD && (await recordGrpcAnswer(server.port, GET_GROUP, getGroup, seeded.token));
    const grpcCeiling = grpcAnswer ? await startCeiling("grpc", grpcAnswer, join(dataDir, "ceiling-grpc.json")) : undefined;
    if (grpcCeiling) ceilings.push(grpcCeiling);
    else console.log("(h2load not found: no h2c rows; on Debian: apt-get install nghttp2-client)");

    const deep = await (await fetch(`${base}${listPath}&skip=${GROUPS - 1000}`, { headers })).json();
    const deepPath = `${listPath}&page_token=${encodeURIComponent(deep.nextPageToken)}`;
    // Every page of the list in turn: more pages than the page cache holds, so each is a miss.
    const pagePaths = [listPath];
    if (selected("listWalk")) {
      for (let token = ""; ; ) {
        const page = await (await fetch(`${base}${listPath}&page_token=${encodeURIComponent(token)}`, { headers })).json();
        if (!page.nextPageToken) break;
        token = page.nextPageToken;
        pagePaths.push(`${listPath}&page_token=${encodeURIComponent(token)}`);
      }
    }
    let nextPage = 0;

    const grpcRequest = (port: number): H2Request => ({
      url: `http://127.0.0.1:${port}${GET_GROUP}`,
      headers: { "content-type": "application/grpc", te: "trailers", ...headers },
      body: grpcFrame(getGroup),
    });
    const restH2c: H2Request = { url: base + getPath, headers };
    const connectH2c: H2Request = { url: base + GET_GROUP, headers: { "content-type": "application/proto", ...headers }, body: getGroup };
    // REST and Connect over h2c exist once the server serves them there (an older server answers 415).
    const h2cServed = async (request: H2Request) => H2LOAD !== undefined && (await h2cStatus(request)) === 200;
    const [restOverH2c, connectOverH2c] = [await h2cServed(restH2c), await h2cServed(connectH2c)];
    if (H2LOAD && !(restOverH2c && connectOverH2c))
      console.log("(this server does not serve REST or Connect over h2c: those rows are left out)");

    const http = (key: string, ceiling = "ceiling") => ({ key, transport: "HTTP/1.1", ceiling });
    const scenarios: Scenario[] = [
      {
        ...http("ceiling"),
        target: httpCeiling.child,
        run: () =>
          autocannonLoad("ceiling: bare fastify, same answer", `http://127.0.0.1:${httpCeiling.port}${getPath}`, {
            connections: CONNECTIONS,
            durationS: DURATION,
          }),
      },
      {
        ...http("ceilingList", "ceilingList"),
        target: httpCeiling.child,
        run: () =>
          autocannonLoad("ceiling: bare fastify, list page answer", `http://127.0.0.1:${httpCeiling.port}${listPath}`, {
            connections: CONNECTIONS,
            durationS: DURATION,
          }),
      },
      ...(grpcCeiling
        ? [
            {
              key: "ceilingGrpc",
              transport: "h2c",
              ceiling: "ceilingGrpc",
              target: grpcCeiling.child,
              run: () => h2c("ceiling: bare grpc-js, same answer", grpcRequest(grpcCeiling.port)),
            },
          ]
        : []),
      { ...http("restGet"), run: () => http1("REST Get group (with auth)", base + getPath) },
      {
        ...http("restGetLogged"),
        target: pair?.logged.child,
        run: () => http1(`REST Get, logging pair: LOG_LEVEL=${LOG_LEVEL}`, `http://127.0.0.1:${pair!.logged.port}${getPath}`),
      },
      {
        ...http("restGetSilent"),
        target: pair?.silent.child,
        run: () => http1("REST Get, logging pair: LOG_LEVEL=silent", `http://127.0.0.1:${pair!.silent.port}${getPath}`),
      },
      ...(restOverH2c
        ? [{ key: "restGetH2c", transport: "h2c", ceiling: "ceiling", run: () => h2c("REST Get group (h2load)", restH2c) }]
        : []),
      { ...http("listFirst", "ceilingList"), run: () => http1(`REST List 50 of ${GROUPS} (first page)`, base + listPath) },
      {
        ...http("listFirstBrotli", "ceilingList"),
        run: () =>
          http1(`REST List 50 of ${GROUPS} (first page, Accept-Encoding as fetch sends it: br)`, base + listPath, {
            headers: { "accept-encoding": "gzip, deflate, br" },
          }),
      },
      {
        ...http("listFirstGzip", "ceilingList"),
        run: () =>
          http1(`REST List 50 of ${GROUPS} (first page, Accept-Encoding: gzip as curl --compressed)`, base + listPath, {
            headers: { "accept-encoding": "gzip" },
          }),
      },
      {
        ...http("listDeep", "ceilingList"),
        run: () => http1(`REST List 50 of ${GROUPS} (page ${Math.round((GROUPS - 1000) / 50)})`, base + deepPath),
      },
      {
        ...http("listWalk", "ceilingList"),
        run: () =>
          http1(`REST List 50 of ${GROUPS} (all ${pagePaths.length} pages in turn: uncached)`, base + pagePaths[0], {
            requests: [{ setupRequest: (req) => ({ ...req, path: pagePaths[nextPage++ % pagePaths.length]! }) }],
          }),
      },
      ...(H2LOAD
        ? [
            {
              key: "grpcGet",
              transport: "h2c",
              ceiling: "ceilingGrpc",
              run: async () => {
                // gRPC answers errors with HTTP 200 too: the server's own count of OK calls must agree.
                const before = await okCount(server.port, "grpc");
                const row = await h2c("gRPC Get group (h2load)", grpcRequest(server.port));
                const ok = (await okCount(server.port, "grpc")) - before;
                if (ok < row.rps * DURATION)
                  throw new Error(`gRPC Get: h2load saw ${row.rps * DURATION} answers, the server answered ${ok} OK`);
                return row;
              },
            },
          ]
        : []),
      {
        ...http("connectGet"),
        run: () =>
          http1("Connect Get group (protobuf POST, as connect-web sends it)", base + GET_GROUP, {
            method: "POST",
            headers: { "content-type": "application/proto" },
            body: Buffer.from(getGroup),
          }),
      },
      ...(connectOverH2c
        ? [
            {
              key: "connectGetH2c",
              transport: "h2c",
              ceiling: "ceiling",
              run: () => h2c("Connect Get group (protobuf POST, h2load)", connectH2c),
            },
          ]
        : []),
      {
        ...http("create"),
        run: () =>
          http1("REST Create group (fsync per commit)", `${base}/iam/v2beta1/groups/${seeded.orgUid}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ name: "bench folder" }),
            connections: 32,
          }),
      },
    ];
    // The logging pair needs its servers; the gRPC row checks its answers against one process's /metrics.
    const wanted = scenarios.filter(
      (s) =>
        selected(s.key) &&
        !(s.key.startsWith("restGet") && s.key !== "restGet" && s.key !== "restGetH2c" && !pair) &&
        (s.key !== "grpcGet" || processes === 1),
    );
    if (baseline)
      wanted.push(
        ...baselineRows(baseline, {
          getPath,
          createPath: `/iam/v2beta1/groups/${seeded.orgUid}`,
          listPath,
          headers,
          getGroup,
          grpcRequest,
          http1,
          h2c,
        }).filter((s) => selected(s.key.split("@")[0]!)),
      );
    const needed = new Set(wanted.map((s) => s.ceiling));
    const rows = [...scenarios.filter((s) => s.key.startsWith("ceiling") && needed.has(s.key)), ...wanted];
    const samples = await runRounds(rows, server, processes);

    const backend = POSTGRES ? `PostgreSQL, ${processes} server process${processes > 1 ? "es" : ""}` : "SQLite, one process";
    console.log(
      `\nPlatform API benchmark (${backend}) — node ${process.version}, ${cpus().length} cores, ${cpus()[0]?.model ?? "?"}; ${ROUNDS} rounds of ${DURATION}s per row; HTTP/1.1 by autocannon, ${CONNECTIONS} connections; h2c by h2load, 4 connections × 32 streams; medians`,
    );
    printTable(samples, rows);
    console.log("\nBudget (docs/performance.md):");
    const budget = (label: string, keys: string[], value: () => number, bound: { atLeast?: number; atMost?: number }, unit?: string) =>
      printBudget(samples, label, keys, value, bound, unit);
    budget("REST Get with auth / ceiling", ["restGet", "ceiling"], () => samples.ratio("restGet", "ceiling"), { atLeast: 35 });
    budget(
      `logging: REST Get at LOG_LEVEL=${LOG_LEVEL} / at silent`,
      ["restGetLogged", "restGetSilent"],
      () => samples.ratio("restGetLogged", "restGetSilent"),
      {
        atLeast: 95,
      },
    );
    budget("gRPC Get / REST Get", ["grpcGet", "restGet"], () => samples.ratio("grpcGet", "restGet"), { atLeast: 80 });
    budget(`List 50 of ${GROUPS}, first page`, ["listFirst"], () => samples.figure("listFirst").rps, { atLeast: 3000 }, " req/s");
    budget("deep page / first page", ["listDeep", "listFirst"], () => samples.ratio("listDeep", "listFirst"), { atLeast: 90 });
    budget("creates / single-row commits of the same engine", ["create"], () => (samples.figure("create").rps / commitRate) * 100, {
      atLeast: 50,
    });
    // "gRPC and the new HTTP/2 paths cost no more server CPU per call than REST over HTTP/1.1."
    const cpuOf = (r: Row) => r.cpuPerRequest;
    for (const [key, label] of [
      ["grpcGet", "gRPC"],
      ["restGetH2c", "REST over h2c"],
      ["connectGetH2c", "Connect over h2c"],
    ] as const) {
      budget(`server CPU per call, ${label} / REST over HTTP/1.1`, [key, "restGet"], () => samples.ratio(key, "restGet", cpuOf), {
        atMost: 100,
      });
    }
    if (samples.has("grpcGet", "ceilingGrpc"))
      console.log(`        (gRPC Get / bare grpc-js serving the same answer: ${samples.ratio("grpcGet", "ceilingGrpc").toFixed(1)}%)`);
    if (samples.has("listFirst", "ceilingList"))
      console.log(
        `        (List first page / bare fastify serving the same list answer: ${samples.ratio("listFirst", "ceilingList").toFixed(1)}%)`,
      );
    if (baseline) printComparison(samples);
    printCpuPerCall(
      samples,
      [
        { key: "ceiling", label: "bare fastify, HTTP/1.1" },
        { key: "ceilingGrpc", label: "bare grpc-js, h2c" },
        { key: "restGet", label: "REST, HTTP/1.1" },
        { key: "restGetH2c", label: "REST, h2c" },
        { key: "connectGet", label: "Connect, HTTP/1.1" },
        { key: "connectGetH2c", label: "Connect, h2c" },
        { key: "grpcGet", label: "gRPC, h2c" },
      ],
      "restGet",
    );
  } finally {
    for (const c of ceilings) c.child.kill("SIGTERM");
  }
}

/**
 * Runs every row ROUNDS times. Rounds alternate the scenarios, so a slow
 * spell of a shared machine hits every row alike; every other round runs
 * them in reverse, so no row always follows the same one (the two halves of
 * the logging pair take turns going first). With BENCH_CPU_PROF, the first
 * round of each server row is profiled.
 */
async function runRounds(rows: Scenario[], server: ServerTarget, processes: number): Promise<Samples> {
  const samples = new Samples();
  const profiles = new Map<number, number>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of round % 2 === 0 ? rows : [...rows].reverse()) {
      const target = s.target ?? server.child;
      const before = cpuMillis(target.pid!);
      const profiled = CPU_PROF_DIR !== undefined && !POSTGRES && round === 0 && !s.key.startsWith("ceiling");
      if (profiled) target.kill("SIGUSR2");
      const row = await s.run();
      if (profiled) {
        target.kill("SIGUSR2");
        profiles.set(target.pid!, (profiles.get(target.pid!) ?? 0) + 1);
        console.error(`profile of ${s.key}: ${join(CPU_PROF_DIR!, `${target.pid}-${profiles.get(target.pid!)}.cpuprofile`)}`);
        await new Promise((r) => setTimeout(r, 500)); // written before the next scenario starts
      }
      const after = cpuMillis(target.pid!);
      // With several worker processes, the CPU of the process started is not all the server's.
      if (before !== null && after !== null && (processes === 1 || s.key.startsWith("ceiling")))
        row.cpuPerRequest = ((after - before) * 1000) / (row.rps * DURATION);
      samples.add(s.key, row);
    }
  }
  return samples;
}

/** How the rows of the main server are made, for the same rows against BENCH_COMPARE's server. */
interface RowMakers {
  getPath: string;
  /** Where the create row posts (a folder under the seeded organization). */
  createPath: string;
  listPath: string;
  headers: Record<string, string>;
  getGroup: Uint8Array;
  grpcRequest: (port: number) => H2Request;
  http1: (name: string, url: string, opts?: Partial<autocannon.Options>) => Promise<Row>;
  h2c: (name: string, request: H2Request) => Promise<Row>;
}

/** The COMPARED rows against BENCH_COMPARE's server, keyed "<key>@baseline", its process's CPU counted. */
function baselineRows(baseline: ServerTarget, make: RowMakers): Scenario[] {
  const base = `http://127.0.0.1:${baseline.port}`;
  const row = (key: string, transport: string, ceiling: string, run: () => Promise<Row>): Scenario => ({
    key: `${key}@baseline`,
    transport,
    ceiling,
    target: baseline.child,
    run: async () => ({ ...(await run()), name: `BENCH_COMPARE: ${key}` }),
  });
  return [
    row("restGet", "HTTP/1.1", "ceiling", () => make.http1("", base + make.getPath)),
    row("listFirst", "HTTP/1.1", "ceilingList", () => make.http1("", base + make.listPath)),
    ...(H2LOAD ? [row("grpcGet", "h2c", "ceilingGrpc", () => make.h2c("", make.grpcRequest(baseline.port)))] : []),
    row("connectGet", "HTTP/1.1", "ceiling", () =>
      make.http1("", base + GET_GROUP, {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body: Buffer.from(make.getGroup),
      }),
    ),
    row("create", "HTTP/1.1", "ceiling", () =>
      make.http1("", base + make.createPath, {
        method: "POST",
        headers: { ...make.headers, "content-type": "application/json" },
        body: JSON.stringify({ name: "bench folder" }),
        connections: 32,
      }),
    ),
  ];
}

/** This checkout against BENCH_COMPARE's, row by row: req/s and server CPU per call, as ratios within each round. */
function printComparison(samples: Samples): void {
  console.log("\nThis checkout / BENCH_COMPARE's (median of ratios within each round):");
  for (const key of COMPARED) {
    if (!samples.has(key, `${key}@baseline`)) continue;
    const rps = samples.ratio(key, `${key}@baseline`);
    const cpu = samples.ratio(key, `${key}@baseline`, (r) => r.cpuPerRequest);
    console.log(`  ${key.padEnd(12)} req/s ${rps.toFixed(1)}%   server CPU per call ${cpu.toFixed(1)}%`);
  }
}

/** A gRPC message frame: uncompressed, its length, the message. */
function grpcFrame(message: Uint8Array): Uint8Array {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

await main();
