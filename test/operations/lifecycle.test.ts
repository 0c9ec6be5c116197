/**
 * The real command line as an operator runs it: `platform-api serve` as a
 * child process, stopped by SIGTERM or SIGINT with calls in flight; its
 * configuration check; `admin-token`, `rotate-key`, `--help` and `--version`.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync, readFileSync, statSync } from "node:fs";
import http2 from "node:http2";
import { join } from "node:path";
import { describe, test } from "node:test";
import { setImmediate as tick } from "node:timers/promises";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { CreateGroupRequestSchema, GroupSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { PACKAGE_VERSION } from "../../src/package-root.js";
import { within } from "../support/assertions.js";
import { ServingStatus, watchHealth } from "../support/health-watch.js";
import { heldRestCreate } from "../support/held-create.js";
import { platformCli } from "../support/platform-cli.js";
import { seedDataDir } from "../support/seed-data-dir.js";
import { startServeProcess } from "../support/serve-process.js";
import { tempDirs } from "../support/temp-dirs.js";

const ROOT = new URL("../..", import.meta.url).pathname;
const BIN = join(ROOT, "bin/platform-api.js");
const VERSION = PACKAGE_VERSION;
/** The commands every build has, and import-advisories where src/cli/index.ts defines it. */
const COMMANDS = [
  "serve",
  "admin-token",
  "rotate-key",
  ...(readFileSync(join(ROOT, "src/cli/index.ts"), "utf8").includes('"import-advisories": {') ? ["import-advisories"] : []),
];
/** Identical for serve and admin-token, so the token's audience is the server's. */
const BASE_URL = "http://127.0.0.1:1";

const tempDir = tempDirs("platform-cli-");

/** The settings of a server and of the commands beside it: the same base URL, and the start-up and stop lines logged. */
const SETTINGS = { PLATFORM_BASE_URL: BASE_URL, LOG_LEVEL: "info" };

/** Runs a command to its end over a data directory no command creates (unless env names another). */
const runCli = (args: string[], env: Record<string, string> = {}) => platformCli(join(tempDir(), "untouched"), args, env);

/** Starts `serve` over dataDir, waiting until it is ready (no drain before the close: test/operations/drain.test.ts has it). */
const startServe = (dataDir: string, extra: Record<string, string> = {}) =>
  startServeProcess({ PLATFORM_DATA_DIR: dataDir, ...SETTINGS, ...extra });

/**
 * gRPC creates held in flight on one raw HTTP/2 connection: every stream's
 * HEADERS reached the server (a PING sent after them was answered), and each
 * request message waits for send().
 */
async function heldGrpcCreates(port: number, token: string, names: string[]) {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on("error", () => {});
  await once(session, "connect");
  const calls = names.map((name) => {
    const stream = session.request(
      {
        ":method": "POST",
        ":path": "/platformapi.iam.v2beta1.GroupsService/CreateGroup",
        "content-type": "application/grpc",
        te: "trailers",
        authorization: `Bearer ${token}`,
      },
      { endStream: false },
    );
    const result = new Promise<{ status: string | undefined; message: string | undefined; uid?: string; name?: string }>(
      (resolve, reject) => {
        const chunks: Buffer[] = [];
        let trailers: http2.IncomingHttpHeaders = {};
        let headers: http2.IncomingHttpHeaders = {};
        stream.on("response", (h) => (headers = h));
        stream.on("trailers", (t) => (trailers = t));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("error", reject);
        stream.on("close", () => {
          if (stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR)
            return reject(new Error(`stream reset ${stream.rstCode}`));
          const status = (trailers["grpc-status"] ?? headers["grpc-status"]) as string | undefined;
          const message = (trailers["grpc-message"] ?? headers["grpc-message"]) as string | undefined;
          const data = Buffer.concat(chunks);
          if (data.length < 5) return resolve({ status, message });
          const group = fromBinary(GroupSchema, data.subarray(5, 5 + data.readUInt32BE(1)));
          resolve({ status, message, uid: group.uid, name: group.name });
        });
      },
    );
    result.catch(() => {});
    const send = () => {
      const msg = toBinary(CreateGroupRequestSchema, create(CreateGroupRequestSchema, { group: { name } }));
      const frame = Buffer.alloc(5 + msg.length);
      frame.writeUInt32BE(msg.length, 1);
      Buffer.from(msg).copy(frame, 5);
      stream.end(frame);
    };
    return { send, result };
  });
  // Let the HEADERS frames reach the socket, then a PING: frames are handled in
  // order, so its answer means the server has every stream.
  for (let i = 0; i < 5; i++) await tick();
  await new Promise<void>((resolve, reject) => session.ping((err) => (err ? reject(err) : resolve())));
  return { calls, close: () => session.close() };
}

