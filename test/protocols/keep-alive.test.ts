/**
 * Keep-alive behind a load balancer: an idle HTTP/1.1 connection must outlive
 * the balancer's own idle timeout (AWS ALB: 60 s), or the balancer reuses a
 * connection the server is closing and its client gets a 502. The timeout is
 * a setting (PLATFORM_KEEP_ALIVE_TIMEOUT_MS, default 65 s).
 */
import assert from "node:assert/strict";
import http from "node:http";
import type { Socket } from "node:net";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { startTestServer } from "../support/server.js";

interface Sent {
  status: number;
  body: string;
  reused: boolean;
  keepAlive: string | undefined;
  socket: Socket;
}

function send(agent: http.Agent, url: string, method: string, token: string, body?: unknown): Promise<Sent> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, agent, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString("utf8")));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body: text,
            reused: req.reusedSocket,
            keepAlive: res.headers["keep-alive"] as string | undefined,
            socket: req.socket!,
          }),
        );
      },
    );
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

test("a connection idle for 6 s (past the old 5 s limit) still carries the next POST; Keep-Alive says 65 s", async () => {
  const srv = await startTestServer();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const first = await send(agent, `${srv.url}/healthz`, "GET", srv.adminToken);
    assert.equal(first.status, 200);
    assert.equal(first.keepAlive, "timeout=65");
    await sleep(6_000);
    const second = await send(agent, `${srv.url}/iam/v2beta1/groups`, "POST", srv.adminToken, { name: "after idle" });
    assert.equal(second.status, 200, second.body);
    assert.equal(second.reused, true, "the idle connection was reused");
    assert.equal(second.socket, first.socket);
  } finally {
    agent.destroy();
    await srv.close();
  }
});

test("PLATFORM_KEEP_ALIVE_TIMEOUT_MS sets it: at 1 s the server closes a connection idle for longer", async () => {
  const srv = await startTestServer({ env: { PLATFORM_KEEP_ALIVE_TIMEOUT_MS: "1000" } });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const first = await send(agent, `${srv.url}/healthz`, "GET", srv.adminToken);
    assert.equal(first.keepAlive, "timeout=1");
    const closed = new Promise<void>((resolve) => first.socket.once("close", () => resolve()));
    await closed;
    const second = await send(agent, `${srv.url}/healthz`, "GET", srv.adminToken);
    assert.equal(second.status, 200);
    assert.equal(second.reused, false, "a new connection");
  } finally {
    agent.destroy();
    await srv.close();
  }
});
