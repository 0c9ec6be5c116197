import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, type HandlerContext } from "@connectrpc/connect";
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type ContextManager,
  type Span,
  type TextMapGetter,
  type TextMapPropagator,
  type Tracer,
} from "@opentelemetry/api";
import { principalKey } from "../../auth/principal.js";
import { isFaultCode } from "../../store/decorators/traced.js";
import { httpStatusOf } from "../errors.js";
import {
  isStreamHandler,
  type AdmissionContext,
  type StreamHandler,
  type UnaryHandler,
  type WrappedMethod,
  type WrappedService,
} from "../wrap.js";

/** What the RPC spans are made with. */
export interface CallSpanTools {
  tracer: Tracer;
  manager: ContextManager;
  propagator: TextMapPropagator;
}

/**
 * The span of a call that admission started (REST and Connect admit a call
 * from its headers before reading its body); its handler carries it on.
 */
const callSpanKey = createContextKey<Span | undefined>(undefined, { description: "the call's server span" });

/** rpc.system.name by protocol; REST is HTTP, described by http.* attributes instead. */
const RPC_SYSTEMS: Record<string, string> = { grpc: "grpc", "grpc-web": "grpc", connect: "connectrpc" };

/** traceparent and tracestate, read from any protocol's request headers (gRPC metadata included). */
const HEADER_GETTER: TextMapGetter<Headers> = {
  get: (headers, key) => headers.get(key) ?? undefined,
  keys: () => ["traceparent", "tracestate"],
};

/**
 * The service with every method in a server span: its parent is the
 * caller's traceparent (and tracestate) on every protocol, its name the
 * fully-qualified method ("pkg.Service/Method"), its attributes the
 * semantic conventions' (rpc.system.name, rpc.method, rpc.status_code; for
 * REST http.request.method, url.path and http.response.status_code), the
 * protocol (platform.rpc.protocol) and the caller (user.id). The store
 * calls and outbound exchanges of the call are its children. A server fault
 * (UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE,
 * DATA_LOSS) sets the span's status to ERROR, as the gRPC conventions say;
 * other codes are the caller's answer and leave it unset.
 */
export function traceService(service: WrappedService, tools: CallSpanTools): WrappedService {
  const handlers: Record<string, WrappedMethod> = {};
  for (const method of service.service.methods)
    handlers[method.localName] = traceMethod(method, service.handlers[method.localName]!, tools);
  return { service: service.service, handlers };
}

function traceMethod(method: DescMethod, inner: WrappedMethod, { tracer, manager, propagator }: CallSpanTools): WrappedMethod {
  const name = `${method.parent.typeName}/${method.name}`;
  const start = (context: AdmissionContext): Span => {
    const parent = propagator.extract(ROOT_CONTEXT, context.requestHeader, HEADER_GETTER);
    const attributes: Attributes = { "rpc.method": name, "platform.rpc.protocol": context.protocolName };
    const system = RPC_SYSTEMS[context.protocolName];
    if (system !== undefined) attributes["rpc.system.name"] = system;
    return tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
  };
  /** The call's span (admission's, or a new one) with what only the handler's context tells. */
  const spanOf = (context: HandlerContext): Span => {
    const span = context.values.get(callSpanKey) ?? start(context);
    if (context.protocolName === "rest" && span.isRecording()) {
      const query = context.url.indexOf("?");
      span.setAttributes({
        "http.request.method": context.requestMethod,
        "url.path": query < 0 ? context.url : context.url.slice(0, query),
      });
    }
    return span;
  };
  const admission = {
    needsToken: inner.needsToken,
    async admit(context: AdmissionContext): Promise<void> {
      const span = start(context);
      context.values.set(callSpanKey, span);
      try {
        await manager.with(trace.setSpan(ROOT_CONTEXT, span), () => inner.admit(context));
      } catch (err) {
        context.values.set(callSpanKey, undefined);
        end(span, context, ConnectError.from(err));
        throw err;
      }
    },
  };
  if (isStreamHandler(inner)) {
    async function* streamHandler(request: unknown, context: HandlerContext): AsyncGenerator<unknown> {
      const span = spanOf(context);
      const ctx = trace.setSpan(ROOT_CONTEXT, span);
      const messages = manager.with(ctx, () => (inner as StreamHandler)(request, context)[Symbol.asyncIterator]());
      let outcome: ConnectError | "ok" | undefined;
      try {
        for (;;) {
          const next = await manager.with(ctx, () => messages.next());
          if (next.done) break;
          yield next.value;
        }
        // The implementation stopped because its client went away: nobody saw an OK (as wrap.ts records it).
        outcome = context.signal.aborted ? new ConnectError("client went away", Code.Canceled) : "ok";
      } catch (err) {
        outcome = ConnectError.from(err);
        throw err;
      } finally {
        if (outcome === undefined) {
          // The entry point stopped asking, its client gone: let the implementation finish inside the span.
          await manager.with(ctx, () => messages.return?.(undefined));
          const expired = (context.timeoutMs() ?? 1) <= 0;
          outcome = new ConnectError("client went away", expired ? Code.DeadlineExceeded : Code.Canceled);
        }
        end(span, context, outcome);
      }
    }
    return Object.assign(streamHandler, { kind: "server_streaming" as const }, admission);
  }
  const unary = inner as UnaryHandler;
  const handler = async (request: unknown, context: HandlerContext) => {
    const span = spanOf(context);
    let outcome: ConnectError | "ok" = "ok";
    try {
      return await manager.with(trace.setSpan(ROOT_CONTEXT, span), unary, undefined, request, context);
    } catch (err) {
      outcome = ConnectError.from(err);
      throw err;
    } finally {
      end(span, context, outcome);
    }
  };
  return Object.assign(handler, { kind: "unary" as const }, admission);
}

/** Ends a call's span with its code, its caller and, for a server fault, an error status. */
function end(span: Span, context: AdmissionContext, outcome: ConnectError | "ok"): void {
  if (span.isRecording()) {
    const code = outcome === "ok" ? 0 : outcome.code;
    const principal = context.values.get(principalKey);
    if (principal !== null) span.setAttribute("user.id", principal.subject);
    span.setAttribute("rpc.status_code", statusName(code));
    if (context.protocolName === "rest") span.setAttribute("http.response.status_code", code === 0 ? 200 : httpStatusOf(code));
    if (outcome !== "ok" && isFaultCode(outcome.code)) {
      span.setAttribute("error.type", statusName(code));
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.rawMessage });
    }
  }
  span.end();
}

/** The gRPC status name of a code, as rpc.status_code carries it: "OK", "NOT_FOUND", "CANCELLED", ... */
function statusName(code: Code | 0): string {
  if (code === 0) return "OK";
  return code === Code.Canceled ? "CANCELLED" : Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}
