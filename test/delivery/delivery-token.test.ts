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
import { describe, test } from "node:test";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { DELIVERY_TOKEN_LIFETIME_SECONDS, TokenRejectedError } from "../../src/auth/tokens.js";
import { deliveryRequest } from "../../src/delivery/request.js";
import { generateWebhookSecret } from "../../src/delivery/signature.js";
import { postToSink } from "../../src/delivery/sink.js";
import { createdEvent, EVENT_GROUP, receivingServer, SUBSCRIPTION } from "../support/event-receiver.js";
import { rest } from "../support/server.js";

const EVENT = createdEvent("group", 2, { uid: EVENT_GROUP });
const world = receivingServer();

describe("delivery tokens", () => {
  test("ES256 from our issuer and a key in our JWKS, typ webhook+jwt, aud the sink, sub the subscription, five minutes", async () => {
    const sinkUrl = "https://hooks.example/platform?tenant=7";
    const { token, expiresAt } = await world.srv.server.tokens.mintDelivery(sinkUrl, SUBSCRIPTION);
    const header = decodeProtectedHeader(token);
    const claims = decodeJwt(token);
    assert.equal(header.alg, "ES256");
    assert.equal(header.typ, "webhook+jwt");
    const jwks = (await rest(world.srv.url, "GET", "/.well-known/jwks.json", undefined, { authorization: "" })).body as {
      keys: { kid: string }[];
    };
    assert.ok(
      jwks.keys.some((k) => k.kid === header.kid),
      "signed by a key the JWKS publishes",
    );
    assert.equal(claims.iss, world.srv.server.tokens.issuer);
    assert.equal(claims.aud, sinkUrl);
    assert.equal(claims.sub, SUBSCRIPTION);
    assert.equal(claims.exp! - claims.iat!, DELIVERY_TOKEN_LIFETIME_SECONDS);
    assert.equal(DELIVERY_TOKEN_LIFETIME_SECONDS, 300);
    assert.equal(expiresAt, claims.exp! * 1000);
    assert.equal(typeof claims.jti, "string");
  });

  test("never an API token: verify() and the API refuse one whose audience is our base URL and whose subject is the administrator", async () => {
    const { token } = await world.srv.server.tokens.mintDelivery(world.srv.server.tokens.audience, world.srv.server.adminSubject);
    assert.equal(decodeJwt(token).aud, world.srv.server.tokens.audience);
    await assert.rejects(
      world.srv.server.tokens.verify(token),
      (err: unknown) => err instanceof TokenRejectedError && /typ/.test(err.detail),
    );
    const res = await rest(world.srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${token}` });
    assert.equal(res.status, 401);
    // The same call with an API token of the same subject passes: the refusal is the token's type.
    const api = await world.srv.server.tokens.mint(world.srv.server.adminSubject);
    assert.equal(
      (await rest(world.srv.url, "GET", "/iam/v2beta1/groups", undefined, { authorization: `Bearer ${api.token}` })).status,
      200,
    );
  });

  test("the receiver verifies it against the server's JWKS; another sink's token or an API token is refused there", async () => {
    const sink = world.receiver.sink("token-check");
    sink.secret = generateWebhookSecret();
    const send = async (token: string) =>
      postToSink(sink.url, deliveryRequest(EVENT, { source: world.srv.url, secret: sink.secret, token, now: Date.now() }), {
        policy: { allowLoopback: true },
      });

    const good = await send((await world.srv.server.tokens.mintDelivery(sink.url, SUBSCRIPTION)).token);
    assert.deepEqual([good.outcome, good.status], ["delivered", 204]);
    assert.equal(sink.deliveries[0]!.claims!.sub, SUBSCRIPTION);

    const otherSink = await send((await world.srv.server.tokens.mintDelivery(`${world.receiver.url}/elsewhere`, SUBSCRIPTION)).token);
    assert.deepEqual([otherSink.outcome, otherSink.status, otherSink.error], ["failed", 401, "HTTP 401"]);
    assert.match(sink.deliveries[1]!.tokenError, /"aud" claim/);

    const apiToken = await send((await world.srv.server.tokens.mint(SUBSCRIPTION)).token);
    assert.deepEqual([apiToken.outcome, apiToken.status], ["failed", 401]);
    assert.match(sink.deliveries[2]!.tokenError, /"typ"/);
    assert.equal(sink.deliveries.length, 3);
  });
});