/** Polls new connections until the port refuses them; any answer before that must be 503. */
async function untilRefused(port: number): Promise<number[]> {
  const answers: number[] = [];
  for (;;) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { connection: "close" } });
      answers.push(res.status);
      await res.arrayBuffer();
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      if (code === "ECONNREFUSED") return answers;
      answers.push(-1);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** PRAGMA integrity_check of the data directory's database, and the uids of its groups. */
function inspectDatabase(dataDir: string): { integrity: string; groups: Set<string> } {
  const db = new Database(join(dataDir, "platform.db"), { readonly: true });
  try {
    const integrity = (db.pragma("integrity_check", { simple: true }) as string) ?? "";
    const groups = new Set((db.prepare("SELECT uid FROM groups").all() as { uid: string }[]).map((r) => r.uid));
    return { integrity, groups };
  } finally {
    db.close();
  }
}

/** An administrator token from `platform-api admin-token` with the server's environment. */
async function adminToken(dataDir: string): Promise<string> {
  const res = await platformCli(dataDir, ["admin-token"], SETTINGS);
  assert.equal(res.code, 0, res.stderr);
  const token = res.stdout.trim();
  assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/, "a compact JWT alone on stdout");
  assert.equal(res.stdout, `${token}\n`);
  return token;
}

/**
 * Starts serve, holds `restCalls` REST and `grpcCalls` gRPC creates in flight,
 * sends `signal`, and checks: health said NOT_SERVING, new connections are
 * refused, every held call then completes successfully, the process exits 0,
 * and the database is intact with every acknowledged group.
 */
