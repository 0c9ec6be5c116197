import { getOption } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { GroupCapabilitiesSchema, type AuthService, type GroupCapabilities } from "../../../gen/platform/auth/v1/auth_pb.js";
import { CapabilitySchema, name as capabilityNameOption } from "../../../gen/platform/capabilities/v1/capabilities_pb.js";
import { NotFoundError } from "../../domain/errors.js";
import type { GroupRecord, RoleRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { identityMessage } from "../iam/identity-messages.js";

/** A capability's human name ("repo.list"), as v1 roles and WhoAmI write it. */
export function capabilityHumanName(c: number): string {
  const value = CapabilitySchema.value[c as keyof typeof CapabilitySchema.value];
  return value ? getOption(value, capabilityNameOption) || value.name : String(c);
}

function v1Group(g: GroupRecord) {
  return { id: g.uid, name: g.name, description: g.description, resourceLimits: g.resourceLimits, verified: g.verified };
}

function v1Role(r: RoleRecord) {
  return { id: r.uid, name: r.name, description: r.description, capabilities: r.capabilities.map(capabilityHumanName) };
}

/**
 * AuthService: who the caller is (GET /auth/v1/ok) and registration
 * (POST /auth/v1/register). People are registered when they first sign in
 * through /sts/exchange; Register confirms that and, with an invite code,
 * joins the invite's group.
 */
export function createAuthService(deps: ServiceDeps): ServiceImpl<typeof AuthService> {
  const { store } = deps;
  return {
    validate(_req, ctx) {
      const principal = principalOf(ctx);
      const capabilities: GroupCapabilities[] = [];
      for (const binding of store.roleBindings.forIdentity(principal.subject)) {
        const group = store.groups.get(binding.groupUid);
        const role = store.roles.get(binding.roleUid);
        if (group && role) capabilities.push(create(GroupCapabilitiesSchema, { group: v1Group(group), role: v1Role(role) }));
      }
      const identity = store.identities.get(principal.subject);
      return {
        issuer: principal.token.issuer,
        subject: principal.subject,
        audience: principal.token.audience,
        expiry: timestampFromMs(principal.token.expiresAt),
        issuedAt: timestampFromMs(principal.token.issuedAt),
        capabilities,
        email: identity?.email ?? "",
      };
    },

    register(req, ctx) {
      const principal = principalOf(ctx);
      const identity = store.identities.get(principal.subject);
      if (!identity) throw new NotFoundError("identity", principal.subject);
      // TODO: accept group invite codes (issue 4: GroupInvitesService); until
      // invites exist no code can be valid.
      if (req.code !== "") throw new NotFoundError("invite", "code");
      return { identity: identityMessage(identity), group: undefined };
    },
  };
}
