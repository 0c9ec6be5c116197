import type { FieldViolation } from "./errors.js";
import { requiredBy } from "./names.js";

/**
 * An OCI repository path (distribution spec): lowercase alphanumeric
 * components joined by ".", "_", "__" or dashes, in "/"-separated segments.
 */
export const REPO_NAME_PATTERN = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;
export const REPO_NAME_MAX = 256;
/** An OCI tag, as the real API's SDK validates it (ValidateTag); the pattern bounds it at 128 characters. */
export const TAG_PATTERN = /^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$/;
/** The manifest digest a tag points at. */
export const DIGEST_PATTERN = /^sha256:[0-9a-f]{64}$/;
/** One alias, "name:tag", as the real API's SDK validates it (ValidateAliases). */
export const ALIAS_PATTERN = /^[a-zA-Z0-9_./-]*[a-zA-Z0-9_.-]:[a-zA-Z0-9_.-]+$/;
/** Aliases are bounded before the pattern runs: it backtracks on long near-misses. */
export const ALIAS_MAX = 512;
/** The bundles a repo or tag may carry: the real API's SDK allow-list (ValidateBundles). */
export const BUNDLES: readonly string[] = ["application", "base", "byol", "ai", "ai-gpu", "featured", "fips", "commercial", "emeritoss"];
/** The most entries a list field (bundles, aliases, active tags) may hold. */
export const LIST_MAX = 100;

/** Violations of the repo name rule. */
export function checkRepoName(field: string, name: string): FieldViolation[] {
  if (name.length >= 1 && name.length <= REPO_NAME_MAX && REPO_NAME_PATTERN.test(name)) return [];
  const rule = `must be 1 to ${REPO_NAME_MAX} characters matching ${REPO_NAME_PATTERN.source} (an OCI repository path)`;
  return [{ field, description: name === "" ? requiredBy(rule) : rule }];
}

/** Violations of the OCI tag rule, for one tag name. */
export function checkTagName(field: string, name: string): FieldViolation[] {
  if (TAG_PATTERN.test(name)) return [];
  return [{ field, description: `must match ${TAG_PATTERN.source} (an OCI tag)` }];
}

/** Violations of the digest rule. */
export function checkDigest(field: string, digest: string): FieldViolation[] {
  if (DIGEST_PATTERN.test(digest)) return [];
  return [{ field, description: 'must be "sha256:" followed by 64 lowercase hex characters' }];
}

/** Violations of a list field: one violation naming the first bad entry. */
function checkEach(field: string, values: readonly string[], valid: (v: string) => boolean, rule: string): FieldViolation[] {
  if (values.length > LIST_MAX) return [{ field, description: `at most ${LIST_MAX} entries` }];
  const bad = values.find((v) => !valid(v));
  return bad === undefined ? [] : [{ field, description: `${JSON.stringify(bad)} is not allowed: ${rule}` }];
}

/** Violations of the bundles allow-list. */
export function checkBundles(field: string, bundles: readonly string[]): FieldViolation[] {
  return checkEach(field, bundles, (b) => BUNDLES.includes(b), `each bundle must be one of ${BUNDLES.join(", ")}`);
}

/** Violations of the alias rule. */
export function checkAliases(field: string, aliases: readonly string[]): FieldViolation[] {
  const valid = (a: string) => a.length <= ALIAS_MAX && ALIAS_PATTERN.test(a);
  return checkEach(field, aliases, valid, `each alias must be at most ${ALIAS_MAX} characters matching ${ALIAS_PATTERN.source}`);
}

/** Violations of the active-tags rule: each an OCI tag. */
export function checkActiveTags(field: string, tags: readonly string[]): FieldViolation[] {
  return checkEach(field, tags, (t) => TAG_PATTERN.test(t), `each active tag must match ${TAG_PATTERN.source}`);
}

/** A referrer tag: "sha256-<digest>", pointing at a manifest's attachments. */
export function isReferrerTag(name: string): boolean {
  return name.startsWith("sha256-");
}

/** A dated tag: "…-20yymmdd". */
export function isDatedTag(name: string): boolean {
  return /-20\d{6}$/.test(name);
}

/** An epoch tag: "…-r<digits>". */
export function isEpochTag(name: string): boolean {
  return /-r\d+$/.test(name);
}
