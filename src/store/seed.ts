import { BUILTIN_ROLES, builtinRoleUid, normalizeCapabilities } from "../domain/builtin-roles.js";
import type { Store } from "./store.js";

/**
 * Creates the built-in roles on first start, and brings their descriptions and
 * capabilities up to date after an upgrade. Idempotent.
 */
export async function seedBuiltinRoles(store: Store, now: number): Promise<void> {
  await store.transaction(async (tx) => {
    for (const def of BUILTIN_ROLES) {
      const uid = builtinRoleUid(def.name);
      const capabilities = normalizeCapabilities(def.capabilities);
      const current = await tx.roles.get(uid);
      if (!current) {
        await tx.roles.create({
          uid,
          parentUid: null,
          name: def.name,
          description: def.description,
          capabilities,
          createTime: now,
          updateTime: now,
        });
      } else if (current.description !== def.description || current.capabilities.join() !== capabilities.join()) {
        await tx.roles.update(uid, { description: def.description, capabilities }, now);
      }
    }
  });
}
