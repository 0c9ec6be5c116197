/**
 * With PLATFORM_WORKERS=N every worker writes its log lines to the same
 * stdout. Lines are written in batches (src/server/observe/logging.ts); on a
 * pipe a write over PIPE_BUF may be split and interleaved with another
 * process's, so batches to a pipe are cut at whole lines within PIPE_BUF.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { within } from "../support/assertions.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const LINES = 20_000;

test("processes sharing one stdout pipe: every line the reader gets is whole", async () => {
  // Each writer fills the 64 KiB buffer many times over and flushes it, as a busy worker does.
  const writer = (name: string) => `
    import { BatchedLineWriter } from "./src/server/observe/logging.ts";
    const out = new BatchedLineWriter(1);
    for (let i = 0; i < ${LINES}; i++) out.write(JSON.stringify({ writer: "${name}", i, pad: "x".repeat(150 + (i % 50)) }) + "\\n");
    out.flushSync();
  `;
  const node = JSON.stringify(process.execPath);
  const run = (name: string) => `${node} --import tsx --input-type=module -e '${writer(name)}'`;
  // Both writers inherit the one pipe the test reads, as cluster workers inherit the primary's stdout: two
  // writers under one shell, read slowly, not a server (test/support's fixtures read each process on its own pipe).
  const child = spawn("/bin/sh", ["-c", `${run("a")} & ${run("b")} & wait`], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const chunks: Buffer[] = [];
  // A slow reader, so the pipe fills and writers wait for room.
  child.stdout.on("data", (chunk: Buffer) => {
    chunks.push(chunk);
    child.stdout.pause();
    setTimeout(() => child.stdout.resume(), 1);
  });
  const [code] = (await within(60_000, once(child, "close"), "the writers finish")) as [number | null];
  assert.equal(code, 0, stderr);
  const seen = { a: 0, b: 0 };
  for (const line of Buffer.concat(chunks).toString("utf8").split("\n").slice(0, -1)) {
    let parsed: { writer: "a" | "b"; i: number };
    try {
      parsed = JSON.parse(line) as typeof parsed;
    } catch {
      assert.fail(`a line arrived broken: ${line.slice(0, 120)}…`);
    }
    assert.equal(parsed.i, seen[parsed.writer]++, "each writer's lines in order");
  }
  assert.deepEqual(seen, { a: LINES, b: LINES });
});
