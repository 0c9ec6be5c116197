/**
 * The child of test/store/sqlite-driver-gc.test.ts, run with --expose-gc: ROUNDS
 * times, starts the server in this process on a fresh SQLite data directory
 * (its store as `serve` opens it, checkpoint thread included), creates and
 * reads a group over REST, closes the server and lets go of it, then has the
 * collector finalize what it dropped, the driver's statement objects among
 * them (a store prepares some 150; pragma() prepares one per call), while
 * the process still runs. Prints "collected" and ends by itself.
 */
import { createGroup, rest, startTestServer } from "./server.js";

const ROUNDS = 3;
const collect = globalThis.gc;
if (!collect) throw new Error("run with --expose-gc");

/** One server's life: start, a create and a read over REST, close. */
async function round(i: number): Promise<void> {
  const srv = await startTestServer({ backend: "sqlite" });
  try {
    const group = await createGroup(srv.url, null, `collect ${i}`);
    const read = await rest(srv.url, "GET", `/iam/v2beta1/groups/${group.uid}`);
    if (read.body?.name !== `collect ${i}`) throw new Error(`read back ${JSON.stringify(read.body)}`);
  } finally {
    await srv.close();
  }
}

for (let i = 0; i < ROUNDS; i++) {
  await round(i);
  collect();
}
process.stdout.write("collected\n");
