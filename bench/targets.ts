/**
 * Benchmark targets, each run in its own process so the load generator never
 * shares an event loop with the server:
 *   ceiling <bytes-file>  a bare fastify route returning fixed bytes
 *   server <data-dir>     the real server over a seeded data directory
 * Each prints "PORT <n>" once listening.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";
import Fastify from "fastify";
import { loadConfig } from "../src/config.js";
import { startServer } from "../src/server/app.js";
import { openStore } from "../src/store/open.js";

/** The base URL (token audience) the benchmark server is configured with. */
export const BENCH_BASE_URL = "http://bench.local";

const [mode, arg] = process.argv.slice(2);
if (mode === "ceiling") {
  const bytes = readFileSync(arg!);
  const app = Fastify({ logger: false });
  app.get("/*", (_req, reply) => reply.type("application/json").send(bytes));
  await app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.server.address();
  console.log(`PORT ${typeof address === "object" && address ? address.port : 0}`);
} else if (mode === "server") {
  const config = loadConfig({
    PORT: "0",
    HOST: "127.0.0.1",
    PLATFORM_DATA_DIR: arg!,
    LOG_LEVEL: "silent",
    PLATFORM_BASE_URL: BENCH_BASE_URL,
  });
  const server = await startServer({ config, store: await openStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir }) });
  console.log(`PORT ${server.port}`);
  process.once("SIGTERM", () => void server.close().then(() => process.exit(0)));
  if (process.env.BENCH_CPU_PROF) profileOnSignal(process.env.BENCH_CPU_PROF);
} else {
  console.error("usage: targets.ts ceiling <file> | server <data-dir>");
  process.exit(2);
}

/** SIGUSR2 starts the V8 CPU profiler; the next SIGUSR2 writes <dir>/<n>.cpuprofile, so a profile covers one scenario. */
function profileOnSignal(dir: string): void {
  const session = new Session();
  session.connect();
  let running = false;
  let n = 0;
  process.on("SIGUSR2", () => {
    void (async () => {
      if (!running) {
        running = true;
        await session.post("Profiler.enable");
        await session.post("Profiler.start");
        return;
      }
      running = false;
      const { profile } = await session.post("Profiler.stop");
      writeFileSync(join(dir, `${++n}.cpuprofile`), JSON.stringify(profile));
    })();
  });
}
