/**
 * Issue 31 §2: SIGHUP never stops the server. `systemctl reload` runs the
 * unit's ExecReload (`/bin/kill -HUP $MAINPID`); without TLS, Node's default
 * for SIGHUP killed the server at once (no drain, no line) and systemd took
 * it for a clean exit. Here the unit's own ExecReload command is run against
 * `platform-api serve` (one process, and a primary with two workers, which
 * passes the signal on), and the server must log what it did and go on
 * answering. With TLS, test/protocols/tls-reload.test.ts shows the certificate re-read.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { isListening, startServeProcess, type ServeProcess } from "../support/serve-process.js";

const UNIT = fileURLToPath(new URL("../../deploy/platform-api.service", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "platform-reload-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The unit's ExecReload, split into argv with $MAINPID replaced by pid. */
function execReload(pid: number): string[] {
  const line = readFileSync(UNIT, "utf8")
    .split("\n")
    .find((l) => l.startsWith("ExecReload="));
  assert.ok(line, "the unit has an ExecReload");
  return line
    .slice("ExecReload=".length)
    .trim()
    .split(/\s+/)
    .map((word) => word.replace("$MAINPID", String(pid)));
}

/** The log lines whose message starts with "reload". */
const reloadLines = (server: ServeProcess) => server.lines().filter((l) => l.msg.startsWith("reload"));

for (const workers of [1, 2]) {
  test(`the unit's reload (SIGHUP) without TLS keeps ${workers === 1 ? "the server" : "the primary and its workers"} serving, and says so`, async () => {
    const server = await startServeProcess({
      PLATFORM_DATA_DIR: join(dir, `data-${workers}`),
      PLATFORM_WORKERS: String(workers),
      LOG_LEVEL: "info",
    });
    try {
      // Ready: every worker has logged its start-up line.
      assert.equal(
        new Set(
          server
            .lines()
            .filter(isListening)
            .map((l) => l.pid),
        ).size,
        workers,
        "every worker listening",
      );
      const [command, ...args] = execReload(server.pid);
      for (let reload = 1; reload <= 2; reload++) {
        await promisify(execFile)(command!, args);
        // One line per process that received it: the server, or the primary and each worker.
        const expected = workers === 1 ? reload : reload * (workers + 1);
        await server.until(() => reloadLines(server).length >= expected, "reload lines");
        const res = await fetch(`http://127.0.0.1:${server.port}/healthz`);
        assert.equal(res.status, 200, "still serving after the reload");
      }
      const lines = reloadLines(server);
      if (workers === 1) {
        assert.deepEqual(new Set(lines.map((l) => l.msg)), new Set(["reload: nothing to re-read (TLS is off); still serving"]));
      } else {
        assert.equal(lines.filter((l) => l.msg === "reload: SIGHUP passed on to the workers").length, 2);
        assert.equal(new Set(lines.filter((l) => l.msg.startsWith("reload: nothing")).map((l) => l.pid)).size, workers, "each worker");
      }
      assert.doesNotMatch(server.output(), /shutting down/);
    } finally {
      await server.stop();
    }
  });
}
