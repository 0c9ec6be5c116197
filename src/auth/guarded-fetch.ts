import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from "node:dns";
import http, { type IncomingHttpHeaders } from "node:http";
import https from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { canonicalAddress } from "../domain/outbound-address.js";

/** Limits of one guarded exchange (an issuer's document, a delivery to a sink). */
export interface FetchLimits {
  /** The whole exchange, connect to last byte. */
  timeoutMs: number;
  /** Bytes of a 2xx body read at most; the rest is never read (an issuer's document that long is refused). */
  maxBytes: number;
  /**
   * Whether a connection to this address is allowed (outboundAddressAllowed
   * for a tenant's URL): asked before any socket connects, of an address
   * literal before the request is made and of a name's addresses in the lookup.
   */
  addressAllowed(address: string): boolean;
  /** Resolves a name to all its addresses (default: the system resolver, dns.lookup); tests inject one. */
  resolve?: Resolver;
}

/** A resolver of every address of a name, as dns.lookup with all: true. */
export type Resolver = (
  hostname: string,
  options: LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

const systemResolver: Resolver = (hostname, options, callback) => dnsLookup(hostname, options, callback);

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

/**
 * Why a guarded exchange got no answer. The message never names the URL (a
 * sink's may carry a secret in its query). "policy": the address is not one
 * we connect to; "transient": no answer in time, or the connection failed
 * in a way that may pass; "other": anything else (a name that does not exist,
 * a TLS failure).
 */
export class ExchangeFailedError extends Error {
  constructor(
    message: string,
    readonly kind: "policy" | "transient" | "other",
  ) {
    super(message);
    this.name = "ExchangeFailedError";
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

/** The lookup's refusal code: every address the name resolves to is disallowed. */
const NO_ALLOWED_ADDRESS = "EACCES";

/**
 * The one answer to an address the policy refuses, wherever it is caught
 * (literal, lookup, or the defence-in-depth checks after): before any
 * connection, so whether anything listens there never shows.
 */
const addressRefused = () => new ExchangeFailedError("address not allowed", "policy");

/**
 * A lookup that resolves as usual, then keeps only the addresses allowed:
 * the socket connects only to what the lookup returns, so a name that
 * resolves to an internal address (or changes its answer between two
 * lookups) gets no connection there.
 */
function filteredLookup(allowed: (address: string) => boolean, resolve: Resolver): LookupFunction {
  return ((
    hostname: string,
    options: object,
    callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ) => {
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const kept = addresses.filter((a) => allowed(a.address));
      if (kept.length === 0)
        return callback(Object.assign(new Error(`${hostname} resolves to no allowed address`), { code: NO_ALLOWED_ADDRESS }), []);
      if ((options as { all?: boolean }).all) return callback(null, kept);
      callback(null, kept[0]!.address, kept[0]!.family);
    });
  }) as LookupFunction;
}

/**
 * Whether a URL's host may be connected to, asked before any socket exists.
 * net connects to an address literal directly, never through the lookup, so
 * a literal is asked about here (in its canonical spelling); a name passes
 * here and each of its addresses is asked about in the lookup. A host net
 * would take for an address but that we cannot read is refused.
 */
function hostAllowed(target: URL, allowed: (address: string) => boolean): boolean {
  const host = target.hostname.startsWith("[") ? target.hostname.slice(1, -1) : target.hostname;
  const address = canonicalAddress(host);
  if (address !== undefined) return allowed(address);
  return isIP(host) === 0;
}

/** One guarded HTTP request. */
export interface GuardedRequest {
  method: "GET" | "POST";
  headers: Record<string, string>;
  body?: Buffer;
  /** What the exchange's span is called and says when tracing is on (default: the method, no more). */
  label?: ExchangeLabel;
}

/** A traced exchange's span name and attributes (never the URL's path or query: a sink's may hold a secret). */
export interface ExchangeLabel {
  name: string;
  attributes: Readonly<Record<string, string | number>>;
}

/** One traced exchange: the headers that carry its span to the peer (traceparent), and its end. */
export interface ExchangeSpan {
  readonly headers: Readonly<Record<string, string>>;
  /** The answer's status, or why there was none. */
  end(outcome: { status: number } | { failure: ExchangeFailedError }): void;
}

/** Starts the span of one outbound exchange (see traceExchanges). */
export type ExchangeTracer = (method: string, target: URL, label: ExchangeLabel | undefined) => ExchangeSpan;

let exchangeTracer: ExchangeTracer | undefined;

/**
 * Installs the process's exchange tracer, or removes it (undefined, the
 * default): tracing sets it while a traced server runs, so every guarded
 * exchange (issuer documents, deliveries) gets a client span and carries its
 * traceparent. One per process, like OpenTelemetry's own global provider;
 * without one an exchange costs one check more.
 */
export function traceExchanges(tracer: ExchangeTracer | undefined): void {
  exchangeTracer = tracer;
}

/** The answer to a guarded request: its status and at most maxBytes of its body. */
export interface GuardedResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body of a 2xx answer, up to maxBytes; empty for any other status (not read). */
  body: Buffer;
  /** True when a 2xx body was longer than maxBytes (declared or sent): the rest was not read. */
  truncated: boolean;
}

