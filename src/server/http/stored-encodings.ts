import { createHash } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Registry } from "prom-client";
import { SeriesCounter } from "../observe/series-metrics.js";
import {
  addVary,
  COMPRESSIBLE,
  compressInPool,
  MIN_COMPRESS_BYTES,
  poolCompressions,
  responseCoding,
  sendAsNegotiated,
} from "./compression.js";

/**
 * Fixed bodies (the docs page's assets, the OpenAPI document) served in a
 * coding compressed once per asset and coding, at its first request, and kept:
 * a request costs a lookup, never a compression. Before this, every anonymous
 * GET of swagger-ui-bundle.js (1.7 MB) cost ~30–100 ms of brotli in the
 * thread pool that token signing and verification share.
 */

/** Done once, so worth more than the dynamic path's 4: 10% smaller, ~50 ms for the bundle. */
const STORED_BROTLI_QUALITY = 6;

type Coding = "br" | "gzip";

/** One fixed body and its codings, each a promise made once and shared by every request that wants it. */
interface StoredAsset {
  name: string;
  type: string;
  identity: Buffer;
  /** Whether a coding is worth it: a text-like type of at least MIN_COMPRESS_BYTES. */
  compressible: boolean;
  /** Strong validator of the identity bytes; a coded variant adds "-<coding>" (RFC 9110 §8.8.3.3). */
  tag: string;
  /** The coded body, or null when compressing failed (the asset then goes as it is). */
  coded: Map<Coding, Promise<Buffer | null>>;
}

/** The asset registry of one server, with the counter of compressions it has done. */
export class StoredEncodings {
  private readonly assets = new Map<string, StoredAsset>();
  /** asset, coding */
  private readonly compressions: SeriesCounter;

  constructor(registry: Registry) {
    this.compressions = new SeriesCounter(
      "platform_static_compressions_total",
      "Compressions of fixed bodies (docs assets, OpenAPI document), by asset and coding: one per pair for the process's life",
      ["asset", "coding"],
      registry,
    );
  }

  /** Stores a fixed body under name; its codings are made at first request. */
  add(name: string, type: string, body: Buffer | string): void {
    const identity = Buffer.isBuffer(body) ? body : Buffer.from(body);
    const tag = createHash("sha256").update(identity).digest("base64url").slice(0, 22);
    const compressible = COMPRESSIBLE.test(type) && identity.length >= MIN_COMPRESS_BYTES;
    this.assets.set(name, { name, type, identity, compressible, tag, coded: new Map() });
  }

  /**
   * Sends the asset in the coding the client prefers (or as it is), with its
   * ETag; 304 with no body when If-None-Match names that variant.
   */
  async send(req: FastifyRequest, reply: FastifyReply, name: string): Promise<FastifyReply> {
    const asset = this.assets.get(name);
    if (!asset) throw new Error(`no stored asset ${name}`);
    sendAsNegotiated(reply).type(asset.type);
    if (asset.compressible) addVary(reply);
    const coding = asset.compressible ? responseCoding(req.headers["accept-encoding"]) : null;
    const coded = coding === null ? null : await this.codedBody(asset, coding);
    const etag = coded === null ? `"${asset.tag}"` : `"${asset.tag}-${coding}"`;
    reply.header("etag", etag);
    if (matchesEtag(req.headers["if-none-match"], etag)) return reply.code(304).send();
    if (coded === null) return reply.send(asset.identity);
    return reply.header("content-encoding", coding).send(coded);
  }

  /** The asset in coding, compressed by the first request that asks and awaited by the others. */
  private codedBody(asset: StoredAsset, coding: Coding): Promise<Buffer | null> {
    let coded = asset.coded.get(coding);
    if (!coded) {
      this.compressions.inc(asset.name, coding);
      coded = poolCompressions
        .run(() => compressInPool(asset.identity, asset.identity.length, coding, STORED_BROTLI_QUALITY))
        .catch(() => null);
      asset.coded.set(coding, coded);
    }
    return coded;
  }
}

/** If-None-Match's weak comparison (RFC 9110 §13.1.2): any listed tag, W/ or not, or "*". */
function matchesEtag(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch.split(",").some((t) => {
    const tag = t.trim();
    return tag === "*" || tag.replace(/^W\//, "") === etag;
  });
}
