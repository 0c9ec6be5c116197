import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import Fastify from "fastify";
import { lazyChildLogger } from "../../src/server/observe/lazy-logger.js";

/** A fastify app as the server makes it (lazy request loggers), logging JSON lines into lines. */
function appLoggingInto(lines: Record<string, unknown>[], level = "info") {
  const stream = new PassThrough();
  stream.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString("utf8").split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
  });
  const app = Fastify({ logger: { level, stream }, disableRequestLogging: true, childLoggerFactory: lazyChildLogger });
  return app;
}

test("a line logged through a request's logger carries the request id, as a pino child's does", async () => {
  const lines: Record<string, unknown>[] = [];
  const app = appLoggingInto(lines);
  app.get("/logs", async (req) => {
    req.log.warn({ detail: 7 }, "through the request");
    req.log.child({ extra: "yes" }).error("through a grandchild");
    return { level: req.log.level };
  });
  const res = await app.inject({ method: "GET", url: "/logs" });
  assert.equal(res.statusCode, 200);
  assert.deepEqual(res.json(), { level: "info" });
  const warn = lines.find((l) => l.msg === "through the request");
  assert.equal(warn?.level, 40);
  assert.equal(warn?.detail, 7);
  assert.equal(warn?.reqId, "req-1");
  const grandchild = lines.find((l) => l.msg === "through a grandchild");
  assert.equal(grandchild?.reqId, "req-1");
  assert.equal(grandchild?.extra, "yes");
  await app.close();
});

test("a request that logs nothing makes no child logger, and levels below the server's are not written", async () => {
  const lines: Record<string, unknown>[] = [];
  const app = appLoggingInto(lines, "warn");
  let children = 0;
  const child = app.log.child.bind(app.log);
  app.log.child = ((...args: Parameters<typeof child>) => {
    children++;
    return child(...args);
  }) as typeof app.log.child;
  app.get("/quiet", async () => ({ ok: true }));
  app.get("/info", async (req) => {
    req.log.info("not at warn");
    return { enabled: (req.log as unknown as { isLevelEnabled(l: string): boolean }).isLevelEnabled("info") };
  });
  assert.equal((await app.inject({ method: "GET", url: "/quiet" })).statusCode, 200);
  assert.equal(children, 0);
  assert.deepEqual((await app.inject({ method: "GET", url: "/info" })).json(), { enabled: false });
  assert.equal(children, 1);
  assert.equal(
    lines.some((l) => l.msg === "not at warn"),
    false,
  );
  await app.close();
});
