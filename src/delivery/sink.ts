import { performance } from "node:perf_hooks";
import { ExchangeFailedError, requestGuarded, type ExchangeLabel } from "../auth/guarded-fetch.js";
import { outboundAddressAllowed, outboundUrlProblem, type OutboundPolicy } from "../domain/outbound-address.js";

/**
 * Posting one delivery to a subscriber's sink, with the guards of issuer
 * fetches (a sink URL is user input that makes this server connect
 * somewhere): https only, no loopback, private or link-local address
 * (src/domain/outbound-address.ts: checked when the URL is accepted and on
 * every address before connecting to it), one timeout for the whole
 * exchange, no redirect followed, at most a few KiB of the answer read and
 * then dropped.
 */

/** How sinks are restricted: the issuers' loopback setting (PLATFORM_ALLOW_LOOPBACK_ISSUERS) applies to them too. */
export type SinkPolicy = OutboundPolicy;

/** The longest one delivery attempt may take, connect to last byte read. */
export const SINK_TIMEOUT_MS = 10_000;
/** Bytes of a sink's answer read at most (and then discarded). */
export const SINK_RESPONSE_MAX_BYTES = 4 * 1024;
/** A sink URL is at most this long. */
const MAX_SINK_URL_LENGTH = 2048;
/** Delivery-log error texts are cut to this length. */
const MAX_ERROR_LENGTH = 200;

/**
 * What a delivery attempt means for the event:
 * - "delivered": the sink answered 2xx;
 * - "retry": it may succeed later: a 5xx, 408 or 429, no answer within the
 *   timeout, a connection refused or reset, a name that did not resolve;
 * - "failed": the same request will not succeed: any other answer (a 3xx,
 *   since redirects are not followed, or a 4xx), or a sink URL or address
 *   our policy refuses.
 */
export type DeliveryOutcome = "delivered" | "retry" | "failed";

/** One attempt, as the delivery log records it. */
export interface DeliveryAttempt {
  outcome: DeliveryOutcome;
  /** The sink's HTTP status, 0 when it gave none. */
  status: number;
  /** Milliseconds from sending to the answer read (or the failure). */
  latencyMs: number;
  /** Why it was not delivered, "" when it was: never the URL, a header or the body (they may hold secrets). */
  error: string;
}

/** A delivery's request: headers and the exact body. */
export interface SinkRequest {
  headers: Record<string, string>;
  body: string | Buffer;
}

/** The outcome of an HTTP answer with status. */
export function outcomeOfStatus(status: number): DeliveryOutcome {
  if (status >= 200 && status < 300) return "delivered";
  if (status >= 500 || status === 408 || status === 429) return "retry";
  return "failed";
}

/**
 * What is wrong with a sink URL, or undefined when it is acceptable: an
 * absolute https URL without userinfo or fragment, not an internal address
 * literal or localhost name (outboundUrlProblem); with allowLoopback, http
 * and https on a loopback host too. Names are checked again on the
 * addresses they resolve to, before connecting.
 */
export function sinkUrlProblem(sink: string, policy: SinkPolicy): string | undefined {
  let url: URL;
  try {
    url = new URL(sink);
  } catch {
    return "must be an absolute URL";
  }
  if (sink.length > MAX_SINK_URL_LENGTH) return `must be at most ${MAX_SINK_URL_LENGTH} characters`;
  if (url.protocol !== "https:" && url.protocol !== "http:") return "must be an https URL";
  if (url.username !== "" || url.password !== "") return "must not carry a user name or password";
  if (url.hash !== "" || sink.includes("#")) return "must not have a fragment";
  return outboundUrlProblem(url, policy);
}

/** Posts request to sink once and says what came of it; never throws for anything the sink or the network does. */
export async function postToSink(
  sink: string,
  request: SinkRequest,
  opts: { policy: SinkPolicy; timeoutMs?: number; maxResponseBytes?: number; label?: ExchangeLabel },
): Promise<DeliveryAttempt> {
  const started = performance.now();
  const attempt = (outcome: DeliveryOutcome, status: number, error: string): DeliveryAttempt => ({
    outcome,
    status,
    latencyMs: Math.round(performance.now() - started),
    error: error.slice(0, MAX_ERROR_LENGTH),
  });
  const problem = sinkUrlProblem(sink, opts.policy);
  if (problem !== undefined) return attempt("failed", 0, `sink URL refused: ${problem}`);
  const body = typeof request.body === "string" ? Buffer.from(request.body, "utf8") : request.body;
  try {
    const res = await requestGuarded(
      sink,
      { method: "POST", headers: request.headers, body, label: opts.label },
      {
        timeoutMs: opts.timeoutMs ?? SINK_TIMEOUT_MS,
        maxBytes: opts.maxResponseBytes ?? SINK_RESPONSE_MAX_BYTES,
        addressAllowed: (address) => outboundAddressAllowed(address, opts.policy),
      },
    );
    const outcome = outcomeOfStatus(res.status);
    if (outcome === "delivered") return attempt(outcome, res.status, "");
    const redirect = res.status >= 300 && res.status < 400 ? ": redirects are not followed" : "";
    return attempt(outcome, res.status, `HTTP ${res.status}${redirect}`);
  } catch (err) {
    if (!(err instanceof ExchangeFailedError)) throw err;
    if (err.kind === "policy") return attempt("failed", 0, `sink address refused: ${err.message}`);
    return attempt("retry", 0, err.message);
  }
}
