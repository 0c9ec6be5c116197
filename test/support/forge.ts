import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { decodeJwt, decodeProtectedHeader, type JWK } from "jose";
import type { TestStorage } from "./server.js";

/** This server's newest signing key, read from its data directory (as the CLI does). */
export interface ServerKey {
  kid: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicJwk: JWK;
}

/**
 * Reads the newest signing key of the server whose data directory is dataDir.
 * Whoever can read the data directory holds the root of trust; tests use it
 * to sign tokens that are correct in every respect but one.
 */
export async function readServerKey(storage: TestStorage): Promise<ServerKey> {
  const store = await storage.openStore();
  try {
    const newest = (await store.keys.signingKeys()).at(-1)!;
    const privateKey = createPrivateKey({ key: JSON.parse(newest.privateJwk) as JWK & { kty: string }, format: "jwk" });
    return { kid: newest.kid, privateKey, publicKey: createPublicKey(privateKey), publicJwk: JSON.parse(newest.publicJwk) as JWK };
  } finally {
    await store.close();
  }
}

/** The decoded header and claims of a compact JWT (unverified). */
export function decode(token: string) {
  return { header: decodeProtectedHeader(token), claims: decodeJwt(token) };
}

/** A structural mutation of one segment of a compact JWS, applied to its decoded bytes. */
export interface Mutation {
  part: number;
  op: "flip" | "insert" | "delete" | "truncate" | "duplicate" | "dropSegment" | "addSegment" | "swapSegments";
  pos: number;
  byte: number;
}

/**
 * Applies m to token. Segments are decoded, changed as bytes and re-encoded
 * canonically, so the result always carries different bytes (never merely a
 * different spelling of the same signature).
 */
export function mutate(token: string, m: Mutation): string {
  const parts = token.split(".").map((p) => Buffer.from(p, "base64url"));
  const i = m.part % parts.length;
  const b = parts[i]!;
  const p = b.length === 0 ? 0 : m.pos % b.length;
  switch (m.op) {
    case "flip": {
      const c = Buffer.from(b);
      if (c.length === 0) c.writeUInt8(m.byte);
      else c[p] = c[p]! ^ m.byte;
      parts[i] = c.length === 0 ? Buffer.from([m.byte]) : c;
      break;
    }
    case "insert":
      parts[i] = Buffer.concat([b.subarray(0, p), Buffer.from([m.byte]), b.subarray(p)]);
      break;
    case "delete":
      parts[i] = Buffer.concat([b.subarray(0, p), b.subarray(p + 1)]);
      break;
    case "truncate":
      parts[i] = b.subarray(0, p);
      break;
    case "duplicate":
      parts[i] = Buffer.concat([b, b.subarray(p)]);
      break;
    case "dropSegment":
      parts.splice(i, 1);
      break;
    case "addSegment":
      parts.splice(i, 0, Buffer.from([m.byte]));
      break;
    case "swapSegments": {
      const j = (i + 1) % parts.length;
      [parts[i], parts[j]] = [parts[j]!, parts[i]!];
      break;
    }
  }
  return parts.map((x) => x.toString("base64url")).join(".");
}
