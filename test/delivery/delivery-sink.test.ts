/**
 * Issue 23 §3: posting a delivery to a sink, with the guards of issuer
 * fetches, against the test receiver on loopback (which verifies the bearer
 * token against a real server's JWKS and the webhook signature): 2xx is
 * delivered; 5xx, 408, 429, no answer in time and a refused connection are
 * retried; other answers, a redirect and a refused address fail.
 */
import assert from "node:assert/strict";
import { createServer, type AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { ExchangeFailedError, requestGuarded } from "../../src/auth/guarded-fetch.js";
import { deliveryRequest } from "../../src/delivery/request.js";
import { generateWebhookSecret } from "../../src/delivery/signature.js";
import { outcomeOfStatus, postToSink, sinkUrlProblem, type DeliveryAttempt } from "../../src/delivery/sink.js";
import { createdEvent, receivingServer, SUBSCRIPTION, type Sink } from "../support/event-receiver.js";

const LOOPBACK_ALLOWED = { allowLoopback: true };
const PRODUCTION = { allowLoopback: false };
const EVENT = createdEvent("repo", 1, { uid: "1d7c2f3a-0000-4000-8000-00000000000b", name: "café" });
const world = receivingServer();

/** A fresh sink with its secret set, as a subscription create would leave it. */
function freshSink(name: string): Sink {
  const sink = world.receiver.sink(name);
  sink.secret = generateWebhookSecret();
  return sink;
}

/** One delivery attempt of EVENT to sink, signed and with a token for its URL, the way the delivery loop sends it. */
async function deliver(
  sink: Sink,
  opts: { url?: string; policy?: { allowLoopback: boolean }; timeoutMs?: number } = {},
): Promise<DeliveryAttempt> {
  const { token } = await world.srv.server.tokens.mintDelivery(sink.url, SUBSCRIPTION);
  const request = deliveryRequest(EVENT, { source: world.srv.url, secret: sink.secret, token, now: Date.now() });
  return postToSink(opts.url ?? sink.url, request, { policy: opts.policy ?? LOOPBACK_ALLOWED, timeoutMs: opts.timeoutMs });
}

describe("posting a delivery to a sink", () => {
  test("a 2xx answer is delivered; the receiver verified the token against the JWKS and the signature over the exact body", async () => {
    const sink = freshSink("ok");
    const attempt = await deliver(sink);
    assert.equal(attempt.outcome, "delivered");
    assert.equal(attempt.status, 204);
    assert.equal(attempt.error, "");
    assert.ok(Number.isInteger(attempt.latencyMs) && attempt.latencyMs >= 0);
    const [received] = sink.deliveries;
    assert.equal(sink.deliveries.length, 1);
    assert.equal(received!.tokenError, "");
    assert.equal(received!.signatureError, "");
    assert.equal(received!.webhookId, EVENT.id);
    assert.equal(received!.claims!.sub, SUBSCRIPTION);
    assert.equal(received!.claims!.aud, sink.url);
    assert.equal(received!.claims!.iss, world.srv.server.tokens.issuer);
    assert.equal(received!.body, EVENT.data);
    assert.equal(received!.headers["content-type"], "application/json");
    assert.equal(received!.headers["ce-specversion"], "1.0");
    assert.equal(received!.headers["ce-type"], "api.platform.registry.repo.created.v1");
    assert.equal(received!.headers["ce-source"], world.srv.url);
    assert.equal(received!.headers["ce-group"], EVENT.groupUid);
  });

  test("a 2xx answer with a large body is delivered: at most a few KiB of it are read", async () => {
    const sink = freshSink("chatty");
    sink.behave({ status: 200, body: "x".repeat(1024 * 1024) });
    const attempt = await deliver(sink);
    assert.deepEqual([attempt.outcome, attempt.status, attempt.error], ["delivered", 200, ""]);
    // What the post reads of it: the first 4 KiB, then the connection is dropped.
    const { token } = await world.srv.server.tokens.mintDelivery(sink.url, SUBSCRIPTION);
    const request = deliveryRequest(EVENT, { source: world.srv.url, secret: sink.secret, token, now: Date.now() });
    const res = await requestGuarded(
      sink.url,
      { method: "POST", headers: request.headers, body: Buffer.from(request.body) },
      { timeoutMs: 10_000, maxBytes: 4096, addressAllowed: () => true },
    );
    assert.deepEqual([res.status, res.body.length, res.truncated], [200, 4096, true]);
  });

  test("5xx, 408 and 429 are retried; other 4xx fail; the error names the status only", async () => {
    const sink = freshSink("statuses");
    for (const [status, outcome] of [
      [500, "retry"],
      [503, "retry"],
      [408, "retry"],
      [429, "retry"],
      [404, "failed"],
      [400, "failed"],
      [410, "failed"],
    ] as const) {
      sink.behave({ status });
      const attempt = await deliver(sink);
      assert.deepEqual([attempt.outcome, attempt.status, attempt.error], [outcome, status, `HTTP ${status}`], `HTTP ${status}`);
    }
    // Each was a verified delivery, answered as told.
    assert.deepEqual(
      sink.deliveries.map((d) => [d.status, d.tokenError, d.signatureError]),
      [500, 503, 408, 429, 404, 400, 410].map((s) => [s, "", ""]),
    );
  });

  test("a sink that does not answer within the timeout is retried", async () => {
    const sink = freshSink("hangs");
    sink.behave({ hangMs: 120_000 });
    const attempt = await deliver(sink, { timeoutMs: 1_000 });
    assert.deepEqual([attempt.outcome, attempt.status, attempt.error], ["retry", 0, "no answer within 1000 ms"]);
    world.receiver.releaseHangs();
  });

  test("a redirect is not followed: the delivery fails and its target receives nothing", async () => {
    const target = freshSink("redirect-target");
    const sink = freshSink("redirects");
    sink.behave({ status: 307, location: target.url });
    const attempt = await deliver(sink);
    assert.deepEqual([attempt.outcome, attempt.status, attempt.error], ["failed", 307, "HTTP 307: redirects are not followed"]);
    assert.equal(sink.deliveries.length, 1);
    assert.equal(target.deliveries.length, 0);
  });

  test("a refused connection is retried; the error never carries the sink URL's query", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const sink = freshSink("unused");
    const attempt = await deliver(sink, { url: `http://127.0.0.1:${port}/hook?key=s3cret` });
    assert.equal(attempt.outcome, "retry");
    assert.equal(attempt.status, 0);
    assert.match(attempt.error, /ECONNREFUSED/);
    assert.doesNotMatch(attempt.error, /s3cret/);
  });

  test("loopback and private addresses are refused unless the loopback setting allows loopback; nothing is sent", async () => {
    const sink = freshSink("guarded");
    const port = new URL(world.receiver.url).port;
    for (const [url, policy, error] of [
      [sink.url, PRODUCTION, "sink URL refused: must use https"],
      [`https://127.0.0.1:${port}/guarded`, PRODUCTION, "sink URL refused: must not be a loopback, private or link-local address"],
      [`https://localhost:${port}/guarded`, PRODUCTION, "sink URL refused: must not be a loopback, private or link-local address"],
      [`https://[::1]:${port}/guarded`, PRODUCTION, "sink URL refused: must not be a loopback, private or link-local address"],
      ["https://10.1.2.3/guarded", LOOPBACK_ALLOWED, "sink URL refused: must not be a loopback, private or link-local address"],
      ["https://169.254.169.254/latest", LOOPBACK_ALLOWED, "sink URL refused: must not be a loopback, private or link-local address"],
      ["http://sink.example/hook", LOOPBACK_ALLOWED, "sink URL refused: must use https"],
    ] as const) {
      const attempt = await deliver(sink, { url, policy });
      assert.deepEqual([attempt.outcome, attempt.status, attempt.error], ["failed", 0, error], url);
    }
    assert.equal(sink.deliveries.length, 0);
    assert.deepEqual(world.receiver.strays, []);
  });

  test("a name is checked on the addresses it resolves to: none allowed, no connection", async () => {
    const sink = freshSink("by-name");
    const url = `http://localhost:${new URL(world.receiver.url).port}/by-name`;
    await assert.rejects(
      requestGuarded(
        url,
        { method: "POST", headers: {}, body: Buffer.from("{}") },
        { timeoutMs: 10_000, maxBytes: 4096, addressAllowed: () => false },
      ),
      (err: unknown) => err instanceof ExchangeFailedError && err.kind === "policy" && err.message === "address not allowed",
    );
    assert.equal(sink.deliveries.length, 0);
  });
});

