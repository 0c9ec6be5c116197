import {
  defaultTextMapSetter,
  isSpanContextValid,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { loggingErrorHandler, setGlobalErrorHandler, W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from "@opentelemetry/semantic-conventions";
import { traceExchanges, type ExchangeTracer } from "../../auth/guarded-fetch.js";
import { createTracedStore } from "../../store/decorators/traced.js";
import { traceService, type CallSpanTools } from "./tracing-calls.js";
import type { Tracing, TracingOptions } from "./tracing.js";

/**
 * The OpenTelemetry SDK, loaded by startTracing only when tracing is asked
 * for: a tracer provider exporting batches over OTLP/HTTP (protobuf, or JSON
 * with OTEL_EXPORTER_OTLP_PROTOCOL=http/json) with the SDK's own reading of
 * the OTEL_* variables, W3C trace context, and an
 * AsyncLocalStorage context manager of this tracer's own. Nothing is
 * registered globally except the exchange tracer (guarded-fetch.ts) and the
 * SDK's error handler, both undone by shutdown.
 */

/** Failed exports are logged at most this often: a collector that is down must not flood the log. */
const EXPORT_WARNING_SPACING_MS = 60_000;

/** Starts the tracer (see startTracing). */
export function createTracing(opts: TracingOptions): Tracing {
  let lastWarning = -Infinity;
  setGlobalErrorHandler((err) => {
    if (performance.now() - lastWarning < EXPORT_WARNING_SPACING_MS) return;
    lastWarning = performance.now();
    opts.warn({ err }, "tracing: span export failed; spans are dropped while the collector cannot be reached");
  });
  const manager = new AsyncLocalStorageContextManager().enable();
  const propagator = new W3CTraceContextPropagator();
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: "platform-api", [ATTR_SERVICE_VERSION]: opts.version }))
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over ours.
    .merge(detectResources({ detectors: [envDetector] }));
  const encoding = otlpEncoding();
  const exporter = encoding.body === "json" ? new JsonExporter() : new ProtobufExporter();
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter)] });
  const tools: CallSpanTools = { tracer: provider.getTracer("platform-api", opts.version), manager, propagator };
  traceExchanges(exchangeTracer(tools));
  const endpoint = tracesEndpoint();
  return {
    logStart(log) {
      const protocol = `http/${encoding.body}`;
      log.info({ tracesEndpoint: endpoint, protocol }, `tracing: spans exported over OTLP ${protocol} to ${endpoint}`);
      if (encoding.refused !== undefined)
        log.warn(
          { protocol: encoding.refused },
          `tracing: OTLP protocol ${encoding.refused} is not supported; spans are sent as ${protocol}`,
        );
    },
    traceService: (service) => traceService(service, tools),
    traceStore: (store) =>
      createTracedStore(store, { tracer: tools.tracer, active: () => manager.active(), with: (ctx, fn) => manager.with(ctx, fn) }),
    detached: (fn) => manager.with(ROOT_CONTEXT, fn),
    logIds() {
      const ids = trace.getSpan(manager.active())?.spanContext();
      if (ids === undefined || !isSpanContextValid(ids)) return undefined;
      return { trace_id: ids.traceId, span_id: ids.spanId, trace_flags: ids.traceFlags.toString(16).padStart(2, "0") };
    },
    async shutdown(boundMs) {
      traceExchanges(undefined);
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), boundMs)));
      const flushed = provider.shutdown().then(
        () => true,
        () => false,
      );
      const done = await Promise.race([flushed, bound]);
      clearTimeout(timer);
      manager.disable();
      setGlobalErrorHandler(loggingErrorHandler());
      return done;
    },
  };
}

/**
 * A client span per outbound exchange (issuer documents, deliveries), under
 * the span of the call that made it, or a trace of its own (the delivery
 * loop); the request carries its traceparent. Its attributes name the host,
 * never the URL's path or query (a sink's may hold a secret).
 */
function exchangeTracer({ tracer, manager, propagator }: CallSpanTools): ExchangeTracer {
  return (method, target, label) => {
    const parent = manager.active();
    const attributes: Attributes = {
      "http.request.method": method,
      "server.address": target.hostname.replace(/^\[(.*)\]$/, "$1"),
      "server.port": Number(target.port) || (target.protocol === "https:" ? 443 : 80),
      "url.scheme": target.protocol.slice(0, -1),
      ...label?.attributes,
    };
    const span = tracer.startSpan(label?.name ?? method, { kind: SpanKind.CLIENT, attributes }, parent);
    const headers: Record<string, string> = {};
    propagator.inject(trace.setSpan(parent, span), headers, defaultTextMapSetter);
    return {
      headers,
      end(outcome) {
        if ("status" in outcome) {
          span.setAttribute("http.response.status_code", outcome.status);
          if (outcome.status >= 400) {
            span.setAttribute("error.type", String(outcome.status));
            span.setStatus({ code: SpanStatusCode.ERROR });
          }
        } else {
          span.setAttribute("error.type", outcome.failure.kind);
          span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.failure.message });
        }
        span.end();
      },
    };
  };
}

/**
 * How spans are encoded: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
 * OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (the specification's
 * default). "grpc" is not served (refused: protobuf over HTTP instead).
 */
function otlpEncoding(): { body: "json" | "protobuf"; refused?: string } {
  const asked = (process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || process.env.OTEL_EXPORTER_OTLP_PROTOCOL || "http/protobuf").trim();
  if (asked === "http/json") return { body: "json" };
  return asked === "http/protobuf" ? { body: "protobuf" } : { body: "protobuf", refused: asked };
}

/** The URL spans are sent to, as the exporter derives it (without any credentials it may hold). */
function tracesEndpoint(): string {
  const specific = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const base = process.env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() ?? "";
  const raw = specific || `${base.replace(/\/+$/, "")}/v1/traces`;
  try {
    const url = new URL(raw);
    return `${url.origin}${url.pathname}`;
  } catch {
    return raw;
  }
}
