import { CLOUDEVENTS_SPEC_VERSION, type EventRecord } from "../domain/events.js";

/**
 * CloudEvents 1.0 over HTTP in binary content mode
 * (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/http-protocol-binding.md):
 * the attributes travel as ce-* headers and the body is the event's data
 * exactly as stored, so the bytes a receiver hashes are the bytes we signed.
 */

/** The header of each attribute we send; `group` is this project's extension (the event's group uid). */
const CLOUDEVENTS_HEADERS = {
  specversion: "ce-specversion",
  id: "ce-id",
  source: "ce-source",
  type: "ce-type",
  subject: "ce-subject",
  time: "ce-time",
  group: "ce-group",
  /** datacontenttype travels as the request's own Content-Type. */
  datacontenttype: "content-type",
} as const;

/** Every event's data is a JSON object. */
const EVENT_DATA_CONTENT_TYPE = "application/json";

/** A CloudEvent as one HTTP request: its headers and its body. */
export interface CloudEventRequest {
  headers: Record<string, string>;
  body: string;
}

/**
 * A header value as the binding requires: space, '"', '%' and anything
 * outside printable ASCII percent-encoded as UTF-8 (§3.1.3.2), everything
 * else as is. Our attributes are URLs, UUIDs and type names, so this changes
 * nothing in practice; it keeps a source URL with a space from breaking the
 * request.
 */
export function encodeHeaderValue(value: string): string {
  return value.replace(/[^\x21\x23\x24\x26-\x7e]+/g, (run) =>
    [...Buffer.from(run, "utf8")].map((byte) => `%${byte.toString(16).toUpperCase().padStart(2, "0")}`).join(""),
  );
}

/** RFC 3339 in UTC with milliseconds, as CloudEvents' time attribute wants. */
export function rfc3339(ms: number): string {
  return new Date(ms).toISOString();
}

/** The binary-mode request of event, whose source is this deployment's base URL. */
export function cloudEventRequest(event: EventRecord, source: string): CloudEventRequest {
  const h = CLOUDEVENTS_HEADERS;
  return {
    headers: {
      [h.specversion]: CLOUDEVENTS_SPEC_VERSION,
      [h.id]: encodeHeaderValue(event.id),
      [h.source]: encodeHeaderValue(source),
      [h.type]: encodeHeaderValue(event.type),
      [h.subject]: encodeHeaderValue(event.subject),
      [h.time]: rfc3339(event.time),
      [h.group]: encodeHeaderValue(event.groupUid),
      [h.datacontenttype]: EVENT_DATA_CONTENT_TYPE,
    },
    body: event.data,
  };
}
