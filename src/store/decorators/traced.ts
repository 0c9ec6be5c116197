import { Code } from "@connectrpc/connect";
import { SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type Tracer } from "@opentelemetry/api";
import { ApiError } from "../../domain/errors.js";
import { STORE_PARTS } from "../parts.js";
import type { Store } from "../store.js";
import { decorateStore } from "./decorate.js";

/** What the traced store needs of tracing: its tracer and the context each call runs in. */
export interface StoreTracing {
  tracer: Tracer;
  /** The caller's context (the RPC span it runs in, if any). */
  active(): Context;
  /** Runs fn with ctx active, so calls made within are children of its span. */
  with<T>(ctx: Context, fn: () => T): T;
}

/**
 * Codes that say the server failed rather than answered (the gRPC semantic
 * conventions' server errors): a span with one is an error span. NOT_FOUND,
 * ALREADY_EXISTS and the like are answers.
 */
const FAULTS: ReadonlySet<Code> = new Set([
  Code.Unknown,
  Code.DeadlineExceeded,
  Code.Unimplemented,
  Code.Internal,
  Code.Unavailable,
  Code.DataLoss,
]);

/** Whether a code says the server failed (an error span), not that it answered (NOT_FOUND, PERMISSION_DENIED, ...). */
export function isFaultCode(code: Code): boolean {
  return FAULTS.has(code);
}

/** Whether an error a store call threw is a fault: anything but an ApiError answer such as NOT_FOUND. */
function isFault(err: unknown): boolean {
  return !(err instanceof ApiError) || isFaultCode(err.code);
}

/**
 * The store traced: each part method called inside a span (an RPC's, a
 * delivery's) becomes a client span under it, named "<method> <part>", with
 * db.system.name, db.operation.name and db.collection.name. Calls outside any
 * span (the delivery loop's polling, retention) make none, so an idle server
 * exports nothing. A transaction is a span of its own whose callback runs in
 * the caller's context, wherever the engine runs it (SQLite's group commit
 * runs every writer's callback in the first writer's turn).
 */
export function createTracedStore(store: Store, tracing: StoreTracing): Store {
  const system = store.describe().backend;
  /** Runs call in a client span under the caller's, or plainly when the caller has none. */
  const traced = <T>(name: string, attributes: Attributes, call: (ctx: Context) => Promise<T>): Promise<T> => {
    const parent = tracing.active();
    if (trace.getSpan(parent) === undefined) return call(parent);
    const span = tracing.tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent);
    const ctx = trace.setSpan(parent, span);
    return tracing
      .with(ctx, () => call(ctx))
      .then(
        (value) => {
          span.end();
          return value;
        },
        (err: unknown) => {
          endFailed(span, err);
          throw err;
        },
      );
  };
  const decorated = decorateStore(store, (part, method, original) => {
    const name = `${method} ${part}`;
    const attributes = { "db.system.name": system, "db.operation.name": method, "db.collection.name": STORE_PARTS[part].table ?? part };
    // Every part method is asynchronous (Async<...> of its synchronous interface).
    return (...args) => traced(name, attributes, () => original(...args) as Promise<unknown>);
  });
  const txAttributes = { "db.system.name": system, "db.operation.name": "transaction" };
  const inserting = decorated.insertWithEvents;
  return {
    ...decorated,
    transaction: (fn, signal) =>
      traced("transaction", txAttributes, (ctx) => decorated.transaction((tx) => tracing.with(ctx, () => fn(tx)), signal)),
    ...(inserting && {
      insertWithEvents: (write, events, signal) =>
        traced("insertWithEvents", { ...txAttributes, "db.operation.name": "insertWithEvents" }, (ctx) =>
          inserting((parts) => tracing.with(ctx, () => write(parts)), events, signal),
        ),
    }),
  };
}

/** Ends a span whose call threw: an error span for a fault, the error's kind recorded either way. */
function endFailed(span: Span, err: unknown): void {
  const type = err instanceof ApiError ? err.reason : err instanceof Error ? err.name : "Error";
  span.setAttribute("error.type", type);
  if (isFault(err)) span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
  span.end();
}
