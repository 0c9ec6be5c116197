import { CorrelationRule, type IdentityProvider } from "../../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import type { FieldViolation } from "../../domain/errors.js";
import { userIssuerProblem, type IssuerPolicy } from "../../domain/issuer.js";
import type { OidcSettings } from "../../store/store.js";

/** Update-mask paths inside oidc, by the OidcSettings key each one sets. */
const SUB_PATHS = {
  "oidc.issuer": "issuer",
  "oidc.client_id": "clientId",
  "oidc.client_secret": "clientSecret",
  "oidc.additional_scopes": "additionalScopes",
  "oidc.groups_claim": "groupsClaim",
  "oidc.correlation_rule": "correlationRule",
  "oidc.pkce_enabled": "pkceEnabled",
} as const satisfies Record<string, keyof OidcSettings>;

/** The oidc paths an update mask may name besides "oidc" itself. */
export const OIDC_PATHS = Object.keys(SUB_PATHS) as (keyof typeof SUB_PATHS)[];

const VISIBLE = /^[\x20-\x7e]*$/;
/** RFC 6749 §3.3 scope-token. */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]{1,128}$/;
const MAX_SCOPES = 32;
const CORRELATION_RULES = new Set<number>([
  CorrelationRule.UNSPECIFIED,
  CorrelationRule.SUB_EQUALS_EXTERNAL_ID,
  CorrelationRule.OID_EQUALS_EXTERNAL_ID,
]);

/** The OIDC settings a provider message carries, or null when it has none. */
export function oidcSettingsOf(provider: IdentityProvider): OidcSettings | null {
  if (provider.configuration.case !== "oidc") return null;
  const o = provider.configuration.value;
  return {
    issuer: o.issuer,
    clientId: o.clientId,
    clientSecret: o.clientSecret,
    additionalScopes: [...o.additionalScopes],
    groupsClaim: o.groupsClaim,
    correlationRule: o.correlationRule,
    pkceEnabled: o.pkceEnabled,
  };
}

function checkPrintable(out: FieldViolation[], field: string, value: string, max: number, required: boolean): void {
  if (required && value.trim() === "") out.push({ field, description: "is required" });
  else if (value.length > max || !VISIBLE.test(value))
    out.push({ field, description: `must be at most ${max} printable ASCII characters` });
}

/** Violations of complete OIDC settings, with field names under prefix ("oidc"). */
export function checkOidc(prefix: string, o: OidcSettings, policy: IssuerPolicy): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (o.issuer === "") out.push({ field: `${prefix}.issuer`, description: "is required" });
  else {
    const problem = userIssuerProblem(o.issuer, policy);
    if (problem !== undefined) out.push({ field: `${prefix}.issuer`, description: problem });
  }
  checkPrintable(out, `${prefix}.client_id`, o.clientId, 256, true);
  checkPrintable(out, `${prefix}.client_secret`, o.clientSecret, 1024, false);
  if (o.clientSecret === "" && !o.pkceEnabled) {
    out.push({ field: `${prefix}.client_secret`, description: "client_secret or pkce_enabled is required" });
  }
  if (o.additionalScopes.length > MAX_SCOPES)
    out.push({ field: `${prefix}.additional_scopes`, description: `at most ${MAX_SCOPES} scopes` });
  o.additionalScopes.forEach((s, i) => {
    if (!SCOPE_TOKEN.test(s))
      out.push({
        field: `${prefix}.additional_scopes[${i}]`,
        description: "must be an OAuth scope token: 1 to 128 printable characters, no spaces, quotes or backslashes",
      });
  });
  checkPrintable(out, `${prefix}.groups_claim`, o.groupsClaim, 256, false);
  if (!CORRELATION_RULES.has(o.correlationRule))
    out.push({ field: `${prefix}.correlation_rule`, description: "is not a known CorrelationRule" });
  return out;
}

/** UNSPECIFIED means SUB_EQUALS_EXTERNAL_ID, the contract's default correlation rule. */
const effectiveRule = (rule: number) => (rule === CorrelationRule.UNSPECIFIED ? CorrelationRule.SUB_EQUALS_EXTERNAL_ID : rule);

/**
 * The OIDC settings after an update that changes `fields`; settings null when
 * nothing in oidc changes. "oidc" replaces the settings, except that an empty
 * client secret keeps the stored one and an unset correlation rule keeps the
 * stored rule; "oidc.client_secret" sets (or, empty, clears) the secret. The
 * correlation rule is immutable: restating it is a no-op, another value is
 * INVALID_ARGUMENT.
 */
export function updatedOidc(
  current: OidcSettings,
  given: OidcSettings | null,
  fields: ReadonlySet<string>,
  policy: IssuerPolicy,
): { settings: OidcSettings | null; violations: FieldViolation[] } {
  const named = OIDC_PATHS.filter((p) => fields.has(p));
  if (!fields.has("oidc") && named.length === 0) return { settings: null, violations: [] };
  const input: OidcSettings = given ?? {
    issuer: "",
    clientId: "",
    clientSecret: "",
    additionalScopes: [],
    groupsClaim: "",
    correlationRule: 0,
    pkceEnabled: false,
  };
  let next: OidcSettings = { ...current };
  if (fields.has("oidc")) {
    next = {
      ...input,
      clientSecret: input.clientSecret === "" ? current.clientSecret : input.clientSecret,
      correlationRule: input.correlationRule === CorrelationRule.UNSPECIFIED ? current.correlationRule : input.correlationRule,
    };
  }
  for (const path of named) (next as unknown as Record<string, unknown>)[SUB_PATHS[path]] = input[SUB_PATHS[path]];
  const violations: FieldViolation[] = [];
  if (!CORRELATION_RULES.has(next.correlationRule)) {
    violations.push({ field: "oidc.correlation_rule", description: "is not a known CorrelationRule" });
  } else if (effectiveRule(next.correlationRule) !== effectiveRule(current.correlationRule)) {
    violations.push({ field: "oidc.correlation_rule", description: "is immutable: it cannot be changed after the provider is created" });
  }
  // Restating the rule (UNSPECIFIED for SUB_EQUALS, or the reverse) keeps the stored value.
  next.correlationRule = current.correlationRule;
  violations.push(...checkOidc("oidc", next, policy));
  return { settings: next, violations };
}
