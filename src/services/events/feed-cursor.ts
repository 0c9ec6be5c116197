import { createCipheriv, createDecipheriv, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { invalidField } from "../../domain/errors.js";
import type { FeedPosition } from "../../domain/events.js";

/** Where the cursor key lives: one secret in the store, shared by every process. */
export interface CursorKeySource {
  secret(name: string, make: () => Buffer): Promise<Buffer>;
}

const BLOCK = 16;
const TAG = 8;
/** A cursor's length: base64url of one cipher block and its tag. */
const CURSOR_LENGTH = Math.ceil(((BLOCK + TAG) * 4) / 3);

/**
 * Feed positions as clients hold them (an event's `cursor`, ListEvents'
 * `next_page_token`, WatchEvents' `cursor`): the position's transaction id
 * and sequence, 8 bytes each, encrypted as one AES-256 block under a server
 * key, with a truncated HMAC over the block. A cursor tells a client nothing
 * (how many events or transactions the deployment has seen, other tenants'
 * included), and one made up or altered is INVALID_ARGUMENT. Unlike list
 * page tokens it carries no time: it lives as long as the event it points
 * at (PLATFORM_EVENT_RETENTION). Deterministic, so the same position always
 * reads the same (a client may compare cursors for equality).
 */
export class FeedCursors {
  private readonly cipherKey: Buffer;
  private readonly macKey: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error("the event cursor key must be 32 bytes");
    this.cipherKey = createHmac("sha256", key).update("event cursor: cipher").digest();
    this.macKey = createHmac("sha256", key).update("event cursor: mac").digest();
  }

  /** The cursors of the deployment whose keys these are (the key is made once, by whichever process starts first). */
  static async open(keys: CursorKeySource): Promise<FeedCursors> {
    return new FeedCursors(await keys.secret("event-cursor-key", () => randomBytes(32)));
  }

  encode(p: FeedPosition): string {
    const plain = Buffer.alloc(BLOCK);
    plain.writeBigUInt64BE(BigInt.asUintN(64, p.txid), 0);
    plain.writeBigUInt64BE(BigInt.asUintN(64, p.seq), 8);
    const cipher = createCipheriv("aes-256-ecb", this.cipherKey, null).setAutoPadding(false);
    const block = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([block, this.tag(block)]).toString("base64url");
  }

  /** The position a cursor names; INVALID_ARGUMENT naming field when this deployment did not issue it. */
  decode(field: string, cursor: string): FeedPosition {
    const refused = () => invalidField(field, "is not a cursor this server issued");
    if (cursor.length !== CURSOR_LENGTH) throw refused();
    const raw = Buffer.from(cursor, "base64url");
    if (raw.length !== BLOCK + TAG || raw.toString("base64url") !== cursor) throw refused();
    const block = raw.subarray(0, BLOCK);
    if (!timingSafeEqual(this.tag(block), raw.subarray(BLOCK))) throw refused();
    const decipher = createDecipheriv("aes-256-ecb", this.cipherKey, null).setAutoPadding(false);
    const plain = Buffer.concat([decipher.update(block), decipher.final()]);
    return { txid: plain.readBigUInt64BE(0), seq: plain.readBigUInt64BE(8) };
  }

  private tag(block: Buffer): Buffer {
    return createHmac("sha256", this.macKey).update(block).digest().subarray(0, TAG);
  }
}
