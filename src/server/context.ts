import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { createContextValues, type ContextValues, type HandlerContext } from "@connectrpc/connect";

/** A signal that never aborts: REST handlers run to completion against the store. */
const NEVER = new AbortController().signal;

/**
 * A HandlerContext for the REST and native gRPC entry points, without
 * connect's linked abort controllers and deadline timers (a measurable share of
 * a cheap request). Response headers are kept; trailers are not used by either.
 */
export function lightContext(init: {
  service: DescService;
  method: DescMethod;
  protocolName: string;
  requestMethod: string;
  url: string;
  requestHeader: Headers;
  values?: ContextValues;
  /** The call's signal, or a function making it when a handler first asks (most never do). */
  signal?: AbortSignal | (() => AbortSignal);
  timeoutMs?: number;
}): HandlerContext & { setResponseHeaders(): Headers | undefined } {
  const deadline = init.timeoutMs === undefined ? undefined : Date.now() + init.timeoutMs;
  let signal = init.signal;
  let responseHeader: Headers | undefined;
  let responseTrailer: Headers | undefined;
  return {
    service: init.service,
    method: init.method,
    protocolName: init.protocolName,
    requestMethod: init.requestMethod,
    url: init.url,
    requestHeader: init.requestHeader,
    get signal() {
      if (typeof signal === "function") signal = signal();
      return signal ?? NEVER;
    },
    values: init.values ?? createContextValues(),
    timeoutMs: () => (deadline === undefined ? undefined : deadline - Date.now()),
    get responseHeader() {
      return (responseHeader ??= new Headers());
    },
    get responseTrailer() {
      return (responseTrailer ??= new Headers());
    },
    /** The response headers, if a handler touched them at all. */
    setResponseHeaders: () => responseHeader,
  };
}
