/**
 * Issue 21, items 1 and 8, measured against a real `serve` process started
 * from the TypeScript sources (so it measures the working tree, not dist/):
 *
 *  - an unauthenticated gRPC-Web unary call of 200 envelopes of just under
 *    4 MiB each (800 MiB), binary and text mode, and the same call with a
 *    token: the server's peak RSS above its baseline, and how many bytes the
 *    client wrote before the server answered;
 *  - a body left open after one whole message: how long the server holds it;
 *  - a 3.4 MiB REST JSON body of 400k unknown keys with no token: the time to
 *    its answer, the server's CPU time for it and the longest /healthz wait
 *    meanwhile (the event-loop stall);
 *  - CreateGroup with a 0 ms deadline on the Connect fast path and native
 *    gRPC: the answer, and whether the group was created.
 *
 * Usage: node --import tsx scripts/hostile-bodies.ts
 * (SERVER_ROOT=<a checkout> runs the server of another checkout, e.g. an
 * export of the previous commit, for a before/after comparison.)
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { CreateGroupRequestSchema, GroupsService } from "../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../src/server/grpc/adapter.js";
import { ROOT } from "./support/cli-server.js";
import { cpuSeconds, residentKib } from "./support/server-watch.js";

const MiB = 1024 * 1024;
const LIMIT = 4 * MiB;
const ENVELOPES = 200;
const PATH = "/platformapi.iam.v2beta1.GroupsService/CreateGroup";
const SERVER_ROOT = process.env.SERVER_ROOT ?? ROOT;
/** Fixed, so that tokens minted by `admin-token` (which never learns the port) have the audience the server expects. */
const ENV = { PLATFORM_BASE_URL: "http://hostile-bodies.invalid", LOG_LEVEL: "info" };

interface Server {
  url: string;
  port: number;
  pid: number;
  stop(): void;
}

/** `serve` from the sources on a free port, as a separate process whose RSS is the server's alone. */
async function startServer(dataDir: string): Promise<Server> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve"], {
    cwd: SERVER_ROOT,
    env: { ...process.env, ...ENV, PORT: "0", HOST: "127.0.0.1", PLATFORM_DATA_DIR: dataDir },
    stdio: ["ignore", "pipe", "inherit"],
  });
  process.on("exit", () => child.kill("SIGKILL"));
  return new Promise((resolve) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = /listening on (http:\/\/[^\s]+) /.exec(line);
      if (!m) return;
      const { pid } = JSON.parse(line) as { pid: number };
      resolve({ url: m[1]!, port: Number(new URL(m[1]!).port), pid, stop: () => child.kill("SIGTERM") });
    });
  });
}

async function adminToken(dataDir: string): Promise<string> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "admin-token"], {
    cwd: SERVER_ROOT,
    env: { ...process.env, ...ENV, PLATFORM_DATA_DIR: dataDir, LOG_LEVEL: "silent" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (c: Buffer) => (out += c.toString()));
  await new Promise((r) => child.once("close", r));
  return out.trim();
}

/** Sends `envelopes` envelopes of just under the limit as one gRPC-Web body (base64 in text mode), honouring backpressure. */
function streamEnvelopes(
  server: Server,
  opts: { text: boolean; token?: string; envelopes: number; leaveOpen?: boolean },
): Promise<{ written: number; answeredMs: number; answer: string; peakMiB: number; baseMiB: number }> {
  const payload = Buffer.alloc(LIMIT - 1024);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(payload.byteLength, 1);
  const base = residentKib(server.pid)! / 1024;
  let peak = base;
  const sampler = setInterval(() => (peak = Math.max(peak, (residentKib(server.pid) ?? 0) / 1024)), 50);
  const started = performance.now();
  return new Promise((resolve) => {
    let written = 0;
    let answered = false;
    const finish = (answer: string) => {
      if (answered) return;
      answered = true;
      const answeredMs = performance.now() - started;
      setTimeout(() => {
        clearInterval(sampler);
        req.destroy();
        resolve({ written, answeredMs, answer, peakMiB: Math.round(peak), baseMiB: Math.round(base) });
      }, 500);
    };
    const req = http.request(`${server.url}${PATH}`, {
      method: "POST",
      agent: false,
      headers: {
        "content-type": opts.text ? "application/grpc-web-text+proto" : "application/grpc-web+proto",
        ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      },
    });
    req.on("response", (res) => {
      res.resume();
      finish(`${res.statusCode} grpc-status ${res.headers["grpc-status"] ?? "-"} ${res.headers["grpc-message"] ?? ""}`.slice(0, 140));
    });
    req.on("error", (err) => finish(`connection ${(err as NodeJS.ErrnoException).code ?? err.message}`));
    const chunk = (b: Buffer) => (opts.text ? Buffer.from(b.toString("base64")) : b);
    let sent = 0;
    const pump = () => {
      while (!answered && sent < opts.envelopes) {
        sent++;
        const bytes = Buffer.concat([chunk(prefix), chunk(payload)]);
        written += bytes.byteLength;
        if (!req.write(bytes)) return void req.once("drain", pump);
      }
      if (!answered && !opts.leaveOpen) req.end();
    };
    pump();
  });
}

