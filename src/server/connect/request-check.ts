import { fromBinary, type DescMessage, type JsonObject, type MessageShape, type Registry } from "@bufbuild/protobuf";
import type { Compression } from "@connectrpc/connect/protocol";
import { messageFromJson } from "../../codec/request-json.js";
import { invalidField } from "../../domain/errors.js";
import { toConnectError, undecodableRequest } from "../errors.js";

/**
 * Unary request messages on the Connect router are decoded here once before
 * connect-node decodes them, so that a client's malformed message is answered
 * as REST and native gRPC answer it: INVALID_ARGUMENT with an ErrorInfo and a
 * BadRequest violation naming the field, in the caller's protocol. Left to
 * itself, connect-node says INTERNAL ("parse binary: …", an HTTP 500) for a
 * malformed protobuf, drops unknown JSON keys silently and gives its JSON
 * errors no details. A message that passes here is handed on unchanged.
 */

/** How the messages of one request are encoded. */
export interface RequestEncoding {
  json: boolean;
  /** The compression its compressed messages use, if the request names one (the caller refused unknown ones). */
  compression?: Compression;
}

/** Checks one message of `schema`; throws the ConnectError the client gets. */
export type MessageCheck = (bytes: Uint8Array, compressed: boolean) => Promise<void>;

export function requestMessageCheck(
  schema: DescMessage,
  encoding: RequestEncoding,
  opts: { registry: Registry; domain: string; limit: number },
): MessageCheck {
  return async (bytes, compressed) => {
    try {
      // The bounded decompressor throws MESSAGE_TOO_LARGE or INVALID_ARGUMENT itself.
      const message = compressed && encoding.compression ? await encoding.compression.decompress(bytes, opts.limit) : bytes;
      decodeRequest(schema, message, encoding.json, opts.registry);
    } catch (err) {
      throw toConnectError(err, opts.domain);
    }
  };
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A request message from its bytes in the protocol's JSON or protobuf form; throws INVALID_ARGUMENT naming the field. */
export function decodeRequest<Desc extends DescMessage>(
  schema: Desc,
  bytes: Uint8Array,
  json: boolean,
  registry: Registry,
): MessageShape<Desc> {
  if (!json) {
    try {
      return fromBinary(schema, bytes);
    } catch {
      throw undecodableRequest(schema);
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(utf8.decode(bytes));
  } catch {
    throw invalidField("request", "is not valid JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw invalidField("request", "must be a JSON object");
  return messageFromJson(schema, value as JsonObject, { wholeField: "request", registry });
}

/** A frame's flag for a compressed payload, and for an end-of-stream frame (which requests do not carry). */
const COMPRESSED_FLAG = 0b01;
const END_STREAM_FLAG = 0b10000000;

/**
 * The body of a unary call, read whole (connect-node reads it whole too, and
 * the message limit bounds it), each message in it checked, then handed on
 * as one chunk. Enveloped bodies (gRPC-Web, Connect streaming) are frames: a
 * flags byte, a big-endian length, the payload; connect-node judges a frame
 * cut short itself.
 */
export async function* checkedUnaryBody(
  body: AsyncIterable<Uint8Array>,
  enveloped: boolean,
  check: MessageCheck,
): AsyncGenerator<Uint8Array> {
  const whole = await readAll(body);
  if (!enveloped) await check(whole, true);
  else {
    for (let at = 0; at + 5 <= whole.byteLength; ) {
      const flags = whole[at]!;
      const length = whole.readUInt32BE(at + 1);
      if (at + 5 + length > whole.byteLength) break;
      if ((flags & END_STREAM_FLAG) === 0) await check(whole.subarray(at + 5, at + 5 + length), (flags & COMPRESSED_FLAG) !== 0);
      at += 5 + length;
    }
  }
  yield whole;
}

/** Every byte of body, as one buffer. */
async function readAll(body: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** The message of a Connect GET (its `message` query parameter), checked like a body. */
export async function checkGetMessage(query: URLSearchParams, check: MessageCheck): Promise<void> {
  const raw = query.get("message");
  if (raw === null) return;
  const bytes = query.get("base64") === "1" ? Buffer.from(raw, "base64url") : Buffer.from(raw, "utf8");
  await check(bytes, true);
}
