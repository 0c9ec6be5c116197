import { invalidField } from "../../domain/errors.js";
import { toConnectError } from "../errors.js";

/**
 * gRPC-Web's text mode, the default of Google's grpc-web client: the same
 * frames as binary mode, base64-encoded both ways. connect-node speaks only
 * binary mode, so the Connect plugin decodes the request body and encodes the
 * response body around it with these.
 */

/** The binary-mode Content-Type a text-mode request is handed to connect-node with. */
export const GRPC_WEB_BINARY_TYPE = "application/grpc-web+proto";

/** The Content-Type of a text-mode response. */
export const GRPC_WEB_TEXT_TYPE = "application/grpc-web-text+proto";

/**
 * Decodes a base64 body as it streams in. Whitespace is ignored, and padding
 * may also end a group in the middle (a client may encode each frame on its
 * own); anything else outside the alphabet is INVALID_ARGUMENT in `domain`.
 */
export async function* decodeBase64Body(wire: AsyncIterable<Uint8Array>, domain: string): AsyncGenerator<Uint8Array> {
  let pending = "";
  for await (const chunk of wire) {
    pending += Buffer.from(chunk).toString("latin1").replace(/\s+/g, "");
    const whole = pending.length - (pending.length % 4);
    if (whole === 0) continue;
    yield decodeGroups(pending.slice(0, whole), domain);
    pending = pending.slice(whole);
  }
  if (pending !== "") throw badBase64(domain);
}

/** Base64 of 4-character groups; a padded group may sit anywhere. */
function decodeGroups(text: string, domain: string): Buffer {
  if (!/^[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) {
    // Padding inside: decode up to and after each padded group separately.
    const parts = text.split(/(?<==)(?=[^=])/);
    if (parts.length === 1) throw badBase64(domain);
    return Buffer.concat(parts.map((part) => decodeGroups(part, domain)));
  }
  return Buffer.from(text, "base64");
}

function badBase64(domain: string) {
  return toConnectError(invalidField("request", "is not valid base64 (gRPC-Web text mode)"), domain);
}

/**
 * Encodes a response body as base64 as it streams out. Bytes are held back
 * until they fill whole 3-byte groups, so only the last chunk may carry
 * padding: clients decode the body as one base64 text.
 */
export async function* encodeBase64Body(body: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let held: Buffer = Buffer.alloc(0);
  for await (const chunk of body) {
    const bytes = held.byteLength === 0 ? Buffer.from(chunk) : Buffer.concat([held, chunk]);
    const whole = bytes.byteLength - (bytes.byteLength % 3);
    held = bytes.subarray(whole);
    if (whole > 0) yield Buffer.from(bytes.subarray(0, whole).toString("base64"), "latin1");
  }
  if (held.byteLength > 0) yield Buffer.from(held.toString("base64"), "latin1");
}
