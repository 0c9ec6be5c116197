import type { FieldViolation } from "./errors.js";

/** The name rule of groups, identities, roles and identity providers: lowercase letters, digits, space, dot, underscore, hyphen. */
export const NAME_PATTERN = /^[a-z0-9 ._-]{1,}$/;
/** The contract's length rule for group, identity and identity-provider names. */
export const NAME_MIN = 3;
export const NAME_MAX = 63;
/** The contract's description rule: printable text up to 512 characters. */
export const DESCRIPTION_PATTERN = /^[\S ]{0,512}$/;

/**
 * What an empty required field says: that it is required, and the rule a
 * value must follow (the spec: the description states the pattern).
 */
export function requiredBy(rule: string): string {
  return `is required: ${rule}`;
}

const NAME_RULE = `must match ${NAME_PATTERN.source} and be ${NAME_MIN} to ${NAME_MAX} characters long`;

/** Violations of the resource name rule: present, the pattern, 3–63 characters. */
export function checkName(field: string, name: string): FieldViolation[] {
  if (NAME_PATTERN.test(name) && name.length >= NAME_MIN && name.length <= NAME_MAX) return [];
  return [{ field, description: name === "" ? requiredBy(NAME_RULE) : NAME_RULE }];
}

/** Violations of the description rule. */
export function checkDescription(field: string, description: string): FieldViolation[] {
  if (DESCRIPTION_PATTERN.test(description)) return [];
  return [{ field, description: "must be at most 512 characters without tabs or line breaks" }];
}

/** The contract's role name rule: no pattern, 1–63 characters of printable text. */
export const ROLE_NAME_PATTERN = /^\P{C}{1,63}$/u;

/** Violations of the role name rule. */
export function checkRoleName(field: string, name: string): FieldViolation[] {
  if (ROLE_NAME_PATTERN.test(name)) return [];
  const rule = "must be 1 to 63 characters of printable text";
  return [{ field, description: name === "" ? requiredBy(rule) : rule }];
}
