import type { FastifyBaseLogger } from "fastify";
import { wrapService, type CallObserver, type WrappedService } from "../server/wrap.js";
import { createServiceBindings } from "../services/index.js";
import type { Dependencies } from "./dependencies.js";
import type { CallsInFlight } from "./lifecycle.js";
import type { Observability } from "./observability.js";

/** What wrapping the services takes besides their dependencies. */
export interface CallOptions {
  observability: Observability;
  /** The calls a graceful stop waits for (ServerLifecycle.calls). */
  calls: CallsInFlight;
  /** The server's logger, which exists before the first call. */
  log: () => FastifyBaseLogger;
  /** Receives each internal error's cause with the request id of its call. */
  onInternalError: (err: unknown, reqId?: string) => void;
}

/**
 * Every service, bound to its implementation and wrapped once for every
 * protocol (authenticated, authorized, rate-limited): each call is counted in
 * flight for the drain, measured, logged in one line, and traced when tracing
 * is on.
 */
export function wrapServices(deps: Dependencies, opts: CallOptions): WrappedService[] {
  const { tracing, requests } = opts.observability;
  const { store, authz } = deps.services;
  const observer = callObserver(opts);
  return requests.announcingCalls(
    createServiceBindings(deps.services).map((b) => {
      const service = wrapService(b, {
        authenticator: deps.authenticator,
        authorizer: authz,
        refresh: () => store.refresh(),
        onInternalError: opts.onInternalError,
        observer,
        callLimiter: deps.callLimiter,
      });
      return tracing?.traceService(service) ?? service;
    }),
  );
}

/** What every call's start, admission and end tell: the calls in flight, the metrics, the request log and the rpc line. */
function callObserver({ observability, calls, log }: CallOptions): CallObserver {
  const { metrics, logging, requests } = observability;
  return {
    started(protocol) {
      calls.started();
      metrics.inFlight.add(1, protocol);
    },
    admitted(protocol) {
      calls.finished();
      metrics.inFlight.add(-1, protocol);
    },
    finished(call) {
      const rpc = `${call.service}/${call.method}`;
      calls.finished();
      requests.callFinished(call.requestId, rpc);
      metrics.inFlight.add(-1, call.protocol);
      metrics.requests.inc(call.service, call.method, call.protocol, call.code);
      metrics.latency.observe(call.durationMs / 1000, call.service, call.method, call.protocol);
      logging.rpc(log(), {
        reqId: call.requestId,
        principal: call.principal,
        remoteAddress: call.remoteAddress,
        rpc,
        protocol: call.protocol,
        code: call.code,
        durationMs: Math.round(call.durationMs * 100) / 100,
      });
    },
  };
}
