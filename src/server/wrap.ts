import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, type ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { Authorizer } from "../auth/authorizer.js";
import { clientAddressKey, principalKey, requestIdKey, type Authenticator, type Principal } from "../auth/principal.js";
import type { CallRateLimiter } from "../auth/rate-limit.js";
import { methodRule, type MethodRule } from "../auth/rules.js";
import { ApiError } from "../domain/errors.js";
import { requireUidp } from "../domain/hierarchy.js";
import { rejectControlCharacters } from "../domain/text-rules.js";
import type { ServiceBinding } from "../services/binding.js";
import { areaErrorDomain, toConnectError } from "./errors.js";

/** A unary handler as every entry point calls it. */
export type UnaryHandler = (request: unknown, context: HandlerContext) => Promise<unknown>;

/**
 * A server-streaming handler as every entry point calls it: the messages, in
 * order, produced only as the entry point asks for them (so a client that
 * reads slowly holds at most what the handler has ready, never more).
 */
export type StreamHandler = (request: unknown, context: HandlerContext) => AsyncIterable<unknown>;

/** What admission sees of a call: its headers, deadline, protocol and context values. */
export type AdmissionContext = Pick<HandlerContext, "requestHeader" | "values" | "protocolName" | "timeoutMs">;

/** A wrapped unary method: the handler, and its admission. */
export interface WrappedHandler extends UnaryHandler, Admission {
  /** Set by wrapService; a handler made elsewhere (tests) is unary without it. */
  readonly kind?: "unary";
}

/**
 * A wrapped server-streaming method: the same checks as a unary one, done
 * before the first message is asked for; the call is finished (observer,
 * access log) when its last message was taken, its error thrown, or the
 * entry point stopped asking (a client gone: "canceled").
 */
export interface WrappedStreamHandler extends StreamHandler, Admission {
  readonly kind: "server_streaming";
}

/** Any wrapped method, told apart by kind. */
export type WrappedMethod = WrappedHandler | WrappedStreamHandler;

/** Whether a handler is a wrapped server stream (any other handler is unary). */
export function isStreamHandler(handler: UnaryHandler | StreamHandler): handler is WrappedStreamHandler {
  return (handler as Partial<WrappedStreamHandler>).kind === "server_streaming";
}

/**
 * What the entry points decide of a call before they read its request body.
 * A body costs memory while it arrives and CPU to decode, so a caller who
 * could not be served anyway must not get that far.
 */
export interface Admission {
  /** Whether calls must carry a valid token (the method's iam rule is enabled). */
  readonly needsToken: boolean;
  /**
   * Decides what the headers alone decide, before the body is read: a
   * deadline already passed is DEADLINE_EXCEEDED, and a method that needs a
   * token authenticates the caller (UNAUTHENTICATED otherwise), keeping the
   * principal in context.values, where the handler finds it. A refusal is
   * recorded as a finished call (metrics, access log) and thrown as the
   * ConnectError the client gets. Entry points that skip it (native gRPC,
   * whose transport reads the message first) lose nothing: the handler does
   * whatever admission has not done.
   */
  admit(context: AdmissionContext): Promise<void>;
}

/** A wrapped service: the only object the REST, Connect and gRPC entry points call. */
export interface WrappedService {
  service: DescService;
  handlers: Record<string, WrappedMethod>;
}

/** Context value carrying the request id (defined with the other call values; re-exported for the entry points). */
export { requestIdKey };

/** What one finished call looked like, for metrics and the access log. */
export interface CallRecord {
  service: string;
  method: string;
  protocol: string;
  /** The gRPC status code name, e.g. "ok", "not_found". */
  code: string;
  durationMs: number;
  /** The caller's identity uid, "" before authentication succeeded. */
  principal: string;
  requestId: string;
  /** The client's address, as the entry point found it (clientAddressKey); "" when unknown. */
  remoteAddress: string;
}

/** Sees every call start and finish. */
export interface CallObserver {
  started(protocol: string): void;
  finished(call: CallRecord): void;
  /**
   * A call started by admission (WrappedHandler.admit) was admitted: it is
   * no longer in flight while its body is read, and starts again (started)
   * when its handler runs; a call refused by admission is finished instead.
   */
  admitted?(protocol: string): void;
}