/**
 * Sends one request within limits and resolves with the answer, whatever its
 * status: one timeout for the whole exchange, no redirect followed (a 3xx is
 * an answer like any other), only allowed addresses connected to (address
 * literals are checked before the request is made, names' addresses by the
 * lookup, both before any byte is sent), a 2xx body read up to maxBytes, any
 * other body not read. The connection is never reused, and is closed once
 * the answer is settled. Rejects with ExchangeFailedError.
 */
export function requestGuarded(url: string, request: GuardedRequest, limits: FetchLimits): Promise<GuardedResponse> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    if (!hostAllowed(target, limits.addressAllowed)) return reject(addressRefused());
    let settled = false;
    const span = exchangeTracer?.(request.method, target, request.label);
    const settle = (outcome: GuardedResponse | ExchangeFailedError) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      span?.end(outcome instanceof ExchangeFailedError ? { failure: outcome } : outcome);
      if (outcome instanceof ExchangeFailedError) reject(outcome);
      else resolve(outcome);
      // Whatever is left unread stays unread.
      req.destroy();
    };
    const client = target.protocol === "https:" ? https : http;
    const traced = span === undefined ? request.headers : { ...request.headers, ...span.headers };
    const headers = request.body ? { ...traced, "content-length": String(request.body.length) } : traced;
    const req = client.request(target, {
      method: request.method,
      lookup: filteredLookup(limits.addressAllowed, limits.resolve ?? systemResolver),
      headers,
      agent: false,
      timeout: limits.timeoutMs,
    });
    const noAnswer = () => new ExchangeFailedError(`no answer within ${limits.timeoutMs} ms`, "transient");
    const deadline = setTimeout(() => settle(noAnswer()), limits.timeoutMs);
    req.on("socket", (socket) => {
      // Defence in depth: every address was asked about before connecting. Were one ever missed, an open port
      // (here) and a closed one (the error's address, below) would still get the one policy answer.
      socket.once("connect", () => {
        const peer = socket.remoteAddress;
        if (peer !== undefined && !limits.addressAllowed(peer)) settle(addressRefused());
      });
    });
    req.on("timeout", () => settle(noAnswer()));
    req.on("error", (err: NodeJS.ErrnoException & { address?: string }) => {
      const code = err.code ?? "";
      if (code === NO_ALLOWED_ADDRESS || (err.address !== undefined && !limits.addressAllowed(err.address)))
        return settle(addressRefused());
      settle(new ExchangeFailedError(err.message, TRANSIENT_ERROR_CODES.has(code) ? "transient" : "other"));
    });
    req.on("response", (res) => {
      res.on("error", (err) => settle(new ExchangeFailedError(err.message, "transient")));
      const status = res.statusCode ?? 0;
      const answer = (body: Buffer, truncated: boolean) => settle({ status, headers: res.headers, body, truncated });
      if (status < 200 || status >= 300) return answer(Buffer.alloc(0), false);
      if (Number(res.headers["content-length"] ?? 0) > limits.maxBytes) return answer(Buffer.alloc(0), true);
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (chunk: Buffer) => {
        if (size + chunk.length > limits.maxBytes) {
          chunks.push(chunk.subarray(0, limits.maxBytes - size));
          return answer(Buffer.concat(chunks), true);
        }
        size += chunk.length;
        chunks.push(chunk);
      });
      res.on("end", () => answer(Buffer.concat(chunks), false));
    });
    req.end(request.body);
  });
}

/**
 * GETs url and parses its JSON body, within limits: one timeout for the
 * whole exchange, the body streamed and cut off past maxBytes, no redirect
 * followed (an issuer's documents are served where it says), and only
 * allowed addresses connected to (see requestGuarded).
 */
export async function fetchJsonGuarded(url: string, limits: FetchLimits): Promise<Record<string, unknown>> {
  let res: GuardedResponse;
  try {
    res = await requestGuarded(url, { method: "GET", headers: { accept: "application/json" } }, limits);
  } catch (err) {
    const failure = err as ExchangeFailedError;
    throw new FetchRefusedError(`${url}: ${failure.message}`, failure.kind === "transient");
  }
  if (res.status >= 300 || res.status < 200) {
    const redirect = res.headers.location ? " (redirects are not followed)" : "";
    throw new FetchRefusedError(`${url}: HTTP ${res.status}${redirect}`, transientStatus(res.status));
  }
  if (res.truncated) throw new FetchRefusedError(`${url}: body over ${limits.maxBytes} bytes`);
  let doc: unknown;
  try {
    doc = JSON.parse(res.body.toString("utf8"));
  } catch {
    throw new FetchRefusedError(`${url}: not JSON`);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw new FetchRefusedError(`${url}: not a JSON object`);
  return doc as Record<string, unknown>;
}
