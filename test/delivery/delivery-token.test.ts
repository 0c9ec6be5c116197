/**
 * Issue 23 §3: each delivery carries `Authorization: Bearer <token>`, a JWT
 * from this server's issuer with aud = the sink URL, sub = the subscription,
 * typ webhook+jwt and five minutes of life. A receiver verifies it against
 * /.well-known/jwks.json; this server never accepts it as an API token, even
 * one whose audience is its own base URL and whose subject is the
 * administrator.
 *
 * The tokens are minted by the running server's own TokenService
 * (RunningServer.tokens, which the test support already uses to mint API
 * tokens): same keys, same issuer, and the JWKS the server really serves.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { DELIVERY_TOKEN_LIFETIME_SECONDS, TokenRejectedError } from "../../src/auth/tokens.js";
import { deliveryRequest } from "../../src/delivery/request.js";
import { generateWebhookSecret } from "../../src/delivery/signature.js";
import { postToSink } from "../../src/delivery/sink.js";
import { eventType, type EventRecord } from "../../src/domain/events.js";
import { startEventReceiver, type EventReceiver } from "../support/event-receiver.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const SUBSCRIPTION = "5b0c7c1e-7a1e-4c3e-9a55-4bb0d5c8e0aa";
const EVENT: EventRecord = {
  id: "7e0c8a3e-5f7e-4c55-9a55-4bb0d5c8e002",
  kind: "group",
  type: eventType("group", "created"),
  subject: "9d7c2f3a-0000-4000-8000-00000000000a",
  groupUid: "9d7c2f3a-0000-4000-8000-00000000000a",
  time: Date.UTC(2025, 0, 2),
  data: '{"actor":{"subject":"3f1c"},"requestId":"r-2","body":{"uid":"9d7c2f3a-0000-4000-8000-00000000000a"}}',
  position: { txid: 0n, seq: 2n },
};

let srv: TestServer;
let receiver: EventReceiver;

before(async () => {
  srv = await startTestServer();
  receiver = await startEventReceiver({ jwksUrl: `${srv.url}/.well-known/jwks.json`, issuer: srv.server.tokens.issuer });
});
after(async () => {
  await receiver.close();
  await srv.close();
});

describe("delivery tokens", () => {
  test("ES256 from our issuer and a key in our JWKS, typ webhook+jwt, aud the sink, sub the subscription, five minutes", async () => {
    const sinkUrl = "https://hooks.example/platform?tenant=7";
    const { token, expiresAt } = await srv.server.tokens.mintDelivery(sinkUrl, SUBSCRIPTION);
    const header = decodeProtectedHeader(token);
    const claims = decodeJwt(token);
    assert.equal(header.alg, "ES256");
    assert.equal(header.typ, "webhook+jwt");
    const jwks = (await rest(srv.url, "GET", "/.well-known/jwks.json", undefined, { authorization: "" })).body as {
      keys: { kid: string }[];
    };
    assert.ok(
      jwks.keys.some((k) => k.kid === header.kid),
      "signed by a key the JWKS publishes",
    );
    assert.equal(claims.iss, srv.server.tokens.issuer);
    assert.equal(claims.aud, sinkUrl);
    assert.equal(claims.sub, SUBSCRIPTION);
    assert.equal(claims.exp! - claims.iat!, DELIVERY_TOKEN_LIFETIME_SECONDS);
    assert.equal(DELIVERY_TOKEN_LIFETIME_SECONDS, 300);
    assert.equal(expiresAt, claims.exp! * 1000);
    assert.equal(typeof claims.jti, "string");
  });

  test("never an API token: verify() and the API refuse one whose audience is our base URL and whose subject is the administrator", async () => {
    const { token } = await srv.server.tokens.mintDelivery(srv.server.tokens.audience, srv.server.adminSubject);
    assert.equal(decodeJwt(token).aud, srv.server.tokens.audience);
    await assert.rejects(srv.server.tokens.verify(token), (err: unknown) => err instanceof TokenRejectedError && /typ/.test(err.detail));
    const res = await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${token}` });
    assert.equal(res.status, 401);
    // The same call with an API token of the same subject passes: the refusal is the token's type.
    const api = await srv.server.tokens.mint(srv.server.adminSubject);
    assert.equal((await rest(srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${api.token}` })).status, 200);
  });

  test("the receiver verifies it against the server's JWKS; another sink's token or an API token is refused there", async () => {
    const sink = receiver.sink("token-check");
    sink.secret = generateWebhookSecret();
    const send = async (token: string) =>
      postToSink(sink.url, deliveryRequest(EVENT, { source: srv.url, secret: sink.secret, token, now: Date.now() }), {
        policy: { allowLoopback: true },
      });

    const good = await send((await srv.server.tokens.mintDelivery(sink.url, SUBSCRIPTION)).token);
    assert.deepEqual([good.outcome, good.status], ["delivered", 204]);
    assert.equal(sink.deliveries[0]!.claims!.sub, SUBSCRIPTION);

    const otherSink = await send((await srv.server.tokens.mintDelivery(`${receiver.url}/elsewhere`, SUBSCRIPTION)).token);
    assert.deepEqual([otherSink.outcome, otherSink.status, otherSink.error], ["failed", 401, "HTTP 401"]);
    assert.match(sink.deliveries[1]!.tokenError, /"aud" claim/);

    const apiToken = await send((await srv.server.tokens.mint(SUBSCRIPTION)).token);
    assert.deepEqual([apiToken.outcome, apiToken.status], ["failed", 401]);
    assert.match(sink.deliveries[2]!.tokenError, /"typ"/);
    assert.equal(sink.deliveries.length, 3);
  });
});
