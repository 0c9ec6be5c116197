/**
 * Issue 21 item 4, measured: what a static asset costs per request, and how
 * long an authenticated call waits while anonymous clients flood the docs.
 *
 * 1. Server CPU per GET of /docs/swagger-ui-bundle.js with Accept-Encoding:
 *    br (all threads of the process: the compression runs in the libuv pool),
 *    over BENCH_STATIC_GETS sequential requests after one warm-up.
 * 2. A pipelined flood: BENCH_FLOOD_SOCKETS connections each write
 *    BENCH_FLOOD_PIPELINED GETs of the bundle (br, gzip) in one go and read
 *    the answers. While it runs, a token is minted (a WebCrypto sign in the
 *    pool) and used for the first time (a verify in the pool) on a REST Get;
 *    the delay of that call and of /healthz are printed.
 *
 * The server runs in this process (startTestServer), silent logs:
 * `npx tsx bench/static-flood.ts`.
 */
import { request } from "node:http";
import * as Net from "node:net";
import { createGroup, startTestServer } from "../test/support/server.js";

const GETS = Number(process.env.BENCH_STATIC_GETS ?? 20);
const SOCKETS = Number(process.env.BENCH_FLOOD_SOCKETS ?? 4);
const PIPELINED = Number(process.env.BENCH_FLOOD_PIPELINED ?? 75);
const ASSET = "/docs/swagger-ui-bundle.js";

/** One GET read to the end without decoding; resolves with the bytes received. */
function get(port: number, path: string, headers: Record<string, string>): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers }, (res) => {
      let bytes = 0;
      res.on("data", (c: Buffer) => (bytes += c.length));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Opens a connection, writes `count` pipelined GETs at once, resolves when the server has answered them all or closed. */
function flood(port: number, count: number): { sent: number; done: Promise<number> } {
  const one = `GET ${ASSET} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br, gzip\r\n\r\n`;
  const socket = Net.connect(port, "127.0.0.1");
  socket.write(one.repeat(count));
  let received = 0;
  // Answers are not parsed: the connection counts as done once the server has been quiet for 3 s.
  const done = new Promise<number>((resolve) => {
    let timer = setTimeout(() => socket.destroy(), 120_000);
    socket.on("data", (c: Buffer) => {
      received += c.length;
      clearTimeout(timer);
      timer = setTimeout(() => socket.destroy(), 3000);
    });
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(received);
    });
    socket.on("error", () => {});
  });
  return { sent: one.length * count, done };
}

const ms = (from: bigint) => Number(process.hrtime.bigint() - from) / 1e6;

async function main(): Promise<void> {
  const srv = await startTestServer();
  try {
    const org = await createGroup(srv.url, null, "flood org");
    await get(srv.port, ASSET, { "accept-encoding": "br" });
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    let bytes = 0;
    for (let i = 0; i < GETS; i++) bytes += (await get(srv.port, ASSET, { "accept-encoding": "br" })).bytes;
    const cpu = process.cpuUsage(cpu0);
    console.log(
      `swagger-ui-bundle.js br: ${((cpu.user + cpu.system) / 1000 / GETS).toFixed(2)} ms process CPU per GET, ` +
        `${(ms(t0) / GETS).toFixed(2)} ms wall, ${Math.round(bytes / GETS)} bytes per answer`,
    );

    const floods = Array.from({ length: SOCKETS }, () => flood(srv.port, PIPELINED));
    const sent = floods.reduce((n, f) => n + f.sent, 0);
    await new Promise((r) => setTimeout(r, 200));
    const t1 = process.hrtime.bigint();
    const health = get(srv.port, "/healthz", {}).then((r) => ({ ...r, ms: ms(t1) }));
    const authed = srv.server.tokens.mint(srv.server.adminSubject).then(async ({ token }) => {
      const r = await get(srv.port, `/iam/v2beta1/groups/${org.uid}`, { authorization: `Bearer ${token}` });
      return { ...r, ms: ms(t1) };
    });
    const [h, a] = await Promise.all([health, authed]);
    console.log(`flood: ${SOCKETS} connections × ${PIPELINED} pipelined GETs (${(sent / 1024).toFixed(1)} KiB of requests)`);
    console.log(`  /healthz under flood: ${h.status} in ${h.ms.toFixed(0)} ms`);
    console.log(`  mint + first use of a token (REST Get) under flood: ${a.status} in ${a.ms.toFixed(0)} ms`);
    const received = await Promise.all(floods.map((f) => f.done));
    console.log(`  flood answered ${(received.reduce((n, b) => n + b, 0) / 1024 / 1024).toFixed(1)} MiB, ${ms(t1).toFixed(0)} ms in all`);
  } finally {
    await srv.close();
  }
}

await main();
