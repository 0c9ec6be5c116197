import { Code, ConnectError } from "@connectrpc/connect";
import { CancelledError } from "../domain/errors.js";

/**
 * A part method's arguments split into the call's signal, if the caller
 * passed one (every part method takes it last, optionally), and the rest.
 */
export function splitSignal(args: unknown[]): { signal: AbortSignal | undefined; args: unknown[] } {
  const last = args[args.length - 1];
  return last instanceof AbortSignal ? { signal: last, args: args.slice(0, -1) } : { signal: undefined, args };
}

/**
 * Throws CancelledError when the call was cancelled or its deadline passed:
 * the store checks before it starts work (and between retries), so a caller
 * that gave up costs no database time.
 */
export function throwIfCancelled(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const reason: unknown = signal.reason;
  const deadline =
    (reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) ||
    (reason instanceof DOMException && reason.name === "TimeoutError");
  throw new CancelledError(deadline);
}