async function stopWithCallsInFlight(signal: NodeJS.Signals, restCalls: number, grpcCalls: number): Promise<void> {
  const dataDir = tempDir();
  const srv = await startServe(dataDir, { PLATFORM_SHUTDOWN_GRACE_MS: "30000" });
  const token = await adminToken(dataDir);
  const health = watchHealth(srv.port);
  try {
    await within(30_000, health.next(ServingStatus.SERVING), "health watch says SERVING");
    // The token from the CLI works on the server.
    const ok = await fetch(`http://127.0.0.1:${srv.port}/iam/v2beta1/groups`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(ok.status, 200, await ok.text());

    const rest = await within(
      30_000,
      Promise.all(Array.from({ length: restCalls }, (_, i) => heldRestCreate(srv.port, token, `rest org ${i}`))),
      "REST calls in flight",
    );
    const half = Math.ceil(grpcCalls / 2);
    const grpcNames = Array.from({ length: grpcCalls }, (_, i) => `grpc org ${i}`);
    const sessions = await within(
      30_000,
      Promise.all([heldGrpcCreates(srv.port, token, grpcNames.slice(0, half)), heldGrpcCreates(srv.port, token, grpcNames.slice(half))]),
      "gRPC calls in flight",
    );
    const grpcHeld = sessions.flatMap((s) => s.calls);

    assert.ok(srv.kill(signal));
    await within(30_000, health.next(ServingStatus.NOT_SERVING), "health watch says NOT_SERVING once the signal arrives");
    health.close();
    const answers = await within(20_000, untilRefused(srv.port), "the listener stops accepting");
    for (const status of answers) assert.equal(status, 503, "a connection accepted while closing is refused with 503");
    assert.equal(srv.child.exitCode, null, "the process waits for the calls in flight");

    for (const call of [...rest, ...grpcHeld]) call.send();
    const restResults = await within(30_000, Promise.all(rest.map((c) => c.response)), "held REST calls complete");
    const grpcResults = await within(30_000, Promise.all(grpcHeld.map((c) => c.result)), "held gRPC calls complete");
    for (const s of sessions) s.close();
    const uids: string[] = [];
    for (const [i, r] of restResults.entries()) {
      assert.equal(r.status, 200, r.body);
      const group = JSON.parse(r.body) as { uid: string; name: string };
      assert.equal(group.name, `rest org ${i}`);
      uids.push(group.uid);
    }
    for (const [i, r] of grpcResults.entries()) {
      assert.equal(r.status, "0", `gRPC status ${r.status}: ${r.message}`);
      assert.equal(r.name, `grpc org ${i}`);
      uids.push(r.uid!);
    }
    assert.equal(uids.length, restCalls + grpcCalls);

    const { code, signal: killedBy } = await within(40_000, srv.exited, "the process exits");
    assert.equal(killedBy, null, `ended by a signal; stderr: ${srv.stderr()}`);
    assert.equal(code, 0, `exit code; stderr: ${srv.stderr()}`);
    assert.equal(srv.stderr(), "", "nothing on stderr");
    assert.ok(
      srv.lines().some((l) => l.msg === "shutting down" && l.signal === signal),
      "the shutdown is logged with its signal",
    );

    // The store was checkpointed and closed: no WAL left, the database intact, every acknowledged group in it.
    const wal = join(dataDir, "platform.db-wal");
    assert.ok(!existsSync(wal) || statSync(wal).size === 0, "WAL checkpointed");
    const db = inspectDatabase(dataDir);
    assert.equal(db.integrity, "ok");
    for (const uid of uids) assert.ok(db.groups.has(uid), `acknowledged group ${uid} is stored`);
  } finally {
    health.close();
    srv.kill("SIGKILL");
  }
}

describe("serve: graceful stop", () => {
  test("SIGTERM with 100 REST and 40 gRPC creates in flight: NOT_SERVING, listener closed, every call succeeds, exit 0, database intact", async () => {
    await stopWithCallsInFlight("SIGTERM", 100, 40);
  });

  test("SIGINT with calls in flight: the same, exit 0", async () => {
    await stopWithCallsInFlight("SIGINT", 20, 10);
  });

  test("a health watch that never ends does not keep the process alive past the grace period; exit 0", async () => {
    const dataDir = tempDir();
    const srv = await startServe(dataDir, { PLATFORM_SHUTDOWN_GRACE_MS: "1000" });
    const health = watchHealth(srv.port);
    try {
      await within(30_000, health.next(ServingStatus.SERVING), "SERVING");
      srv.kill("SIGTERM");
      await within(30_000, health.next(ServingStatus.NOT_SERVING), "NOT_SERVING");
      // The watch is left open: the server ends it after the grace period.
      const { code, signal } = await within(30_000, srv.exited, "the process exits");
      assert.deepEqual({ code, signal }, { code: 0, signal: null }, srv.stderr());
      assert.equal(inspectDatabase(dataDir).integrity, "ok");
    } finally {
      health.close();
    }
  });
});

describe("serve: configuration", () => {
  test("invalid settings: exit 2, one line per problem on stderr naming the variable, nothing else", async () => {
    const dataDir = join(tempDir(), "never-created");
    const res = await runCli(["serve"], { PORT: "abc", LOG_LEVEL: "loud", PLATFORM_CORS_ORIGINS: "nope", PLATFORM_DATA_DIR: dataDir });
    assert.equal(res.code, 2);
    assert.equal(res.stdout, "");
    const lines = res.stderr.trimEnd().split("\n");
    assert.equal(lines[0], "invalid configuration:");
    const problems = lines.slice(1);
    assert.equal(problems.length, 3, res.stderr);
    for (const p of problems) assert.match(p, /^ {2}- \S/);
    assert.match(problems.find((p) => p.includes("PORT=abc")) ?? "", /integer/);
    assert.match(problems.find((p) => p.includes("LOG_LEVEL=loud")) ?? "", /must be one of/);
    assert.match(problems.find((p) => p.includes("PLATFORM_CORS_ORIGINS")) ?? "", /nope/);
    assert.ok(!/\bat \S+:\d+:\d+/.test(res.stderr), "no stack trace");
    assert.ok(!existsSync(dataDir), "nothing was created");
  });

  test("more bad settings, each named once", async () => {
    const res = await runCli(["serve"], {
      PORT: "70000",
      PLATFORM_BASE_URL: "ftp://example.com",
      PLATFORM_SHUTDOWN_GRACE_MS: "-5",
      PLATFORM_USER_ISSUERS: "not a url",
      PLATFORM_DATA_DIR: join(tempDir(), "x"),
    });
    assert.equal(res.code, 2);
    assert.equal(res.stdout, "");
    const problems = res.stderr.trimEnd().split("\n").slice(1);
    assert.equal(problems.length, 4, res.stderr);
    for (const name of ["PORT=70000", "PLATFORM_BASE_URL=ftp://example.com", "PLATFORM_SHUTDOWN_GRACE_MS=-5", "PLATFORM_USER_ISSUERS"]) {
      assert.equal(problems.filter((p) => p.includes(name)).length, 1, `${name} in ${res.stderr}`);
    }
  });
});

describe("command line", () => {
  test("--help, -h and help print the usage listing every command; exit 0", async () => {
    for (const flag of ["--help", "-h", "help"]) {
      const res = await runCli([flag]);
      assert.equal(res.code, 0, flag);
      assert.equal(res.stderr, "");
      assert.match(res.stdout, /^usage: platform-api/);
      for (const c of COMMANDS) assert.match(res.stdout, new RegExp(`^ {2}${c} +\\S`, "m"), `${c} listed`);
      assert.match(res.stdout, /--version/);
    }
  });

  for (const command of COMMANDS) {
    test(`${command} --help prints its usage and does nothing else; exit 0`, async () => {
      const dataDir = join(tempDir(), "untouched");
      const res = await runCli([command, "--help"], { PLATFORM_DATA_DIR: dataDir, PORT: "0", HOST: "127.0.0.1" });
      assert.equal(res.code, 0);
      assert.equal(res.stderr, "");
      assert.match(res.stdout, new RegExp(`^platform-api ${command}: \\S`));
      assert.ok(res.stdout.split("\n").length >= 3, "a summary and a description");
      assert.ok(!existsSync(dataDir), "the command did not run");
    });
  }

  test("--version prints the package version, the commit and the schema (test/cli/cli-version.test.ts: which commit)", async () => {
    for (const flag of ["--version", "-v"]) {
      const res = await runCli([flag]);
      assert.equal(res.code, 0);
      assert.match(
        res.stdout,
        new RegExp(`^platform-api ${VERSION.replaceAll(".", "\\.")} \\(commit \\S+; schema SQLite \\d+, PostgreSQL \\d+\\)\n$`),
      );
      assert.equal(res.stderr, "");
    }
  });

  test("an unknown command exits 2 with the usage on stderr", async () => {
    const res = await runCli(["frobnicate"]);
    assert.equal(res.code, 2);
    assert.equal(res.stdout, "");
    assert.match(res.stderr, /^unknown command: frobnicate\n/);
    assert.match(res.stderr, /usage: platform-api/);
  });

  test("rotate-key adds a signing key; tokens from admin-token keep working on a server started afterwards", async () => {
    const dataDir = tempDir();
    await seedDataDir(dataDir);
    const before = await adminToken(dataDir);
    const rotated = await platformCli(dataDir, ["rotate-key"], SETTINGS);
    assert.equal(rotated.code, 0, rotated.stderr);
    assert.match(rotated.stdout, /^added signing key \S+\n$/);
    const kid = /^added signing key (\S+)/.exec(rotated.stdout)![1]!;
    const afterwards = await adminToken(dataDir);
    const header = (t: string) => JSON.parse(Buffer.from(t.split(".")[0]!, "base64url").toString()) as { kid: string };
    assert.equal(header(afterwards).kid, kid, "new tokens are signed with the new key");
    assert.notEqual(header(before).kid, kid);
    const srv = await startServe(dataDir);
    try {
      for (const token of [before, afterwards]) {
        const res = await fetch(`http://127.0.0.1:${srv.port}/iam/v2beta1/groups`, { headers: { authorization: `Bearer ${token}` } });
        assert.equal(res.status, 200, await res.text());
      }
    } finally {
      srv.kill("SIGTERM");
      assert.deepEqual(await within(30_000, srv.exited, "exit"), { code: 0, signal: null });
    }
  });

  test(
    "with a terminal attached, serve logs human-readable lines instead of JSON",
    { skip: existsSync("/usr/bin/script") ? false : "needs script(1) from util-linux" },
    async () => {
      // script(1) runs the command on a pseudo-terminal; its output is the terminal's.
      const script = ["/usr/bin/script", "-qfec", `${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} serve`, "/dev/null"];
      const srv = await startServeProcess({ PLATFORM_DATA_DIR: tempDir(), ...SETTINGS }, { command: script });
      try {
        // e.g. "[05:39:25.873] INFO (16596): platform-api 0.1.0 listening on http://127.0.0.1:41917 …", with colours
        // eslint-disable-next-line no-control-regex
        const plain = () => srv.stdout().replace(/\x1b\[[0-9;]*m/g, "");
        const pid = await srv.until(
          () => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \((\d+)\): platform-api \S+ listening on http:\/\/127\.0\.0\.1:\d+/m.exec(plain())?.[1],
          "a pretty start-up line",
          30_000,
        );
        assert.ok(!srv.stdout().trimStart().startsWith("{"), "not JSON");
        process.kill(Number(pid), "SIGTERM");
        await within(30_000, srv.exited, "serve under a terminal exits");
      } finally {
        srv.kill("SIGKILL");
      }
    },
  );
});
