import { RE2JS } from "re2js";
import type { ClaimMatchRecord } from "./claim-match-record.js";
import type { FieldViolation } from "./errors.js";
import { userIssuerProblem, type IssuerPolicy } from "./issuer.js";

/** Longest pattern accepted; keeps compile time and memory bounded. */
const MAX_PATTERN_LENGTH = 512;

const compiled = new Map<string, RE2JS>();

/**
 * Compiles a customer pattern on RE2 (linear time: no catastrophic
 * backtracking), anchored so it must match the whole value. Throws on syntax
 * errors. Compiled patterns are cached.
 */
export function compilePattern(pattern: string): RE2JS {
  let re = compiled.get(pattern);
  if (!re) {
    re = RE2JS.compile(`^(?:${pattern})$`);
    if (compiled.size > 10_000) compiled.clear();
    compiled.set(pattern, re);
  }
  return re;
}

/** Violations of one pattern field: too long or not valid RE2 syntax. */
function checkPattern(field: string, pattern: string): FieldViolation[] {
  if (pattern.length > MAX_PATTERN_LENGTH) return [{ field, description: `must be at most ${MAX_PATTERN_LENGTH} characters` }];
  try {
    compilePattern(pattern);
    return [];
  } catch {
    return [{ field, description: "is not a valid RE2 regular expression" }];
  }
}

/**
 * Violations of a claim match: exactly one of issuer / issuerPattern and of
 * subject / subjectPattern, at most one of audience / audiencePattern, valid
 * patterns throughout. Field names are given under prefix (e.g. "claim_match").
 */
export function checkClaimMatch(prefix: string, m: ClaimMatchRecord, policy: IssuerPolicy): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (m.issuer !== "") {
    const problem = userIssuerProblem(m.issuer, policy);
    if (problem !== undefined) out.push({ field: `${prefix}.issuer`, description: problem });
  }
  const pair = (exact: string, pattern: string, exactName: string, patternName: string, required: boolean) => {
    if (exact !== "" && pattern !== "")
      out.push({ field: `${prefix}.${exactName}`, description: `set ${exactName} or ${patternName}, not both` });
    else if (required && exact === "" && pattern === "")
      out.push({ field: `${prefix}.${exactName}`, description: `${exactName} or ${patternName} is required` });
    if (pattern !== "") out.push(...checkPattern(`${prefix}.${patternName}`, pattern));
  };
  pair(m.issuer, m.issuerPattern, "issuer", "issuer_pattern", true);
  pair(m.subject, m.subjectPattern, "subject", "subject_pattern", true);
  pair(m.audience, m.audiencePattern, "audience", "audience_pattern", false);
  for (const [claim, pattern] of Object.entries(m.claimPatterns)) out.push(...checkPattern(`${prefix}.claim_patterns[${claim}]`, pattern));
  return out;
}

function matchesOne(exact: string, pattern: string, value: string): boolean {
  if (exact !== "") return value === exact;
  if (pattern !== "") return value.length <= 4096 && compilePattern(pattern).matches(value);
  return true;
}

/** A claim value as text: strings as they are, other JSON values serialized. */
function claimText(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * True when a verified upstream token's claims satisfy the match. When the
 * match names no audience, the token's aud must contain defaultAudience.
 */
export function claimsMatch(m: ClaimMatchRecord, claims: Record<string, unknown>, defaultAudience: string): boolean {
  const iss = claimText(claims.iss);
  const sub = claimText(claims.sub);
  if (iss === undefined || sub === undefined) return false;
  if (!matchesOne(m.issuer, m.issuerPattern, iss) || !matchesOne(m.subject, m.subjectPattern, sub)) return false;
  const auds = Array.isArray(claims.aud)
    ? claims.aud.filter((a): a is string => typeof a === "string")
    : typeof claims.aud === "string"
      ? [claims.aud]
      : [];
  const audOk =
    m.audience === "" && m.audiencePattern === ""
      ? auds.includes(defaultAudience)
      : auds.some((a) => matchesOne(m.audience, m.audiencePattern, a));
  if (!audOk) return false;
  for (const [name, want] of Object.entries(m.claims)) if (claimText(claims[name]) !== want) return false;
  for (const [name, pattern] of Object.entries(m.claimPatterns)) {
    const value = claimText(claims[name]);
    if (value === undefined || !matchesOne("", pattern, value)) return false;
  }
  return true;
}
