import type { Tracing, TracingOptions } from "./tracing.js";

/**
 * Whether to trace, decided at start: only when the standard variables ask
 * for it is the OpenTelemetry SDK (tracing-sdk.ts) loaded at all.
 */

/** Whether env asks for traces: an OTLP endpoint is named and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none says no. */
function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  if ((env.OTEL_TRACES_EXPORTER ?? "").split(",").some((name) => name.trim() === "none")) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
}

/**
 * Starts exporting spans over OTLP/HTTP when process.env asks for it (the
 * SDK reads the rest of its settings there too: headers, timeout, sampler,
 * service name, batch sizes); undefined, having loaded nothing, when not.
 */
export async function startTracing(opts: TracingOptions): Promise<Tracing | undefined> {
  if (!tracingRequested(process.env)) return undefined;
  const { createTracing } = await import("./tracing-sdk.js");
  return createTracing(opts);
}
