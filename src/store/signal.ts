import { ConnectError, Code } from "@connectrpc/connect";
import { CancelledError } from "../domain/errors.js";

/**
 * The call's signal at the end of a part method's arguments, if the caller
 * passed one (every part method takes it last, optionally).
 */
export function signalIn(args: readonly unknown[]): AbortSignal | undefined {
  const last = args[args.length - 1];
  return last instanceof AbortSignal ? last : undefined;
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
    (reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) || (reason instanceof DOMException && reason.name === "TimeoutError");
  throw new CancelledError(deadline);
}
