/**
 * The benchmark's ceiling, in its own process so the load generator never
 * shares an event loop with it:
 *   ceiling <bytes-file>  a bare fastify route returning fixed bytes
 * Prints "PORT <n>" once listening. (The API server itself is run as users
 * run it, `node bin/platform-api.js serve`: see run.ts.)
 */
import { readFileSync } from "node:fs";
import Fastify from "fastify";

const [mode, arg] = process.argv.slice(2);
if (mode === "ceiling") {
  const bytes = readFileSync(arg!);
  const app = Fastify({ logger: false });
  app.get("/*", (_req, reply) => reply.type("application/json").send(bytes));
  await app.listen({ port: 0, host: "127.0.0.1" });
  const address = app.server.address();
  console.log(`PORT ${typeof address === "object" && address ? address.port : 0}`);
} else {
  console.error("usage: targets.ts ceiling <file>");
  process.exit(2);
}
