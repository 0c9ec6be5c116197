import type { Store } from "../store.js";
import { decorateStore } from "./decorate.js";

/**
 * The store observed: each part method's duration, until its promise
 * settles, is reported as observe(seconds, part, method), inside
 * transactions too. Cache hits of a CachingStore below are reported as the
 * short calls they are.
 */
export function createObservedStore(store: Store, observe: (seconds: number, part: string, method: string) => void): Store {
  return decorateStore(store, (part, method, original) => async (...args) => {
    const start = performance.now();
    try {
      return await original(...args);
    } finally {
      observe((performance.now() - start) / 1000, part, method);
    }
  });
}
