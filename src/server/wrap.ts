import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, createContextKey, type HandlerContext } from "@connectrpc/connect";
import type { Authorizer } from "../auth/authorizer.js";
import { principalKey, type Authenticator } from "../auth/principal.js";
import { methodRule, type MethodRule } from "../auth/rules.js";
import { ApiError } from "../domain/errors.js";
import { requireUidp } from "../domain/hierarchy.js";
import type { ServiceBinding } from "../services/binding.js";
import { areaErrorDomain, toConnectError } from "./errors.js";

/** A unary handler as every entry point calls it. */
export type UnaryHandler = (request: unknown, context: HandlerContext) => Promise<unknown>;

/** A wrapped service: the only object the REST, Connect and gRPC entry points call. */
export interface WrappedService {
  service: DescService;
  handlers: Record<string, UnaryHandler>;
}

/** Context value carrying the request id, set by each entry point (REST, Connect, gRPC). */
export const requestIdKey = createContextKey<string>("", { description: "request id" });

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
}

/** Sees every call start and finish. */
export interface CallObserver {
  started(protocol: string): void;
  finished(call: CallRecord): void;
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
  const handlers: Record<string, UnaryHandler> = {};
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
): UnaryHandler {
  if (method.methodKind !== "unary") throw new Error(`${method.name}: only unary methods are wrapped`);
  const rule = methodRule(method);
  const service = method.parent.typeName;
  return async (request, context) => {
    const start = performance.now();
    opts.observer?.started(context.protocolName);
    let code: Code | 0 = 0;
    try {
      await opts.refresh?.();
      if (rule.mode === "enabled") {
        const principal = await opts.authenticator.authenticate(context.requestHeader);
        context.values.set(principalKey, principal);
        if (!rule.unscoped) await opts.authorizer.require(principal, rule.capabilities, scopeOf(rule, request));
      }
      const result = await impl(request, context);
      if (pastDeadline(context)) throw deadlinePassed();
      return result;
    } catch (err) {
      const onInternal = opts.onInternalError;
      let mapped = toConnectError(err, domain, onInternal && ((cause) => onInternal(cause, context.values.get(requestIdKey))));
      // The client stopped waiting at its deadline and sees DEADLINE_EXCEEDED whatever came later (a
      // not_found, or canceled when it hung up first): metrics and the log line count what it saw.
      if (mapped.code !== Code.DeadlineExceeded && pastDeadline(context)) mapped = toConnectError(deadlinePassed(), domain);
      code = mapped.code;
      throw mapped;
    } finally {
      opts.observer?.finished({
        service,
        method: method.name,
        protocol: context.protocolName,
        code: codeName(code),
        durationMs: performance.now() - start,
        principal: context.values.get(principalKey)?.subject ?? "",
        requestId: context.values.get(requestIdKey),
      });
    }
  };
}

/** Whether the call had a deadline and it has passed. */
function pastDeadline(context: HandlerContext): boolean {
  const remaining = context.timeoutMs();
  return remaining !== undefined && remaining <= 0;
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
function codeName(code: Code | 0): string {
  return code === 0 ? "ok" : Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}
