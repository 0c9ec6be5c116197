/**
 * The headless sign-in's device grant (src/cli/auth/device.ts) against a small RFC 8628 authorization server
 * written here (the server's own endpoints are tested in test/cli/cli-auth-e2e.test.ts): the device authorization
 * request and its answer; polling at the server's interval, 5 s slower for good at each slow_down, on through
 * authorization_pending, until the token; expired_token and access_denied ending it in words; the code's
 * expires_in ending it when the server never answers otherwise; and exponential back-off while the server
 * cannot be reached. The clock and the pauses are the test's: what is checked is the pause asked for.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import {
  DEVICE_CODE_GRANT,
  pollForToken,
  startDeviceAuthorization,
  type DeviceAuthorization,
  type PollTiming,
} from "../../src/cli/auth/device.js";
import { AuthCommandError } from "../../src/cli/auth/error.js";
import type { ServerMetadata } from "../../src/cli/auth/server.js";
import { rejectionOf } from "../support/assertions.js";

/** What the stand-in answers to the next token requests, in order: an RFC 8628 error code, or "token". */
let script: string[] = [];
/** The form fields of each request it received, by path. */
let received: { path: string; fields: Record<string, string> }[] = [];
let deviceAnswer: { status: number; body: unknown } = { status: 200, body: {} };

let server: Server;
let base: string;
before(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    req.on("end", () => {
      received.push({ path: req.url ?? "", fields: Object.fromEntries(new URLSearchParams(body)) });
      const reply = (status: number, json: unknown) => {
        res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
        res.end(JSON.stringify(json));
      };
      if (req.url === "/oauth/device_authorization") return reply(deviceAnswer.status, deviceAnswer.body);
      const next = script.shift() ?? "authorization_pending";
      if (next === "token")
        return reply(200, { access_token: "api-token", token_type: "Bearer", expires_in: 3600, refresh_token: "prt_refresh" });
      reply(400, { error: next, error_description: `the stand-in says ${next}` });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

const metadata = (tokenEndpoint = `${base}/oauth/token`): ServerMetadata => ({
  issuer: base,
  authorization_endpoint: `${base}/oauth/authorize`,
  token_endpoint: tokenEndpoint,
  device_authorization_endpoint: `${base}/oauth/device_authorization`,
});

const device = (overrides: Partial<DeviceAuthorization> = {}): DeviceAuthorization => ({
  device_code: "the-device-code",
  user_code: "WDJB-MJHT",
  verification_uri: `${base}/device`,
  expires_in: 600,
  interval: 5,
  ...overrides,
});

/** A clock that moves only by the pauses asked for, and the pauses asked for (ms). */
function testTiming(): PollTiming & { pauses: number[] } {
  let now = 1_000_000;
  const pauses: number[] = [];
  return {
    pauses,
    now: () => now,
    sleep: async (ms) => {
      pauses.push(ms);
      now += ms;
    },
  };
}

/** The message of the AuthCommandError promise rejects with. */
const failure = (promise: Promise<unknown>) => rejectionOf(promise, AuthCommandError);

test("the device authorization request names our client and where to sign in; its answer is read, interval 5 by default", async () => {
  received = [];
  deviceAnswer = {
    status: 200,
    body: {
      device_code: "dc",
      user_code: "WDJB-MJHT",
      verification_uri: `${base}/device`,
      verification_uri_complete: `${base}/device?user_code=WDJB-MJHT`,
      expires_in: 600,
    },
  };
  const started = await startDeviceAuthorization(metadata(), { idp: "", org: "acme", provider: "" });
  assert.deepEqual(received, [{ path: "/oauth/device_authorization", fields: { client_id: "platform-cli", org: "acme" } }]);
  assert.deepEqual(started, { ...(deviceAnswer.body as object), interval: 5 });
});

test("a device authorization refused, or answered without its codes, fails in words", async () => {
  deviceAnswer = { status: 400, body: { error: "invalid_request", error_description: "no such organization" } };
  assert.equal(
    await failure(startDeviceAuthorization(metadata(), { idp: "", org: "nope", provider: "" })),
    "the server did not start a sign-in: invalid_request: no such organization",
  );
  deviceAnswer = { status: 200, body: { device_code: "dc", expires_in: 600 } };
  assert.match(await failure(startDeviceAuthorization(metadata(), { idp: "", org: "", provider: "" })), /lacks device_code, user_code/);
});

test("polls at the interval through authorization_pending, 5 s slower for good after slow_down, until the token", async () => {
  received = [];
  script = ["authorization_pending", "slow_down", "authorization_pending", "slow_down", "authorization_pending", "token"];
  const timing = testTiming();
  const credentials = await pollForToken(metadata(), device(), timing);
  assert.deepEqual(timing.pauses, [5000, 5000, 10_000, 10_000, 15_000, 15_000]);
  assert.equal(credentials.token, "api-token");
  assert.equal(credentials.refreshToken, "prt_refresh");
  assert.equal(received.length, 6);
  for (const r of received) {
    assert.deepEqual(r, {
      path: "/oauth/token",
      fields: { grant_type: DEVICE_CODE_GRANT, device_code: "the-device-code", client_id: "platform-cli" },
    });
  }
});

test("expired_token ends the sign-in: the code expired", async () => {
  script = ["authorization_pending", "expired_token"];
  const timing = testTiming();
  assert.equal(await failure(pollForToken(metadata(), device(), timing)), "the code expired before the sign-in finished; run login again");
  assert.equal(timing.pauses.length, 2);
});

test("access_denied ends the sign-in: refused at the verification page", async () => {
  script = ["access_denied"];
  assert.equal(await failure(pollForToken(metadata(), device(), testTiming())), "the sign-in was refused at the verification page");
});

test("another error ends the sign-in with what the server said", async () => {
  script = ["invalid_grant"];
  assert.equal(
    await failure(pollForToken(metadata(), device(), testTiming())),
    "the sign-in failed (invalid_grant: the stand-in says invalid_grant)",
  );
});

test("pending until the code's expires_in has passed: it stops polling, expired", async () => {
  received = [];
  script = [];
  const timing = testTiming();
  const message = await failure(pollForToken(metadata(), device({ expires_in: 30, interval: 5 }), timing));
  assert.equal(message, "the code expired before the sign-in finished; run login again");
  assert.deepEqual(timing.pauses, [5000, 5000, 5000, 5000, 5000, 5000]);
  assert.equal(received.length, 5, "no poll once the code has expired");
});

test("a server that cannot be reached is polled with exponential back-off, up to a minute, until the code expires", async () => {
  // A port that was listening and is closed now: connections are refused.
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const timing = testTiming();
  const message = await failure(pollForToken(metadata(`http://127.0.0.1:${port}/oauth/token`), device({ expires_in: 300 }), timing));
  assert.equal(message, "the code expired before the sign-in finished; run login again");
  assert.deepEqual(timing.pauses, [5000, 10_000, 20_000, 40_000, 60_000, 60_000, 60_000, 60_000]);
});
