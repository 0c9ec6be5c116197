import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  IdentitySchema,
  RelationshipType,
  type IdentitiesService,
  type Identity,
  type ListIdentitiesResponse,
} from "../../../gen/platformapi/iam/v2beta1/identities_pb.js";
import { requireNoEscalation } from "../../domain/capabilities.js";
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, type FieldViolation } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription, checkName } from "../../domain/names.js";
import { newChildUid } from "../../domain/uidp.js";
import { userIdentityUid } from "../../domain/user-identity.js";
import type { IdentityChanges, IdentityFilter, IdentityOrder, IdentityRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { identityMessage, relationshipOf } from "./identity-messages.js";

const PAGING: PagingSpec<IdentityOrder> = {
  orderFields: ["uid", "name", "created_at", "updated_at"],
  defaultOrder: "uid",
};
const UPDATABLE = ["name", "description", "company", "claim_match", "static_keys"] as const;
const RELATIONSHIP_FIELDS = { claimMatch: "claim_match", staticKeys: "static_keys" } as const;

/** The store filter for a relationship_type; null when no identity here can have that type. */
const KIND_OF_TYPE: Record<RelationshipType, IdentityFilter["relationshipKind"] | null> = {
  [RelationshipType.UNSPECIFIED]: undefined,
  [RelationshipType.CLAIM_MATCH]: "claimMatch",
  [RelationshipType.STATIC]: "staticKeys",
  [RelationshipType.AWS_IDENTITY]: null,
  [RelationshipType.SERVICE_PRINCIPAL]: null,
};

/** The keyset position of an identity in a given order. */
function identityCursor(i: IdentityRecord, field: IdentityOrder) {
  const key = field === "name" ? i.name : field === "created_at" ? i.createTime : field === "updated_at" ? i.updateTime : i.uid;
  return { key, uid: i.uid };
}

function checkText(identity: Identity, fields: Iterable<string>): FieldViolation[] {
  const out: FieldViolation[] = [];
  for (const f of fields) {
    if (f === "name") out.push(...checkName("name", identity.name));
    if (f === "description") out.push(...checkDescription("description", identity.description));
    if (f === "company") out.push(...checkDescription("company", identity.company));
  }
  return out;
}

/** IdentitiesService: people and assumable workload identities. */
export function createIdentitiesService(deps: ServiceDeps): ServiceImpl<typeof IdentitiesService> {
  const { store } = deps;
  const LIST: ListSpec<IdentityRecord, IdentityFilter, IdentityOrder> = {
    name: "identities",
    paging: PAGING,
    capability: Capability.CAP_IAM_IDENTITY_LIST,
    list: (q, signal) => store.identities.list(q, signal),
    cursor: identityCursor,
  };
  // AWS identities and service principals are not supported: nothing can match.
  const NOTHING: typeof LIST = { ...LIST, list: async () => ({ items: [], hasMore: false, totalCount: 0 }) };
  return {
    async createIdentity(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.identity ?? create(IdentitySchema);
      const now = deps.now();
      const { relationship, violations } = relationshipOf(input, now, deps.issuerPolicy);
      const all = [...checkText(input, ["name", "description", "company"]), ...violations];
      if (all.length > 0 || relationship === null) throw new InvalidArgumentError(all);
      const record: IdentityRecord = {
        uid: newChildUid(parent),
        parentUid: parent,
        name: input.name,
        description: input.description,
        email: "",
        emailUnverified: "",
        company: input.company,
        relationship,
        lastSeenTime: now,
        createTime: now,
        updateTime: now,
      };
      const identity = identityMessage(record);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.identities.create(record),
        () => [{ kind: "identity", action: "created", subject: record.uid, resource: { schema: IdentitySchema, message: identity } }],
      );
      return identity;
    },

    async getIdentity(req) {
      const uid = requireUidp("uid", req.uid);
      const identity = await store.identities.get(uid);
      if (!identity) throw new NotFoundError("identity", uid);
      return identityMessage(identity);
    },

    async listIdentities(req, ctx): Promise<ListIdentitiesResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const kind = KIND_OF_TYPE[req.relationshipType];
      if (kind === undefined && req.relationshipType !== RelationshipType.UNSPECIFIED) {
        throw new InvalidArgumentError([{ field: "relationship_type", description: "is not a known RelationshipType" }]);
      }
      const filter: IdentityFilter = {};
      if (req.name !== "") filter.name = req.name;
      if (kind) filter.relationshipKind = kind;
      const page = await listPage(deps, ctx, req, { hierarchy, filter, tokenKey: [req.relationshipType] }, kind === null ? NOTHING : LIST);
      return { $typeName: "platformapi.iam.v2beta1.ListIdentitiesResponse", identities: page.items.map(identityMessage), ...page.envelope };
    },

    async updateIdentity(req, ctx) {
      const input = req.identity ?? create(IdentitySchema);
      const uid = requireUidp("identity.uid", input.uid);
      const now = deps.now();
      const fields = fieldsToUpdate(IdentitySchema, input, req.updateMask, UPDATABLE);
      const relFields = UPDATABLE.filter((f) => (f === "claim_match" || f === "static_keys") && fields.has(f));
      // Self-widening: an identity must not rewrite how its own tokens are matched.
      if (relFields.length > 0) {
        const principal = principalOf(ctx);
        if (principal.subject === uid) {
          throw new PermissionDeniedError(
            "Permission denied: an identity cannot change the relationship of the identity it is authenticated as",
          );
        }
        // Re-pointing which tokens assume an identity hands its role bindings to
        // their holder: the caller must hold what each binding grants, as if
        // binding it afresh.
        for (const binding of await store.roleBindings.forIdentity(uid)) {
          const role = await store.roles.get(binding.roleUid);
          requireNoEscalation(role?.capabilities ?? [], await deps.authz.capabilitiesAt(principal, binding.groupUid), binding.groupUid);
        }
      }
      const violations = checkText(input, fields);
      const changes: IdentityChanges = {};
      if (relFields.length > 0) {
        const chosen = input.relationship.case;
        if (chosen === undefined || !relFields.includes(RELATIONSHIP_FIELDS[chosen])) {
          violations.push({ field: relFields[0]!, description: "is required when update_mask names it" });
        } else {
          const rel = relationshipOf(input, now, deps.issuerPolicy);
          violations.push(...rel.violations);
          if (rel.relationship) changes.relationship = rel.relationship;
        }
      }
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      if (fields.has("company")) changes.company = input.company;
      return withEvents(
        deps,
        ctx,
        async (tx) => identityMessage(await tx.identities.update(uid, changes, now)),
        (identity) => [{ kind: "identity", action: "updated", subject: uid, resource: { schema: IdentitySchema, message: identity } }],
      );
    },

    async deleteIdentity(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.identities.delete(uid),
        () => [{ kind: "identity", action: "deleted", subject: uid }],
      );
      return {};
    },

    async lookupIdentity(req) {
      const violations: FieldViolation[] = [];
      if (req.issuer === "") violations.push({ field: "issuer", description: "is required" });
      if (req.subject === "") violations.push({ field: "subject", description: "is required" });
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      return { $typeName: "platformapi.iam.v2beta1.LookupIdentityResponse", uid: userIdentityUid(req.issuer, req.subject) };
    },
  };
}
