import type { EventRecord } from "../domain/events.js";
import { cloudEventRequest } from "./cloudevents.js";
import { signWebhook } from "./signature.js";
import type { SinkRequest } from "./sink.js";

/** What one delivery of an event to one subscription needs besides the event. */
export interface DeliveryCredentials {
  /** This deployment's base URL: the events' source. */
  source: string;
  /** The subscription's "whsec_…" secret. */
  secret: string;
  /** A bearer token from TokenService.mintDelivery(sink URL, subscription uid), fresh for this attempt. */
  token: string;
  /** When the attempt is made (ms since the epoch): the webhook timestamp. */
  now: number;
}

/**
 * The request of one delivery attempt: the CloudEvent in binary content mode,
 * the Standard Webhooks headers signing its exact body (the event id is the
 * webhook id, the same on every retry), and the bearer token.
 */
export function deliveryRequest(event: EventRecord, credentials: DeliveryCredentials): SinkRequest {
  const { headers, body } = cloudEventRequest(event, credentials.source);
  const signed = signWebhook(credentials.secret, { id: event.id, timestamp: Math.floor(credentials.now / 1000), body });
  return { headers: { ...headers, ...signed, authorization: `Bearer ${credentials.token}` }, body };
}