/** Options shared by every wrapped method. */
export interface WrapOptions {
  authenticator: Authenticator;
  authorizer: Authorizer;
  /**
   * Brings the store's view of other processes' writes up to date
   * (Store.refresh); awaited before each call reads anything.
   */
  refresh?: () => Promise<void>;
  observer?: CallObserver;
  /**
   * Each identity's share of calls (the administrator is exempt): taken once
   * per call, when its caller is authenticated, before any store work.
   */
  callLimiter?: { limiter: CallRateLimiter; perSecond: number };
  /** Receives each internal error's cause with the request id of its call. */
  onInternalError?: (err: unknown, requestId: string) => void;
}

/**
 * Wraps every method once, for every protocol: authenticate the caller, enforce
 * the method's declared capabilities at its scope field (before the target is
 * looked up, so a forbidden target and a missing one get the same answer),
 * call the implementation, and map whatever it throws to one ConnectError with
 * a single ErrorInfo. Throws at start-up when a method has no implementation
 * or no authorization rule.
 */
export function wrapService(binding: ServiceBinding, opts: WrapOptions): WrappedService {
  const domain = areaErrorDomain(binding.service.typeName);
  const handlers: Record<string, WrappedMethod> = {};
  for (const method of binding.service.methods) {
    const impl = binding.impl[method.localName];
    if (typeof impl !== "function") throw new Error(`${binding.service.typeName}.${method.name} has no implementation`);
    handlers[method.localName] = wrapMethod(method, impl.bind(binding.impl), domain, opts);
  }
  return { service: binding.service, handlers };
}

function wrapMethod(
  method: DescMethod,
  impl: (request: unknown, context: HandlerContext) => unknown,
  domain: string,
  opts: WrapOptions,
): WrappedMethod {
  if (method.methodKind !== "unary" && method.methodKind !== "server_streaming")
    throw new Error(`${method.name}: only unary and server-streaming methods are wrapped`);
  const rule = methodRule(method);
  const service = method.parent.typeName;
  const record = (context: AdmissionContext, code: Code | 0, start: number) =>
    opts.observer?.finished({
      service,
      method: method.name,
      protocol: context.protocolName,
      code: codeName(code),
      durationMs: performance.now() - start,
      principal: context.values.get(principalKey)?.subject ?? "",
      requestId: context.values.get(requestIdKey),
      remoteAddress: context.values.get(clientAddressKey),
    });
  const mapError = (err: unknown, context: AdmissionContext): ConnectError => {
    const onInternal = opts.onInternalError;
    const mapped = toConnectError(err, domain, onInternal && ((cause) => onInternal(cause, context.values.get(requestIdKey))));
    // The client stopped waiting at its deadline and sees DEADLINE_EXCEEDED whatever came later (a
    // not_found, or canceled when it hung up first): metrics and the log line count what it saw.
    return mapped.code !== Code.DeadlineExceeded && pastDeadline(context) ? toConnectError(deadlinePassed(), domain) : mapped;
  };
  /** The caller's principal (null for a method that needs no token), from admission or authenticated now. */
  const principalOf = async (context: AdmissionContext): Promise<Principal | null> => {
    if (rule.mode !== "enabled") return null;
    const admitted = context.values.get(principalKey);
    if (admitted !== null) return admitted;
    const principal = await opts.authenticator.authenticate(context.requestHeader);
    const limit = opts.callLimiter;
    if (limit !== undefined && !principal.admin) {
      const waitMs = limit.limiter.take(principal.subject);
      if (waitMs > 0) throw rateLimited(limit.perSecond, waitMs);
    }
    context.values.set(principalKey, principal);
    return principal;
  };
  /** What every call passes before its implementation runs, whatever its kind. */
  const prologue = async (request: unknown, context: HandlerContext) => {
    // Nothing is done for a call whose client has stopped waiting: a write must not commit unseen.
    if (pastDeadline(context)) throw deadlinePassed();
    // An admitted call was brought up to date before its body was read.
    if (context.values.get(principalKey) === null) await opts.refresh?.();
    const principal = await principalOf(context);
    if (principal !== null && rule.mode === "enabled" && !rule.unscoped)
      await opts.authorizer.require(principal, rule.capabilities, scopeOf(rule, request));
    // Authentication and authorization wait on the store: the deadline may have passed meanwhile.
    if (pastDeadline(context)) throw deadlinePassed();
    // NUL and other control characters are refused in every text of every request, on every protocol.
    rejectControlCharacters(method, request);
  };
  const admission = {
    needsToken: rule.mode === "enabled",
    async admit(context: AdmissionContext): Promise<void> {
      if (!pastDeadline(context) && rule.mode !== "enabled") return;
      const start = performance.now();
      opts.observer?.started(context.protocolName);
      try {
        if (pastDeadline(context)) throw deadlinePassed();
        await opts.refresh?.();
        await principalOf(context);
        // Authentication waits on the store: the deadline may have passed meanwhile.
        if (pastDeadline(context)) throw deadlinePassed();
      } catch (err) {
        const mapped = mapError(err, context);
        record(context, mapped.code, start);
        throw mapped;
      }
      opts.observer?.admitted?.(context.protocolName);
    },
  };
  if (method.methodKind === "server_streaming") {
    const stream = impl as StreamHandler;
    async function* streamHandler(request: unknown, context: HandlerContext): AsyncGenerator<unknown> {
      const start = performance.now();
      opts.observer?.started(context.protocolName);
      let code: Code | 0 = 0;
      let ended = false;
      try {
        await prologue(request, context);
        yield* stream(request, context);
        // The signal aborts at the deadline and the implementation stops: the client saw DEADLINE_EXCEEDED.
        if (pastDeadline(context)) throw deadlinePassed();
        // The implementation stopped because its client went away: nobody saw an OK.
        if (context.signal.aborted) code = Code.Canceled;
        ended = true;
      } catch (err) {
        const mapped = mapError(err, context);
        code = mapped.code;
        throw mapped;
      } finally {
        // Neither ended nor failed: the entry point stopped asking, its client gone.
        record(context, ended || code !== 0 ? code : pastDeadline(context) ? Code.DeadlineExceeded : Code.Canceled, start);
      }
    }
    return Object.assign(streamHandler, { kind: "server_streaming" as const }, admission);
  }
  const handler = async (request: unknown, context: HandlerContext) => {
    const start = performance.now();
    opts.observer?.started(context.protocolName);
    let code: Code | 0 = 0;
    try {
      await prologue(request, context);
      const result = await impl(request, context);
      if (pastDeadline(context)) throw deadlinePassed();
      return result;
    } catch (err) {
      const mapped = mapError(err, context);
      code = mapped.code;
      throw mapped;
    } finally {
      record(context, code, start);
    }
  };
  return Object.assign(handler, { kind: "unary" as const }, admission);
}

