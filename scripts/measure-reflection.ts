/**
 * Issue 21, items 2 and 3: what hostile reflection clients cost a server
 * started from the sources (tsx, so any checkout can be measured without a
 * build). Modes, run in the order given:
 *   backpressure  one stream pipelining 300,000 list_services (2.1 MB), never reading
 *   multi         CONNS (4) connections × 100 streams never reading: FAT=1 sends 100
 *                 descriptor.proto requests per stream, otherwise 40,000 empty ones
 *   cpu           N (3000) descriptor.proto requests, PER_STREAM (100) per stream, answers read
 *   stall         63 KB of the same requests, PER_STREAM per stream, while /healthz is polled
 * node --import tsx scripts/measure-reflection.ts backpressure multi cpu stall
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { memoryOf } from "../test/support/bombs.js";
import { startServerProcess, stopServerProcess, type ServerProcess } from "./support/cli-server.js";
import { connectHeapProbe, type HeapProbe } from "./support/heap-probe.js";

const PATH = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const MiB = 1024 * 1024;
const PER_STREAM = Number(process.env.PER_STREAM ?? 100);

/** One request with a single string field set, framed for a gRPC stream. */
function frame(field: number, value: string): Buffer {
  const v = Buffer.from(value);
  const body = Buffer.concat([Buffer.from([(field << 3) | 2, v.length]), v]);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}
const LIST = frame(7, "");
const SYMBOL = frame(4, "google.protobuf.FileDescriptorProto"); // 42 bytes

/** User + system CPU of a process, in ms (clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Waits until the server has been idle for 2 s: it has done whatever it will do with what it got. */
async function serverIdle(pid: number): Promise<void> {
  for (let idle = 0, t0 = Date.now(); idle < 4 && Date.now() - t0 < 300_000; ) {
    const c = cpuMs(pid);
    await delay(500);
    idle = cpuMs(pid) - c <= 20 ? idle + 1 : 0;
  }
}

function session(srv: ServerProcess): http2.ClientHttp2Session {
  const s = http2.connect(srv.url, { maxSessionMemory: 1024 });
  s.on("error", () => {});
  return s;
}

/** Opens a stream, writes body and never reads the answers. */
function nonReading(s: http2.ClientHttp2Session, body: Buffer): void {
  const req = s.request({ ":method": "POST", ":path": PATH, "content-type": "application/grpc", te: "trailers" });
  req.on("error", () => {});
  req.write(body);
}

async function memoryAttack(srv: ServerProcess, probe: HeapProbe, what: string, attack: () => http2.ClientHttp2Session[]) {
  const heap0 = await probe.liveBytes();
  const rss0 = memoryOf(srv.pid);
  const sessions = attack();
  await serverIdle(srv.pid);
  const heap1 = await probe.liveBytes();
  const rss1 = memoryOf(srv.pid);
  const carried = sessions.reduce((sum, s) => sum + s.socket.bytesWritten, 0);
  console.log(
    `${what}: the connections carried ${(carried / 1e3).toFixed(1)} KB; live heap ${(heap0 / MiB).toFixed(0)} → ${(heap1 / MiB).toFixed(0)} MiB; ` +
      `RSS ${rss0.rssMiB} → ${rss1.rssMiB} MiB (peak ${rss1.peakMiB})`,
  );
  for (const s of sessions) s.destroy();
}

/** Sends n requests, PER_STREAM per stream, reading every answer; polls /healthz meanwhile when asked to. */
async function answeredLoad(srv: ServerProcess, what: string, n: number, pollHealthz: boolean) {
  const s = session(srv);
  const stalls: number[] = [];
  let polling = pollHealthz;
  const poller = (async () => {
    while (polling) {
      const t = performance.now();
      await fetch(`${srv.url}/healthz`).then((r) => r.text());
      stalls.push(performance.now() - t);
      await delay(20);
    }
  })();
  const cpu0 = cpuMs(srv.pid);
  let answered = 0;
  for (let left = n; left > 0; left -= PER_STREAM) {
    const req = s.request({ ":method": "POST", ":path": PATH, "content-type": "application/grpc", te: "trailers" });
    req.on("error", () => {});
    let pending = Buffer.alloc(0);
    req.on("data", (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
        pending = pending.subarray(5 + pending.readUInt32BE(1));
        answered++;
      }
    });
    const closed = new Promise((resolve) => req.on("close", resolve));
    req.end(Buffer.concat(Array.from({ length: Math.min(left, PER_STREAM) }, () => SYMBOL)));
    await closed;
  }
  const cpu = cpuMs(srv.pid) - cpu0;
  polling = false;
  await poller;
  s.destroy();
  const healthz = pollHealthz ? `; /healthz worst ${Math.max(...stalls).toFixed(0)} ms over ${stalls.length} polls` : "";
  console.log(
    `${what}: ${n} requests → ${answered} answers; server CPU ${cpu} ms = ${((cpu / n) * 1000).toFixed(0)} µs per request${healthz}`,
  );
}

const dataDir = mkdtempSync(join(tmpdir(), "measure-reflection-"));
const srv = await startServerProcess(dataDir, {
  wrapper: ["sh", "-c", 'exec "$0" --inspect=127.0.0.1:0 --import tsx src/main.ts "$2"'],
});
const probe = await connectHeapProbe(srv.inspectorUrl!);
try {
  for (const mode of process.argv.slice(2)) {
    if (mode === "backpressure") {
      await memoryAttack(srv, probe, "backpressure (300,000 list_services, 2.1 MB)", () => {
        const s = session(srv);
        nonReading(s, Buffer.concat(Array.from({ length: 300_000 }, () => LIST)));
        return [s];
      });
    } else if (mode === "multi") {
      const fat = process.env.FAT === "1";
      const body = fat ? Buffer.concat(Array.from({ length: 100 }, () => SYMBOL)) : Buffer.alloc(200_000);
      const conns = Number(process.env.CONNS ?? 4);
      await memoryAttack(
        srv,
        probe,
        `multi (${conns} × 100 streams of ${fat ? "100 descriptor.proto requests" : "40,000 empty requests"})`,
        () =>
          Array.from({ length: conns }, () => {
            const s = session(srv);
            for (let i = 0; i < 100; i++) nonReading(s, body);
            return s;
          }),
      );
    } else if (mode === "cpu") {
      await answeredLoad(srv, "cpu", Number(process.env.N ?? 3000), false);
    } else if (mode === "stall") {
      await answeredLoad(srv, "stall (63 KB)", Math.floor(63_000 / SYMBOL.length), true);
    } else {
      throw new Error(`unknown mode ${mode}`);
    }
  }
} finally {
  await probe.close();
  await stopServerProcess(srv);
  rmSync(dataDir, { recursive: true, force: true });
}
