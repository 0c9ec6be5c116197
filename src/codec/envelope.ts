/**
 * The envelope that gRPC, gRPC-Web and Connect's streaming protocol all put
 * around a message: one flags byte, a big-endian uint32 length, the payload.
 * Both the native gRPC side (src/server/grpc/) and the Connect side
 * (src/server/connect/) read bodies through this one tracker.
 */

/** The bytes before each message's payload: its flags and its length. */
export const ENVELOPE_PREFIX_BYTES = 5;

/**
 * Follows length-prefixed messages (gRPC, gRPC-Web, Connect streaming: one
 * flags byte, a big-endian uint32 length, the payload) across the chunks of
 * a body: reports each declared length, and counts the bytes that have
 * arrived of the message not yet complete.
 */
export class EnvelopeTracker {
  /** Bytes received of the current, unfinished message (its prefix included); 0 between messages. */
  unfinished = 0;
  private readonly prefix = Buffer.alloc(ENVELOPE_PREFIX_BYTES);
  private prefixBytes = 0;
  private payloadLeft = 0;

  /** onLength sees each declared length as soon as its prefix is complete; it may throw to refuse it. */
  constructor(private readonly onLength: (length: number) => void = () => {}) {}

  feed(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.byteLength) {
      if (this.payloadLeft > 0) {
        const take = Math.min(this.payloadLeft, chunk.byteLength - at);
        this.payloadLeft -= take;
        at += take;
        this.unfinished = this.payloadLeft === 0 ? 0 : this.unfinished + take;
        continue;
      }
      this.prefix[this.prefixBytes++] = chunk[at++]!;
      this.unfinished++;
      if (this.prefixBytes < this.prefix.length) continue;
      this.prefixBytes = 0;
      this.payloadLeft = this.prefix.readUInt32BE(1);
      if (this.payloadLeft === 0) this.unfinished = 0;
      this.onLength(this.payloadLeft);
    }
  }
}
