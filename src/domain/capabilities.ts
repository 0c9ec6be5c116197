import { getOption, type DescEnumValue } from "@bufbuild/protobuf";
import { Capability, CapabilitySchema, internal_only } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { PermissionDeniedError, type FieldViolation } from "./errors.js";

/** Every defined capability value by number (open enum: a request may carry any number). */
const DEFINED = CapabilitySchema.value as Partial<Record<number, DescEnumValue>>;

/** The enum name of a capability, or its number when it has none. */
function capabilityName(c: number): string {
  return DEFINED[c]?.name ?? String(c);
}

/**
 * Violations of a custom role's capability list: at least one, each a defined
 * capability other than UNKNOWN, none marked internal_only (those are never
 * grantable by a customer role).
 */
export function checkRoleCapabilities(field: string, capabilities: readonly number[]): FieldViolation[] {
  if (capabilities.length === 0) return [{ field, description: "at least one capability is required" }];
  for (const c of capabilities) {
    const value = DEFINED[c];
    if (value === undefined || c === Capability.UNKNOWN) {
      return [{ field, description: `${c} is not a defined capability` }];
    }
    if (getOption(value, internal_only)) {
      return [{ field, description: `${value.name} is internal only and cannot be granted by a custom role` }];
    }
  }
  return [];
}

/**
 * Throws PermissionDeniedError unless every wanted capability is held: a
 * caller may only grant (through a role or a binding) what it holds itself at
 * that scope.
 */
export function requireNoEscalation(wanted: readonly number[], held: ReadonlySet<number>, scope: string): void {
  const missing = wanted.filter((c) => !held.has(c));
  if (missing.length > 0) {
    throw new PermissionDeniedError(
      `Permission denied: the caller does not hold ${missing.map(capabilityName).join(", ")} at ${scope} and cannot grant it`,
    );
  }
}
