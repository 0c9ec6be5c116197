import { mapMethods, type MethodKinds } from "../parts.js";
import { splitSignal, throwIfCancelled } from "../signal.js";
import type { Async } from "../store.js";

/**
 * One SQLite connection under an asynchronous interface. A transaction spans
 * awaits, so while one is open nothing else may use the connection: its
 * reads would see uncommitted rows and its writes would join the
 * transaction. The gate lets one transaction at a time hold the connection
 * (a group commit's: group-commit.ts); reads wait for it and otherwise run at once.
 */
export class ConnectionGate {
  private held: Promise<void> | null = null;

  /** Runs fn alone on the connection: no other operation starts before it settles. */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    while (this.held) await this.held;
    let release!: () => void;
    this.held = new Promise<void>((resolve) => (release = resolve));
    try {
      return await fn();
    } finally {
      this.held = null;
      release();
    }
  }

  /** Runs fn once no transaction holds the connection. */
  async shared<T>(fn: () => T): Promise<T> {
    while (this.held) await this.held;
    return fn();
  }
}

/** How a synchronous operation is run on the connection. */
export type Run = <R>(fn: () => R) => Promise<R>;

/**
 * The asynchronous form of a synchronous part: each method runs through
 * `read` or `write` as its kind says (unless its signal aborted while it
 * waited), and what it throws becomes a rejection.
 */
export function asyncPart<T extends object>(part: T, kinds: MethodKinds<T>, read: Run, write: Run): Async<T> {
  return mapMethods(part, kinds, (_method, kind, original) => {
    const run = kind === "read" ? read : write;
    return (...call: unknown[]) => {
      const { signal, args } = splitSignal(call);
      return run(() => {
        throwIfCancelled(signal);
        return original(...args);
      });
    };
  });
}

/** Runs fn now, turning a throw into a rejection (inside a transaction, which holds the gate already). */
export const direct = async <R>(fn: () => R): Promise<R> => fn();
