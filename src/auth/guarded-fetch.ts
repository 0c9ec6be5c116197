import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import http from "node:http";
import https from "node:https";
import type { LookupFunction } from "node:net";

/** Limits of one fetch from an issuer. */
export interface FetchLimits {
  /** The whole exchange, connect to last byte. */
  timeoutMs: number;
  /** Bytes of body read at most; a longer body is refused without being read on. */
  maxBytes: number;
  /** Whether a connection to this address is allowed; checked on the address actually connected to. */
  addressAllowed(address: string): boolean;
}

/**
 * Why a guarded fetch failed (the text is never shown to callers). A
 * transient failure (no answer in time, a connection refused or reset, a
 * 5xx) says nothing about the issuer's tokens: the server could not check
 * them. Any other failure (a policy refusal, a name that does not exist, a
 * redirect, a 404, a body too large or not JSON) is the issuer's answer.
 */
export class FetchRefusedError extends Error {
  constructor(
    message: string,
    readonly transient = false,
  ) {
    super(message);
    this.name = "FetchRefusedError";
  }
}

/** Socket and resolver errors that say the host could not be reached now, not that it is not an issuer. */
const TRANSIENT_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "EPIPE",
  "EAI_AGAIN",
]);

/** HTTP statuses that say the issuer is overloaded or down for now. */
const transientStatus = (status: number) => status >= 500 || status === 429 || status === 408;

/**
 * A lookup that resolves as usual, then keeps only the addresses allowed:
 * the check is on what the socket connects to, so a name that resolves to
 * an internal address (or changes its answer between two lookups) gets no
 * connection there.
 */
function filteredLookup(allowed: (address: string) => boolean): LookupFunction {
  return ((
    hostname: string,
    options: object,
    callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const kept = (addresses as LookupAddress[]).filter((a) => allowed(a.address));
      if (kept.length === 0)
        return callback(Object.assign(new Error(`${hostname} resolves to no allowed address`), { code: "EACCES" }), []);
      if ((options as { all?: boolean }).all) return callback(null, kept);
      callback(null, kept[0]!.address, kept[0]!.family);
    });
  }) as LookupFunction;
}

/**
 * GETs url and parses its JSON body, within limits: one timeout for the
 * whole exchange, the body streamed and cut off past maxBytes, no redirect
 * followed (an issuer's documents are served where it says), and only
 * allowed addresses connected to (address literals are checked here, names
 * by the lookup).
 */
export function fetchJsonGuarded(url: string, limits: FetchLimits): Promise<Record<string, unknown>> {
  const target = new URL(url);
  const literal = target.hostname.startsWith("[") ? target.hostname.slice(1, -1) : target.hostname;
  return new Promise((resolve, reject) => {
    const fail = (why: string, transient = false) => reject(new FetchRefusedError(`${url}: ${why}`, transient));
    if (/^[\d.]+$|:/.test(literal) && !limits.addressAllowed(literal)) return fail("address not allowed");
    const client = target.protocol === "https:" ? https : http;
    const req = client.get(target, {
      lookup: filteredLookup(limits.addressAllowed),
      headers: { accept: "application/json" },
      agent: false,
      timeout: limits.timeoutMs,
    });
    const deadline = setTimeout(
      () => req.destroy(new FetchRefusedError(`${url}: no answer within ${limits.timeoutMs} ms`, true)),
      limits.timeoutMs,
    );
    req.on("socket", (socket) => {
      // A literal address skips the lookup: check where the socket really went.
      socket.once("connect", () => {
        const peer = socket.remoteAddress;
        if (peer !== undefined && !limits.addressAllowed(peer))
          req.destroy(new FetchRefusedError(`${url}: connected to a disallowed address`));
      });
    });
    req.on("timeout", () => req.destroy(new FetchRefusedError(`${url}: timed out`, true)));
    req.on("error", (err: NodeJS.ErrnoException) => {
      clearTimeout(deadline);
      reject(
        err instanceof FetchRefusedError ? err : new FetchRefusedError(`${url}: ${err.message}`, TRANSIENT_ERROR_CODES.has(err.code ?? "")),
      );
    });
    req.on("response", (res) => {
      if ((res.statusCode ?? 0) >= 300) {
        res.resume();
        clearTimeout(deadline);
        const status = res.statusCode ?? 0;
        return fail(`HTTP ${status}${res.headers.location ? " (redirects are not followed)" : ""}`, transientStatus(status));
      }
      const declared = Number(res.headers["content-length"] ?? 0);
      if (declared > limits.maxBytes) {
        req.destroy();
        clearTimeout(deadline);
        return fail(`body of ${declared} bytes is over ${limits.maxBytes}`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size > limits.maxBytes) {
          req.destroy(new FetchRefusedError(`${url}: body over ${limits.maxBytes} bytes`));
          return;
        }
        chunks.push(chunk);
      });
      res.on("end", () => {
        clearTimeout(deadline);
        try {
          const doc: unknown = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          if (typeof doc !== "object" || doc === null || Array.isArray(doc)) return fail("not a JSON object");
          resolve(doc as Record<string, unknown>);
        } catch {
          fail("not JSON");
        }
      });
      res.on("error", (err) => {
        clearTimeout(deadline);
        reject(new FetchRefusedError(`${url}: ${err.message}`, true));
      });
    });
  });
}
