/**
 * Issue 23 §3: Standard Webhooks signatures. Every delivery carries
 * webhook-id, webhook-timestamp and webhook-signature (v1, HMAC-SHA256 over
 * "<id>.<timestamp>.<body>" keyed by the subscription's whsec_ secret); a
 * receiver verifies them with a tolerance window and accepts any one of
 * several space-separated signatures.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  generateWebhookSecret,
  signWebhook,
  verifyWebhook,
  webhookKey,
  webhookSignature,
  WebhookVerificationError,
} from "../../src/delivery/signature.js";

/** The signing example of the Standard Webhooks reference library (libraries/javascript, "sign function works"). */
const REFERENCE = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
};
const AT_REFERENCE = REFERENCE.timestamp * 1000;

const refused = (fn: () => unknown, pattern: RegExp) =>
  assert.throws(fn, (err: unknown) => err instanceof WebhookVerificationError && pattern.test(err.message));

describe("Standard Webhooks signatures", () => {
  test("the reference library's example signs to the same value, and verifies", () => {
    assert.equal(webhookSignature(REFERENCE.secret, REFERENCE), REFERENCE.signature);
    const headers = signWebhook(REFERENCE.secret, REFERENCE);
    assert.deepEqual(headers, {
      "webhook-id": REFERENCE.id,
      "webhook-timestamp": "1614265330",
      "webhook-signature": REFERENCE.signature,
    });
    assert.equal(verifyWebhook(REFERENCE.secret, headers, REFERENCE.body, { now: AT_REFERENCE }), REFERENCE.id);
    // The secret works with or without its prefix, as in the reference libraries.
    assert.equal(
      verifyWebhook(REFERENCE.secret.slice("whsec_".length), headers, Buffer.from(REFERENCE.body), { now: AT_REFERENCE }),
      REFERENCE.id,
    );
  });

  test("a generated secret is whsec_ and base64 of 32 random bytes, different every time", () => {
    const a = generateWebhookSecret();
    const b = generateWebhookSecret();
    assert.match(a, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.equal(webhookKey(a).length, 32);
    assert.notEqual(a, b);
    assert.throws(() => webhookKey("whsec_"), /base64/);
    assert.throws(() => webhookKey("whsec_not base64!"), /base64/);
  });

  test("round trip with a generated secret; any change to the body, id, timestamp or secret is refused", () => {
    const secret = generateWebhookSecret();
    const now = 1_700_000_000_000;
    const message = {
      id: "0b7c8a3e-5f7e-4c55-9a55-4bb0d5c8e001",
      timestamp: now / 1000,
      body: '{"actor":{"subject":"a"},"body":{"uid":"g"}}',
    };
    const headers = signWebhook(secret, message);
    assert.equal(verifyWebhook(secret, headers, message.body, { now }), message.id);

    refused(() => verifyWebhook(secret, headers, message.body.replace('"g"', '"h"'), { now }), /no webhook-signature matches/);
    refused(() => verifyWebhook(secret, headers, `${message.body} `, { now }), /no webhook-signature matches/);
    refused(
      () => verifyWebhook(secret, { ...headers, "webhook-id": `${message.id}x` }, message.body, { now }),
      /no webhook-signature matches/,
    );
    refused(
      () => verifyWebhook(secret, { ...headers, "webhook-timestamp": String(message.timestamp + 1) }, message.body, { now }),
      /no webhook-signature matches/,
    );
    refused(() => verifyWebhook(generateWebhookSecret(), headers, message.body, { now }), /no webhook-signature matches/);
    // A signature with its last byte changed, cut short, empty, or of another scheme.
    const sig = headers["webhook-signature"]!;
    const flipped = Buffer.from(sig.slice(3), "base64");
    flipped[31]! ^= 1;
    for (const bad of [`v1,${flipped.toString("base64")}`, sig.slice(0, 20), "v1,", `v2,${sig.slice(3)}`, sig.slice(3)]) {
      refused(() => verifyWebhook(secret, { ...headers, "webhook-signature": bad }, message.body, { now }), /no webhook-signature matches/);
    }
  });

  test("several space-separated signatures: one valid v1 among others is enough", () => {
    const headers = signWebhook(REFERENCE.secret, REFERENCE);
    const other = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=";
    const list = [other, `v1a,${REFERENCE.signature.slice(3)}`, REFERENCE.signature, other].join(" ");
    assert.equal(
      verifyWebhook(REFERENCE.secret, { ...headers, "webhook-signature": list }, REFERENCE.body, { now: AT_REFERENCE }),
      REFERENCE.id,
    );
    refused(
      () =>
        verifyWebhook(REFERENCE.secret, { ...headers, "webhook-signature": `${other} ${other}` }, REFERENCE.body, { now: AT_REFERENCE }),
      /no webhook-signature matches/,
    );
  });

  test("the timestamp must be within the tolerance (5 minutes by default), either way", () => {
    const headers = signWebhook(REFERENCE.secret, REFERENCE);
    const verifyAt = (now: number, toleranceSeconds?: number) =>
      verifyWebhook(REFERENCE.secret, headers, REFERENCE.body, { now, toleranceSeconds });
    assert.equal(verifyAt(AT_REFERENCE + 300_000), REFERENCE.id);
    assert.equal(verifyAt(AT_REFERENCE - 300_000), REFERENCE.id);
    refused(() => verifyAt(AT_REFERENCE + 301_000), /outside the tolerance/);
    refused(() => verifyAt(AT_REFERENCE - 301_000), /outside the tolerance/);
    assert.equal(verifyAt(AT_REFERENCE + 3_600_000, 3600), REFERENCE.id);
    refused(() => verifyAt(AT_REFERENCE + 11_000, 10), /outside the tolerance/);
  });

  test("a missing header or a timestamp that is not unix seconds is refused, naming what is wrong", () => {
    const headers = signWebhook(REFERENCE.secret, REFERENCE);
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
      const without: Record<string, string | undefined> = { ...headers, [name]: undefined };
      refused(() => verifyWebhook(REFERENCE.secret, without, REFERENCE.body, { now: AT_REFERENCE }), new RegExp(`missing ${name}`));
    }
    for (const stamp of ["hello", "1614265330.5", "-1614265330", " 1614265330"]) {
      refused(
        () => verifyWebhook(REFERENCE.secret, { ...headers, "webhook-timestamp": stamp }, REFERENCE.body, { now: AT_REFERENCE }),
        /not unix seconds/,
      );
    }
  });
});
