import type { Authorizer } from "../../auth/authorizer.js";
import type { Principal } from "../../auth/principal.js";
import { requireNoEscalation } from "../../domain/capabilities.js";
import { NotFoundError } from "../../domain/errors.js";
import { isAtOrBelow } from "../../domain/uidp.js";
import type { RoleRecord, Store } from "../../store/store.js";

/** True when role can be granted at group: a built-in role, or one defined at or above group. */
export function roleAppliesAt(role: RoleRecord, group: string): boolean {
  return role.parentUid === null || isAtOrBelow(role.parentUid, group);
}

/**
 * The role a caller promises to grant at group later (an identity provider's
 * default role, an invite's role): it must apply at group (a missing role and
 * one from elsewhere get the same NOT_FOUND), and the caller must hold every
 * capability it grants there (PERMISSION_DENIED otherwise).
 */
export async function grantableRole(
  store: Store,
  authz: Authorizer,
  principal: Principal,
  roleUid: string,
  group: string,
): Promise<RoleRecord> {
  const role = await store.roles.get(roleUid);
  if (!role || !roleAppliesAt(role, group)) throw new NotFoundError("role", roleUid);
  requireNoEscalation(role.capabilities, await authz.capabilitiesAt(principal, group), group);
  return role;
}
