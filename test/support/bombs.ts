import { readFileSync } from "node:fs";
import http from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import zlib from "node:zlib";
import type { Interceptor, Transport } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";

/** The content codings every protocol of the server accepts. */
export type Coding = "gzip" | "br";

const MiB = 1024 * 1024;
const bombs = new Map<string, Promise<Buffer>>();

/**
 * `size` zero bytes compressed with `coding`: about size/1000 bytes of gzip
 * or a few KB of brotli on the wire that inflate to `size`. Built by
 * streaming, so the test process never holds the inflated bytes; cached.
 */
export function zeroBomb(coding: Coding, size: number): Promise<Buffer> {
  const key = `${coding}:${size}`;
  let bomb = bombs.get(key);
  if (!bomb) {
    bomb = compressZeros(coding, size);
    bombs.set(key, bomb);
  }
  return bomb;
}

async function compressZeros(coding: Coding, size: number): Promise<Buffer> {
  const zeros = Buffer.alloc(MiB);
  const source = Readable.from(
    (function* () {
      for (let left = size; left > 0; left -= MiB) yield left >= MiB ? zeros : zeros.subarray(0, left);
    })(),
  );
  const compressor =
    coding === "gzip" ? zlib.createGzip({ level: 9 }) : zlib.createBrotliCompress({ params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 5 } });
  const out: Buffer[] = [];
  compressor.on("data", (chunk: Buffer) => out.push(chunk));
  await pipeline(source, compressor);
  return Buffer.concat(out);
}

/**
 * A client Compression named `coding` that sends `payload` in place of every
 * message it compresses: a real connect-node client carrying a bomb it never
 * inflated. Responses are decompressed for real.
 */
export function bombCompression(coding: Coding, payload: Buffer): Compression {
  const real = coding === "gzip" ? compressionGzip : compressionBrotli;
  return {
    name: coding,
    compress: () => Promise.resolve(new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength) as Uint8Array<ArrayBuffer>),
    decompress: (bytes, readMaxBytes) => real.decompress(bytes, readMaxBytes),
  };
}

/** How a bomb travels: the connect-node transport that carries it. */
export type BombCarrier = "connect-json" | "connect-proto" | "connect-get" | "grpc-web" | "grpc";

/**
 * A connect-node transport of `carrier` to baseUrl that compresses every
 * message with `compression` (none when undefined) and sends `token` as a
 * bearer token (none when undefined); close() frees its connections.
 */
export function carrierTransport(
  carrier: BombCarrier,
  baseUrl: string,
  opts: { compression?: Compression; token?: string } = {},
): { transport: Transport; close(): void } {
  const interceptors: Interceptor[] = opts.token
    ? [(next) => (req) => (req.header.set("authorization", `Bearer ${opts.token}`), next(req))]
    : [];
  const common = { baseUrl, sendCompression: opts.compression, compressMinBytes: 0, interceptors };
  if (carrier === "grpc") {
    const sessionManager = new Http2SessionManager(baseUrl);
    return { transport: createGrpcTransport({ ...common, sessionManager }), close: () => sessionManager.abort() };
  }
  const agent = new http.Agent({ keepAlive: true });
  const nodeOptions = { agent };
  const transport =
    carrier === "grpc-web"
      ? createGrpcWebTransport({ ...common, httpVersion: "1.1", nodeOptions })
      : createConnectTransport({
          ...common,
          httpVersion: "1.1",
          nodeOptions,
          useBinaryFormat: carrier === "connect-proto",
          useHttpGet: carrier === "connect-get",
        });
  return { transport, close: () => agent.destroy() };
}

/** Resident and peak resident memory of a process, in MiB (Linux /proc). */
export interface MemorySample {
  rssMiB: number;
  peakMiB: number;
}

/** Reads VmRSS and VmHWM of pid from /proc/<pid>/status. */
export function memoryOf(pid: number): MemorySample {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status);
    if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
    return Number(m[1]) / 1024;
  };
  return { rssMiB: Math.round(kib("VmRSS")), peakMiB: Math.round(kib("VmHWM")) };
}
