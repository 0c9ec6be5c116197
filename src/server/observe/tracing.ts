import type { Store } from "../../store/store.js";
import type { WrappedService } from "../wrap.js";

/**
 * OpenTelemetry tracing, on when the standard variables name an OTLP
 * endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
 * When they do not, this module is all that is loaded: no OpenTelemetry SDK,
 * no context manager, and every call is served exactly as without tracing
 * (the services and the store are not wrapped at all).
 */

/** A running tracer: what the server composes with it. */
export interface Tracing {
  /** Logs, once listening, where spans go and any OTEL_* setting the exporter cannot honour. */
  logStart(log: TracingLog): void;
  /** The service with every method in a server span whose parent is the caller's traceparent. */
  traceService(service: WrappedService): WrappedService;
  /** The store with a client span per call made inside a span (an RPC's, a delivery's). */
  traceStore(store: Store): Store;
  /**
   * Runs fn outside every span: what it starts for later (a delivery loop
   * woken by a commit) begins traces of its own instead of joining the
   * call that happened to wake it.
   */
  detached<T>(fn: () => T): T;
  /** The ids of the span active here (a call's, a delivery's), for the log lines written inside it; undefined outside every span. */
  logIds(): TraceLogIds | undefined;
  /**
   * Exports the spans still held, then stops tracing; resolves false when
   * boundMs passed first (the spans not yet exported are dropped).
   */
  shutdown(boundMs: number): Promise<boolean>;
}

/**
 * The fields that tie a log line to its span, named as OpenTelemetry's log
 * correlation names them (and its pino instrumentation writes them): hex ids,
 * and the W3C trace flags ("01": sampled).
 */
export interface TraceLogIds {
  trace_id: string;
  span_id: string;
  trace_flags: string;
}

/** How long a graceful stop waits for the last spans to be exported. */
export const SPAN_FLUSH_MS = 5_000;

/** Where tracing logs (the server's logger). */
export interface TracingLog {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

/** What starting the tracer needs. */
export interface TracingOptions {
  /** service.version of the spans' resource. */
  version: string;
  /**
   * Reports a failed export, at most once a minute. Called only once spans
   * exist, so only while serving.
   */
  warn(fields: Record<string, unknown>, message: string): void;
}
