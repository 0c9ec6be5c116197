/**
 * Issue 23 §3: a delivery is a CloudEvent over HTTP in binary content mode —
 * attributes as ce-* headers, the event's data as the body, byte for byte —
 * with the Standard Webhooks headers signing that body and the bearer token.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { cloudEventRequest, encodeHeaderValue, rfc3339 } from "../../src/delivery/cloudevents.js";
import { deliveryRequest } from "../../src/delivery/request.js";
import { generateWebhookSecret, verifyWebhook } from "../../src/delivery/signature.js";
import { eventId, eventType, type EventRecord } from "../../src/domain/events.js";

const DATA =
  '{"actor":{"subject":"3f1c"},"requestId":"r-1","body":{"uid":"g-1","name":"Zürich team","description":"\\u00e9 \\"quoted\\""}}';

const EVENT: EventRecord = {
  id: "0b7c8a3e-5f7e-4c55-9a55-4bb0d5c8e001",
  kind: "group",
  type: eventType("group", "updated"),
  subject: "9d7c2f3a-0000-4000-8000-00000000000a",
  groupUid: "9d7c2f3a-0000-4000-8000-00000000000a",
  time: Date.UTC(2025, 0, 2, 3, 4, 5, 678),
  data: DATA,
  position: { txid: 7n, seq: 42n },
};

describe("CloudEvents binary content mode", () => {
  test("the attributes are ce-* headers, the group extension is ce-group, and the body is the data as stored", () => {
    const { headers, body } = cloudEventRequest(EVENT, "https://platform.example");
    assert.deepEqual(headers, {
      "ce-specversion": "1.0",
      "ce-id": EVENT.id,
      "ce-source": "https://platform.example",
      "ce-type": "api.platform.iam.group.updated.v1",
      "ce-subject": EVENT.subject,
      "ce-time": "2025-01-02T03:04:05.678Z",
      "ce-group": EVENT.groupUid,
      "content-type": "application/json",
    });
    assert.equal(body, DATA);
    assert.ok(Buffer.from(body, "utf8").equals(Buffer.from(DATA, "utf8")));
  });

  test("ce-time is RFC 3339 in UTC", () => {
    assert.equal(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert.match(rfc3339(EVENT.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  test("header values percent-encode space, '\"', '%' and anything outside printable ASCII (UTF-8), nothing else", () => {
    assert.equal(encodeHeaderValue("https://platform.example/a?b=c&d=e~f"), "https://platform.example/a?b=c&d=e~f");
    assert.equal(encodeHeaderValue('a b"c%d'), "a%20b%22c%25d");
    assert.equal(encodeHeaderValue("Zürich\n€"), "Z%C3%BCrich%0A%E2%82%AC");
    const { headers } = cloudEventRequest(EVENT, "https://platform.example/my base");
    assert.equal(headers["ce-source"], "https://platform.example/my%20base");
  });

  test("a delivery request: the CloudEvent, the bearer token, and a webhook signature over its exact body", () => {
    const secret = generateWebhookSecret();
    const now = Date.UTC(2025, 0, 2, 3, 5, 0);
    const { headers, body } = deliveryRequest(EVENT, { source: "https://platform.example", secret, token: "tok.en.here", now });
    assert.equal(body, DATA);
    assert.equal(headers.authorization, "Bearer tok.en.here");
    assert.equal(headers["ce-id"], EVENT.id);
    assert.equal(headers["ce-type"], EVENT.type);
    assert.equal(headers["webhook-id"], EVENT.id, "the webhook id is the event id, the same on every retry");
    assert.equal(headers["webhook-timestamp"], String(now / 1000));
    assert.equal(verifyWebhook(secret, headers, Buffer.from(body, "utf8"), { now }), EVENT.id);
    assert.throws(() => verifyWebhook(secret, headers, DATA.replace("Zürich", "Zurich"), { now }), /no webhook-signature matches/);
  });
});

describe("event ids", () => {
  test("are UUIDs of version 7: the time in their first 48 bits, later ids sorting later, never repeated", () => {
    const at = Date.UTC(2026, 10, 27, 10, 0, 0, 123);
    const id = eventId(at);
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(parseInt(id.slice(0, 8) + id.slice(9, 13), 16), at);
    const ids = Array.from({ length: 5000 }, (_, i) => eventId(at + i));
    assert.deepEqual([...ids].sort(), ids);
    assert.equal(new Set(ids).size, ids.length);
    assert.equal(new Set(Array.from({ length: 5000 }, () => eventId(at))).size, 5000, "random within one millisecond");
  });
});