/** A REST POST of a 3.4 MiB JSON object of 400k unknown keys, no token, while /healthz is polled. */
async function unknownKeys(server: Server): Promise<{ answeredMs: number; status: number; worstHealthzMs: number; cpuMs: number }> {
  const keys: string[] = [];
  for (let i = 0; i < 400_000; i++) keys.push(`"${i.toString(36)}":0`);
  const body = `{${keys.join(",")}}`;
  let worst = 0;
  let polling = true;
  const poll = (async () => {
    while (polling) {
      const t = performance.now();
      await fetch(`${server.url}/healthz`).then((r) => r.text());
      worst = Math.max(worst, performance.now() - t);
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  await new Promise((r) => setTimeout(r, 200));
  const cpuBefore = cpuSeconds(server.pid)!;
  const started = performance.now();
  const res = await fetch(`${server.url}/iam/v2beta1/groups`, { method: "POST", headers: { "content-type": "application/json" }, body });
  await res.text();
  const answeredMs = performance.now() - started;
  const cpuMs = Math.round((cpuSeconds(server.pid)! - cpuBefore) * 1000);
  await new Promise((r) => setTimeout(r, 200));
  polling = false;
  await poll;
  console.log(`  body ${(body.length / MiB).toFixed(2)} MiB; server CPU includes its /healthz answers`);
  return { answeredMs: Math.round(answeredMs), status: res.status, worstHealthzMs: Math.round(worst), cpuMs };
}

/** CreateGroup with a deadline of 0 ms on the Connect fast path and native gRPC; then whether each group exists. */
async function pastDeadline(server: Server, token: string): Promise<string[]> {
  const out: string[] = [];
  const connect = await fetch(`${server.url}${PATH}`, {
    method: "POST",
    headers: { "content-type": "application/json", "connect-timeout-ms": "0", authorization: `Bearer ${token}` },
    body: JSON.stringify({ group: { name: "connect-0ms" } }),
  });
  out.push(`Connect fast path: HTTP ${connect.status} ${JSON.parse(await connect.text()).code}`);
  const method = GroupsService.method.createGroup;
  const Ctor = grpc.makeGenericClientConstructor({ createGroup: methodDefinition(GroupsService, method) }, GroupsService.typeName);
  const client = new Ctor(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${token}`);
  const code = await new Promise<string>((resolve) =>
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).createGroup(
      create(CreateGroupRequestSchema, { group: { name: "grpc-0ms" } }),
      md,
      { deadline: Date.now() },
      (err: grpc.ServiceError | null) => resolve(err ? grpc.status[err.code] : "OK"),
    ),
  );
  client.close();
  out.push(`native gRPC: ${code}`);
  await new Promise((r) => setTimeout(r, 500));
  const list = await fetch(`${server.url}/iam/v2beta1/groups`, { headers: { authorization: `Bearer ${token}` } });
  const names = ((await list.json()) as { groups?: { name: string }[] }).groups?.map((g) => g.name) ?? [];
  out.push(`groups created: ${JSON.stringify(names)}`);
  return out;
}

const dataDir = mkdtempSync(join(tmpdir(), "hostile-bodies-"));
try {
  const server = await startServer(dataDir);
  const token = await adminToken(dataDir);
  // Warm up: one ordinary call, so the baseline includes the code paths.
  await streamEnvelopes(server, { text: false, envelopes: 1, token });
  for (const [label, opts] of [
    ["gRPC-Web binary, no token, 200 envelopes", { text: false, envelopes: ENVELOPES }],
    ["gRPC-Web text, no token, 200 envelopes", { text: true, envelopes: ENVELOPES }],
    ["gRPC-Web binary, admin token, 200 envelopes", { text: false, envelopes: ENVELOPES, token }],
    ["gRPC-Web binary, no token, one envelope then left open", { text: false, envelopes: 1, leaveOpen: true }],
    ["gRPC-Web binary, admin token, one envelope then left open", { text: false, envelopes: 1, leaveOpen: true, token }],
  ] as const) {
    const r = await streamEnvelopes(server, opts);
    console.log(
      `${label}: answered after ${(r.written / MiB).toFixed(1)} MiB written, ${Math.round(r.answeredMs)} ms (${r.answer}); RSS ${r.baseMiB} → peak ${r.peakMiB} MiB`,
    );
  }
  const k = await unknownKeys(server);
  console.log(
    `REST POST 400k unknown keys, no token: HTTP ${k.status} after ${k.answeredMs} ms; server CPU ${k.cpuMs} ms; longest /healthz wait ${k.worstHealthzMs} ms`,
  );
  for (const line of await pastDeadline(server, token)) console.log(`0 ms deadline, ${line}`);
  server.stop();
} finally {
  rmSync(dataDir, { recursive: true, force: true });
}
