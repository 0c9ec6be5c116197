import { InvalidArgumentError } from "../../domain/errors.js";
import { nulFieldOf } from "../../domain/text-rules.js";
import type { Store } from "../store.js";
import { decorateStore } from "./decorate.js";

/**
 * The store refusing any call whose arguments hold a NUL in their text:
 * PostgreSQL cannot store one (a write fails) nor compare with one (a filter
 * fails), and SQLite would keep it and fail the migration to PostgreSQL
 * later. Requests are checked field by field before their handlers
 * (domain/text-rules.ts); this catches what reaches the store by other
 * paths: claims of an upstream ID token at sign-in, imported advisories.
 * INVALID_ARGUMENT names the record's field ("email"), the same on both
 * engines.
 */
export function guardStoredText(store: Store): Store {
  return decorateStore(store, (_part, _method, original) => (...args) => {
    for (const arg of args) {
      const field = nulFieldOf(arg);
      if (field !== null) {
        return Promise.reject(
          new InvalidArgumentError([{ field, description: "holds the control character U+0000, which cannot be stored" }]),
        );
      }
    }
    return original(...args);
  });
}
