import type { UIDPFilter } from "../../gen/platformapi/common/v1/uidp_pb.js";
import { InvalidArgumentError, type FieldViolation } from "./errors.js";
import type { HierarchyFilter } from "./hierarchy-filter.js";
import { isUidp } from "./uidp.js";

const NOT_A_UID = 'must be a uid path: 40 lowercase hex characters, then "/" and 16 hex per level';

/** Validates a UIDPFilter and turns it into the store's HierarchyFilter. */
export function hierarchyFilter(uidp: UIDPFilter | undefined): HierarchyFilter {
  if (!uidp) return {};
  const violations: FieldViolation[] = [];
  const out: HierarchyFilter = {};
  const single = [
    ["ancestorsOf", "uidp.ancestors_of"],
    ["descendantsOf", "uidp.descendants_of"],
    ["childrenOf", "uidp.children_of"],
  ] as const;
  for (const [key, field] of single) {
    const value = uidp[key];
    if (value === "") continue;
    if (!isUidp(value)) violations.push({ field, description: NOT_A_UID });
    else out[key] = value;
  }
  if (uidp.inRoot) out.inRoot = true;
  if (uidp.ids.length > 0) {
    if (uidp.ids.length > 1000) violations.push({ field: "uidp.ids", description: "at most 1000 uids" });
    else if (!uidp.ids.every(isUidp)) violations.push({ field: "uidp.ids", description: NOT_A_UID });
    else out.ids = uidp.ids;
  }
  if (violations.length > 0) throw new InvalidArgumentError(violations);
  return out;
}

/** Throws INVALID_ARGUMENT on field unless value is a uid path. */
export function requireUidp(field: string, value: string): string {
  if (!isUidp(value)) {
    throw new InvalidArgumentError([{ field, description: value === "" ? "is required" : NOT_A_UID }]);
  }
  return value;
}
