import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Standard Webhooks signatures (https://www.standardwebhooks.com): every
 * delivery carries its id, a unix timestamp and an HMAC-SHA256 over
 * "<id>.<timestamp>.<body>" with the subscription's secret, so a receiver
 * knows the body is ours, unaltered, and recent (a replay past the tolerance
 * fails). The id is the event's: a retry of the same event has the same id,
 * so receivers de-duplicate on it.
 */

/** The Standard Webhooks header names. */
const WEBHOOK_HEADERS = {
  id: "webhook-id",
  timestamp: "webhook-timestamp",
  signature: "webhook-signature",
} as const;

/** Prefix of a subscription secret as shown to its creator; the rest is base64 of the key bytes. */
const WEBHOOK_SECRET_PREFIX = "whsec_";
/** Key bytes of a secret we generate. */
const SECRET_BYTES = 32;
/** The signature scheme we sign with (symmetric HMAC-SHA256). */
const SCHEME = "v1";
/** How far a timestamp may be from the receiver's clock, either way (the libraries' default). */
const DEFAULT_TOLERANCE_SECONDS = 5 * 60;

/** A new subscription secret: "whsec_" + base64 of 32 random bytes, shown once to the subscription's creator. */
export function generateWebhookSecret(): string {
  return WEBHOOK_SECRET_PREFIX + randomBytes(SECRET_BYTES).toString("base64");
}

/** The key bytes of a secret, with or without its "whsec_" prefix; throws on an empty or non-base64 one. */
export function webhookKey(secret: string): Buffer {
  const encoded = secret.startsWith(WEBHOOK_SECRET_PREFIX) ? secret.slice(WEBHOOK_SECRET_PREFIX.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) throw new Error("a webhook secret is base64 after its whsec_ prefix");
  return Buffer.from(encoded, "base64");
}

/** A message to sign: its id, when it is sent (unix seconds) and its exact body. */
export interface WebhookMessage {
  id: string;
  timestamp: number;
  body: string | Buffer;
}

/** The HMAC of "<id>.<timestamp>.<body>", the timestamp spelled as sent. */
function hmac(key: Buffer, id: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac("sha256", key).update(`${id}.${timestamp}.`).update(body).digest();
}

/** The webhook-signature value for message: "v1,<base64 HMAC-SHA256>". */
export function webhookSignature(secret: string, message: WebhookMessage): string {
  return `${SCHEME},${hmac(webhookKey(secret), message.id, String(message.timestamp), message.body).toString("base64")}`;
}

/** The three Standard Webhooks headers of message. */
export function signWebhook(secret: string, message: WebhookMessage): Record<string, string> {
  return {
    [WEBHOOK_HEADERS.id]: message.id,
    [WEBHOOK_HEADERS.timestamp]: String(message.timestamp),
    [WEBHOOK_HEADERS.signature]: webhookSignature(secret, message),
  };
}

/** Thrown by verifyWebhook, saying which check failed. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/**
 * Checks a delivery the way a receiver should: the three headers present, the
 * timestamp within tolerance of now (either way), and one of the
 * space-separated "v1,…" signatures equal (in constant time) to the HMAC of
 * the exact body received. Other schemes in the list are skipped, so a sender
 * may add one (or sign with two secrets during a rotation). Returns the
 * message id; throws WebhookVerificationError.
 */
export function verifyWebhook(
  secret: string,
  headers: Record<string, string | string[] | undefined>,
  body: string | Buffer,
  opts: { now?: number; toleranceSeconds?: number } = {},
): string {
  const header = (name: string) => {
    const value = headers[name];
    if (typeof value !== "string" || value === "") throw new WebhookVerificationError(`missing ${name} header`);
    return value;
  };
  const id = header(WEBHOOK_HEADERS.id);
  const stamp = header(WEBHOOK_HEADERS.timestamp);
  const signatures = header(WEBHOOK_HEADERS.signature);
  if (!/^\d{1,15}$/.test(stamp)) throw new WebhookVerificationError("webhook-timestamp is not unix seconds");
  const timestamp = Number(stamp);
  const now = Math.floor((opts.now ?? Date.now()) / 1000);
  const tolerance = opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (Math.abs(now - timestamp) > tolerance) throw new WebhookVerificationError("webhook-timestamp is outside the tolerance");
  const expected = hmac(webhookKey(secret), id, stamp, body);
  for (const entry of signatures.split(" ")) {
    const [scheme, encoded] = entry.split(",", 2);
    if (scheme !== SCHEME || encoded === undefined) continue;
    const given = Buffer.from(encoded, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) return id;
  }
  throw new WebhookVerificationError("no webhook-signature matches");
}
