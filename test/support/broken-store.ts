import type { Store } from "../../src/store/store.js";

/** A group uid whose reads fail inside the store (see withBrokenGroup). */
export const BROKEN_GROUP = "fedcba9876543210fedcba9876543210fedcba98";

/** A store whose groups.get throws on BROKEN_GROUP: an internal error, to see it logged and answered as such. */
export function withBrokenGroup(store: Store): Store {
  const groups = new Proxy(store.groups, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (prop !== "get" || typeof value !== "function") return value;
      return (uid: string, ...rest: unknown[]) => {
        if (uid === BROKEN_GROUP) throw new Error("disk I/O error (injected by the test)");
        return (value as (...a: unknown[]) => unknown).call(target, uid, ...rest);
      };
    },
  });
  return { ...store, groups };
}
