import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  ClaimMatchSchema,
  IdentitySchema,
  StaticKeysSchema,
  type ClaimMatch,
  type Identity,
} from "../../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { checkClaimMatch } from "../../domain/claim-match.js";
import type { FieldViolation } from "../../domain/errors.js";
import type { IssuerPolicy } from "../../domain/issuer.js";
import { checkStaticKeys, STATIC_KEYS_MAX_LIFETIME_MS } from "../../domain/static-keys.js";
import type { ClaimMatchRecord, IdentityRecord, IdentityRelationship } from "../../store/store.js";
import { timestampFromMs } from "../time.js";

/** One side of a ClaimMatch oneof pair, from the record's exact/pattern strings. */
function oneOf<E extends string, P extends string>(exactCase: E, exact: string, patternCase: P, pattern: string) {
  if (exact !== "") return { case: exactCase, value: exact };
  if (pattern !== "") return { case: patternCase, value: pattern };
  return { case: undefined };
}

function claimMatchMessage(m: ClaimMatchRecord): ClaimMatch {
  return create(ClaimMatchSchema, {
    iss: oneOf("issuer", m.issuer, "issuerPattern", m.issuerPattern),
    sub: oneOf("subject", m.subject, "subjectPattern", m.subjectPattern),
    aud: oneOf("audience", m.audience, "audiencePattern", m.audiencePattern),
    claims: m.claims,
    claimPatterns: m.claimPatterns,
  });
}

function claimMatchRecord(m: ClaimMatch): ClaimMatchRecord {
  return {
    issuer: m.iss.case === "issuer" ? m.iss.value : "",
    issuerPattern: m.iss.case === "issuerPattern" ? m.iss.value : "",
    subject: m.sub.case === "subject" ? m.sub.value : "",
    subjectPattern: m.sub.case === "subjectPattern" ? m.sub.value : "",
    audience: m.aud.case === "audience" ? m.aud.value : "",
    audiencePattern: m.aud.case === "audiencePattern" ? m.aud.value : "",
    claims: { ...m.claims },
    claimPatterns: { ...m.claimPatterns },
  };
}

/** The API shape of a stored identity. */
export function identityMessage(i: IdentityRecord): Identity {
  const rel = i.relationship;
  return create(IdentitySchema, {
    uid: i.uid,
    name: i.name,
    description: i.description,
    email: i.email,
    emailUnverified: i.emailUnverified,
    company: i.company,
    lastSeenTime: timestampFromMs(i.lastSeenTime),
    createTime: timestampFromMs(i.createTime),
    updateTime: timestampFromMs(i.updateTime),
    relationship:
      rel.kind === "claimMatch"
        ? { case: "claimMatch", value: claimMatchMessage(rel.claimMatch) }
        : {
            case: "staticKeys",
            value: create(StaticKeysSchema, {
              issuer: rel.staticKeys.issuer,
              subject: rel.staticKeys.subject,
              issuerKeys: rel.staticKeys.issuerKeys,
              expirationTime: timestampFromMs(rel.staticKeys.expirationTime),
              audiences: rel.staticKeys.audiences,
            }),
          },
  });
}

/**
 * The relationship an identity message asks for, with its violations, as
 * registered at time now: exactly one of claim_match and static_keys; a
 * static-keys expiration defaults to (and is capped at) now + 365 days.
 */
export function relationshipOf(
  identity: Identity,
  now: number,
  policy: IssuerPolicy,
): { relationship: IdentityRelationship | null; violations: FieldViolation[] } {
  const rel = identity.relationship;
  if (rel.case === "claimMatch") {
    const claimMatch = claimMatchRecord(rel.value);
    return { relationship: { kind: "claimMatch", claimMatch }, violations: checkClaimMatch("claim_match", claimMatch, policy) };
  }
  if (rel.case === "staticKeys") {
    const k = rel.value;
    const expirationTime = k.expirationTime ? timestampMs(k.expirationTime) : null;
    const staticKeys = {
      issuer: k.issuer,
      subject: k.subject,
      issuerKeys: k.issuerKeys,
      expirationTime: expirationTime ?? now + STATIC_KEYS_MAX_LIFETIME_MS,
      audiences: [...k.audiences],
    };
    return { relationship: { kind: "staticKeys", staticKeys }, violations: checkStaticKeys("static_keys", { ...k, expirationTime }, now) };
  }
  return {
    relationship: null,
    violations: [{ field: "claim_match", description: "exactly one of claim_match or static_keys is required" }],
  };
}

/** The issuer and subject a binding shows for an identity: exact claim-match values or the static keys'. */
export function issuerAndSubjectOf(i: IdentityRecord): { issuer: string; subject: string } {
  const rel = i.relationship;
  if (rel.kind === "staticKeys") return { issuer: rel.staticKeys.issuer, subject: rel.staticKeys.subject };
  return { issuer: rel.claimMatch.issuer, subject: rel.claimMatch.subject };
}
