import { makeParts, mapMethods, ownParts, STORE_PARTS, type MethodKind, type PartMethod, type PartName } from "../parts.js";
import type { Store, StoreParts } from "../store.js";

export type { PartMethod };

/** What a decorator makes of one method: given the part, the method, its original (bound) and its kind. */
export type MethodWrapper = (part: PartName, method: string, original: PartMethod, kind: MethodKind) => PartMethod;

/** The parts with every declared method (STORE_PARTS) replaced by wrap(part, method, original, kind). */
export function decorateParts(parts: StoreParts, wrap: MethodWrapper): StoreParts {
  return makeParts((name) =>
    mapMethods(parts[name], STORE_PARTS[name].methods, (method, kind, original) => wrap(name, method, original, kind)),
  );
}

/**
 * A store whose parts, inside transactions too, are decorated by wrap; its
 * own methods pass through to the store.
 */
export function decorateStore(store: Store, wrap: MethodWrapper): Store {
  // The wrappers hold no state of a transaction: parts an engine hands every transaction alike (SQLite's, whose
  // connection is one) are decorated once, not once per transaction.
  const decorated = new WeakMap<StoreParts, StoreParts>();
  const decorate = (parts: StoreParts): StoreParts => {
    let out = decorated.get(parts);
    if (out === undefined) decorated.set(parts, (out = decorateParts(parts, wrap)));
    return out;
  };
  return {
    ...ownParts(decorateParts(store, wrap)),
    readVersions: () => store.readVersions(),
    version: (tables) => store.version(tables),
    refresh: () => store.refresh(),
    transaction: (fn, signal) => store.transaction((tx) => fn(decorate(tx)), signal),
    // Passed on, so a CachingStore above still reads the versions with the COMMIT (one round trip fewer on PostgreSQL).
    ...(store.transactionThenVersions && {
      transactionThenVersions: (fn, signal) => store.transactionThenVersions!((tx) => fn(decorate(tx)), signal),
    }),
    ...(store.insertWithEvents && {
      insertWithEvents: (write, events, signal) => store.insertWithEvents!((parts) => write(decorate(parts)), events, signal),
    }),
    ...(store.poolStats && { poolStats: () => store.poolStats!() }),
    ...(store.connectionLosses && { connectionLosses: () => store.connectionLosses!() }),
    ready: () => store.ready(),
    describe: () => store.describe(),
    close: () => store.close(),
  } satisfies Store;
}
