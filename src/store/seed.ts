import { BUILTIN_ROLES, builtinRoleUid, normalizeCapabilities } from "../domain/builtin-roles.js";
import type { Store } from "./store.js";

/**
 * Creates the built-in roles on first start, and brings their descriptions and
 * capabilities up to date after an upgrade. Idempotent.
 */
export function seedBuiltinRoles(store: Store, now: number): void {
  store.transaction(() => {
    for (const def of BUILTIN_ROLES) {
      const uid = builtinRoleUid(def.name);
      const capabilities = normalizeCapabilities(def.capabilities);
      const current = store.roles.get(uid);
      if (!current) {
        store.roles.create({ uid, parentUid: null, name: def.name, description: def.description, capabilities, createTime: now, updateTime: now });
      } else if (current.description !== def.description || current.capabilities.join() !== capabilities.join()) {
        store.roles.update(uid, { description: def.description, capabilities }, now);
      }
    }
  });
}
