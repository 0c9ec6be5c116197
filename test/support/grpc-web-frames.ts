import assert from "node:assert/strict";

/** One gRPC-Web frame: flags, big-endian length, payload. */
export function frame(flags: number, payload: Uint8Array): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt8(flags, 0);
  prefix.writeUInt32BE(payload.byteLength, 1);
  return Buffer.concat([prefix, payload]);
}

/** Splits a gRPC-Web body into its data messages and its trailers. */
export function parseFrames(body: Buffer): { messages: Buffer[]; trailers: Map<string, string> } {
  const messages: Buffer[] = [];
  const trailers = new Map<string, string>();
  let at = 0;
  while (at < body.byteLength) {
    const flags = body.readUInt8(at);
    const length = body.readUInt32BE(at + 1);
    const payload = body.subarray(at + 5, at + 5 + length);
    assert.equal(payload.byteLength, length, "a whole frame");
    at += 5 + length;
    if ((flags & 0x80) === 0) {
      messages.push(payload);
      continue;
    }
    for (const line of payload.toString("utf8").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon > 0) trailers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
  }
  return { messages, trailers };
}