/** ErrorInfo reason of a call refused because its identity called faster than PLATFORM_CALLS_PER_IDENTITY. */
export const RATE_LIMITED = "RATE_LIMITED";

/** RESOURCE_EXHAUSTED (HTTP 429) with RetryInfo: the identity's calls are over their rate; nothing was done. */
function rateLimited(perSecond: number, waitMs: number): ApiError {
  return new ApiError(
    Code.ResourceExhausted,
    RATE_LIMITED,
    `Resource exhausted: this identity is calling faster than ${perSecond} calls per second; retry after the delay given`,
    { metadata: { quota: "calls_per_identity_per_second", limit: String(perSecond) }, retryDelayMs: waitMs },
  );
}

/** Whether the call had a deadline and it has passed. */
function pastDeadline(context: Pick<HandlerContext, "timeoutMs">): boolean {
  const remaining = context.timeoutMs();
  return remaining !== undefined && remaining <= 0;
}

/**
 * The AbortSignal of a call on a path that makes its own context (the
 * Connect fast path, native gRPC): aborted when the client goes away before
 * the call finished, and at the call's deadline, as connect-node's is, so a
 * handler that honours it stops working for a client that stopped waiting.
 * onEnd registers a listener for the end of the call, whichever way it ends.
 */
export function callSignal(remainingMs: number | undefined, onEnd: (listener: () => void) => void, finished: () => boolean): AbortSignal {
  const abort = new AbortController();
  const timer = remainingMs === undefined ? undefined : setTimeout(() => abort.abort(deadlinePassed()), Math.max(0, remainingMs));
  timer?.unref();
  onEnd(() => {
    clearTimeout(timer);
    if (!finished()) abort.abort();
  });
  return abort.signal;
}

/** The answer to a call that finished after its deadline; its work may have been done. */
function deadlinePassed(): ApiError {
  return new ApiError(
    Code.DeadlineExceeded,
    "DEADLINE_EXCEEDED",
    "Deadline exceeded: the call's deadline passed before the server answered",
  );
}

/** The scope uid a scoped request names; INVALID_ARGUMENT unless it is a uid path. */
function scopeOf(rule: Extract<MethodRule, { mode: "enabled" }>, request: unknown): string {
  let value: unknown = request;
  for (const key of rule.scopePath!) value = (value as Record<string, unknown> | undefined)?.[key];
  return requireUidp(rule.scopeField!, typeof value === "string" ? value : "");
}

/** "ok" or the lower_snake name of a gRPC code, as Connect writes it. */
export function codeName(code: Code | 0): string {
  return code === 0 ? "ok" : Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
