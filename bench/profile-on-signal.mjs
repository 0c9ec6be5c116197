// Preloaded into the benchmarked server (`node --import ./bench/profile-on-signal.mjs bin/platform-api.js serve`)
// when BENCH_CPU_PROF=<dir> is set: SIGUSR2 starts the V8 CPU profiler, the next SIGUSR2 writes <dir>/<pid>-<n>.cpuprofile,
// so one profile covers one scenario. Plain JavaScript: the server runs compiled, under plain node.
/* global process */
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";

const dir = process.env.BENCH_CPU_PROF;
if (dir) {
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
      writeFileSync(join(dir, `${process.pid}-${++n}.cpuprofile`), JSON.stringify(profile));
    })();
  });
}
