/**
 * The asynchronous form of a store part: the same methods, each returning a
 * promise and taking, last and optional, the call's AbortSignal. A method
 * whose signal has aborted (the caller cancelled, or its deadline passed)
 * rejects with CancelledError before it does any work.
 */
export type Async<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: [...A, signal?: AbortSignal]) => Promise<Awaited<R>> : T[K];
};