describe("the delivery rules", () => {
  test("outcome by status: 2xx delivered; 5xx, 408, 429 retry; everything else failed", () => {
    const table: [number, string][] = [
      [200, "delivered"],
      [201, "delivered"],
      [204, "delivered"],
      [299, "delivered"],
      [301, "failed"],
      [302, "failed"],
      [304, "failed"],
      [400, "failed"],
      [401, "failed"],
      [403, "failed"],
      [404, "failed"],
      [408, "retry"],
      [413, "failed"],
      [429, "retry"],
      [500, "retry"],
      [502, "retry"],
      [504, "retry"],
    ];
    for (const [status, outcome] of table) assert.equal(outcomeOfStatus(status), outcome, String(status));
  });

  test("sink URLs: https on a public host; loopback http(s) only when allowed; never userinfo or a fragment", () => {
    for (const ok of ["https://hooks.example/a", "https://hooks.example:8443/a?b=c", "https://8.8.8.8/x"]) {
      assert.equal(sinkUrlProblem(ok, PRODUCTION), undefined, ok);
    }
    for (const ok of ["http://127.0.0.1:9000/a", "http://localhost:9000/a", "http://[::1]:9000/a", "https://127.0.0.1/a"]) {
      assert.equal(sinkUrlProblem(ok, LOOPBACK_ALLOWED), undefined, ok);
      assert.notEqual(sinkUrlProblem(ok, PRODUCTION), undefined, ok);
    }
    for (const [bad, problem] of [
      ["hooks.example/a", "must be an absolute URL"],
      ["ftp://hooks.example/a", "must be an https URL"],
      ["https://user:pw@hooks.example/a", "must not carry a user name or password"],
      ["https://hooks.example/a#frag", "must not have a fragment"],
      ["http://hooks.example/a", "must use https"],
      ["https://192.168.1.1/a", "must not be a loopback, private or link-local address"],
      ["https://[fd00::1]/a", "must not be a loopback, private or link-local address"],
      [`https://hooks.example/${"a".repeat(2048)}`, "must be at most 2048 characters"],
    ] as const) {
      assert.equal(sinkUrlProblem(bad, LOOPBACK_ALLOWED), problem, bad);
    }
  });
});
