import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  IdentityProviderSchema,
  OIDCSchema,
  type IdentityProvider,
  type IdentityProvidersService,
  type ListIdentityProvidersResponse,
} from "../../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import { InvalidArgumentError, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription, checkName } from "../../domain/names.js";
import { isUidp, newChildUid } from "../../domain/uidp.js";
import type { IdentityProviderChanges, IdentityProviderFilter, IdentityProviderOrder, IdentityProviderRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";
import { checkOidc, OIDC_PATHS, oidcSettingsOf, updatedOidc } from "./oidc-settings.js";
import { grantableRole } from "./role-refs.js";

const PAGING: PagingSpec<IdentityProviderOrder> = {
  orderFields: ["uid", "name", "created_at", "updated_at"],
  defaultOrder: "uid",
};
const TOP_LEVEL = ["name", "description", "default_role", "oidc"] as const;
const UPDATABLE = [...TOP_LEVEL, ...OIDC_PATHS];

/** The API shape of a stored provider. The client secret is write-only and never leaves the store. */
function identityProviderMessage(p: IdentityProviderRecord): IdentityProvider {
  const o = p.oidc;
  return create(IdentityProviderSchema, {
    uid: p.uid,
    name: p.name,
    description: p.description,
    defaultRole: p.defaultRole,
    createTime: timestampFromMs(p.createTime),
    updateTime: timestampFromMs(p.updateTime),
    configuration: {
      case: "oidc",
      value: create(OIDCSchema, {
        issuer: o.issuer,
        clientId: o.clientId,
        additionalScopes: o.additionalScopes,
        groupsClaim: o.groupsClaim,
        correlationRule: o.correlationRule,
        pkceEnabled: o.pkceEnabled,
      }),
    },
  });
}

/** The keyset position of a provider in a given order. */
function identityProviderCursor(p: IdentityProviderRecord, field: IdentityProviderOrder) {
  const key = field === "name" ? p.name : field === "created_at" ? p.createTime : field === "updated_at" ? p.updateTime : p.uid;
  return { key, uid: p.uid };
}

function checkText(input: IdentityProvider, fields: ReadonlySet<string>): FieldViolation[] {
  const out: FieldViolation[] = [];
  if (fields.has("name")) out.push(...checkName("name", input.name));
  if (fields.has("description")) out.push(...checkDescription("description", input.description));
  if (fields.has("default_role") && !isUidp(input.defaultRole)) {
    out.push({ field: "default_role", description: input.defaultRole === "" ? "is required" : "must be a role uid" });
  }
  return out;
}

/** IdentityProvidersService: an organization's own OIDC sign-in providers. */
export function createIdentityProvidersService(deps: ServiceDeps): ServiceImpl<typeof IdentityProvidersService> {
  const { store, authz } = deps;
  const LIST: ListSpec<IdentityProviderRecord, IdentityProviderFilter, IdentityProviderOrder> = {
    name: "identityProviders",
    paging: PAGING,
    capability: Capability.CAP_IAM_IDENTITY_PROVIDERS_LIST,
    list: (q, signal) => store.identityProviders.list(q, signal),
    cursor: identityProviderCursor,
  };

  async function existing(uid: string): Promise<IdentityProviderRecord> {
    const provider = await store.identityProviders.get(uid);
    if (!provider) throw new NotFoundError("identity provider", uid);
    return provider;
  }

  return {
    async createIdentityProvider(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.identityProvider ?? create(IdentityProviderSchema);
      const oidc = oidcSettingsOf(input);
      const violations = [
        ...checkText(input, new Set(TOP_LEVEL)),
        ...(oidc ? checkOidc("oidc", oidc, deps.issuerPolicy) : [{ field: "oidc", description: "is required" }]),
      ];
      if (violations.length > 0 || !oidc) throw new InvalidArgumentError(violations);
      await grantableRole(store, authz, principalOf(ctx), input.defaultRole, parent);
      const now = deps.now();
      const record: IdentityProviderRecord = {
        uid: newChildUid(parent),
        parentUid: parent,
        name: input.name,
        description: input.description,
        defaultRole: input.defaultRole,
        oidc,
        createTime: now,
        updateTime: now,
      };
      const message = identityProviderMessage(record);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.identityProviders.create(record),
        () => [{ kind: "identityProvider", action: "created", subject: record.uid, resource: { schema: IdentityProviderSchema, message } }],
      );
      return message;
    },

    async getIdentityProvider(req) {
      return identityProviderMessage(await existing(requireUidp("uid", req.uid)));
    },

    async listIdentityProviders(req, ctx): Promise<ListIdentityProvidersResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = req.name === "" ? {} : { name: req.name };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return {
        $typeName: "platformapi.iam.v2beta1.ListIdentityProvidersResponse",
        identityProviders: page.items.map(identityProviderMessage),
        ...page.envelope,
      };
    },

    async updateIdentityProvider(req, ctx) {
      const input = req.identityProvider ?? create(IdentityProviderSchema);
      const uid = requireUidp("identity_provider.uid", input.uid);
      const paths = req.updateMask?.paths ?? [];
      // "*" replaces every field, but like a body "oidc" key it keeps a secret left empty.
      const fields =
        paths.length === 1 && paths[0] === "*"
          ? new Set<string>(TOP_LEVEL)
          : fieldsToUpdate(IdentityProviderSchema, input, req.updateMask, UPDATABLE);
      const current = await existing(uid);
      const violations = checkText(input, fields);
      const changes: IdentityProviderChanges = {};
      const oidc = updatedOidc(current.oidc, oidcSettingsOf(input), fields, deps.issuerPolicy);
      if (oidc.violations.length > 0) violations.push(...oidc.violations);
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      if (oidc.settings) {
        changes.oidc = oidc.settings;
        // Whoever can point the provider at another issuer or client decides who
        // signs in with its default role: they must be able to grant that role.
        const retargeted = oidc.settings.issuer !== current.oidc.issuer || oidc.settings.clientId !== current.oidc.clientId;
        if (retargeted && !(fields.has("default_role") && input.defaultRole !== current.defaultRole)) {
          await grantableRole(store, authz, principalOf(ctx), current.defaultRole, current.parentUid);
        }
      }
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      if (fields.has("default_role") && input.defaultRole !== current.defaultRole) {
        await grantableRole(store, authz, principalOf(ctx), input.defaultRole, current.parentUid);
        changes.defaultRole = input.defaultRole;
      }
      return withEvents(
        deps,
        ctx,
        async (tx) => identityProviderMessage(await tx.identityProviders.update(uid, changes, deps.now())),
        (message) => [{ kind: "identityProvider", action: "updated", subject: uid, resource: { schema: IdentityProviderSchema, message } }],
      );
    },

    async deleteIdentityProvider(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.identityProviders.delete(uid),
        () => [{ kind: "identityProvider", action: "deleted", subject: uid }],
      );
      return {};
    },
  };
}
