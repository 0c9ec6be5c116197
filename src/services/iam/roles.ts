import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { RoleSchema, type ListRolesResponse, type Role, type RolesService } from "../../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { normalizeCapabilities } from "../../domain/builtin-roles.js";
import { checkRoleCapabilities, requireNoEscalation } from "../../domain/capabilities.js";
import {
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  type FieldViolation,
} from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription, checkRoleName } from "../../domain/names.js";
import { newChildUid, parentOf } from "../../domain/uidp.js";
import type { RoleChanges, RoleFilter, RoleOrder, RoleRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";

const PAGING: PagingSpec<RoleOrder> = {
  orderFields: ["uid", "name", "created_at", "updated_at"],
  defaultOrder: "uid",
};
const UPDATABLE = ["name", "description", "capabilities"] as const;

/** The API shape of a stored role. */
function roleMessage(r: RoleRecord): Role {
  return create(RoleSchema, {
    uid: r.uid,
    name: r.name,
    description: r.description,
    capabilities: r.capabilities as Capability[],
    createTime: timestampFromMs(r.createTime),
    updateTime: timestampFromMs(r.updateTime),
  });
}

/** The keyset position of a role in a given order. */
function roleCursor(r: RoleRecord, field: RoleOrder) {
  const key = field === "name" ? r.name : field === "created_at" ? r.createTime : field === "updated_at" ? r.updateTime : r.uid;
  return { key, uid: r.uid };
}

function validateFields(role: Role, fields: Iterable<string>): void {
  const violations: FieldViolation[] = [];
  for (const f of fields) {
    if (f === "name") violations.push(...checkRoleName("name", role.name));
    if (f === "description") violations.push(...checkDescription("description", role.description));
    if (f === "capabilities") violations.push(...checkRoleCapabilities("capabilities", role.capabilities));
  }
  if (violations.length > 0) throw new InvalidArgumentError(violations);
}

/** Built-in (managed) roles are root-level records, the same on every installation, and never change. */
function refuseBuiltIn(role: RoleRecord, action: "changed" | "deleted"): void {
  if (role.parentUid !== null) return;
  throw new FailedPreconditionError([
    { type: "BUILT_IN_ROLE", subject: role.uid, description: `the built-in role ${role.name} cannot be ${action}` },
  ]);
}

/** RolesService: built-in and custom roles, listed together. */
export function createRolesService(deps: ServiceDeps): ServiceImpl<typeof RolesService> {
  const { store } = deps;
  const LIST: ListSpec<RoleRecord, RoleFilter, RoleOrder> = {
    name: "roles",
    paging: PAGING,
    capability: Capability.CAP_IAM_ROLES_LIST,
    list: (q, signal) => store.roles.list(q, signal),
    cursor: roleCursor,
  };

  /** The existing role, or NOT_FOUND. */
  async function existing(uid: string): Promise<RoleRecord> {
    const role = await store.roles.get(uid);
    if (!role) throw new NotFoundError("role", uid);
    return role;
  }

  return {
    async createRole(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.role ?? create(RoleSchema);
      validateFields(input, UPDATABLE);
      const capabilities = normalizeCapabilities(input.capabilities);
      requireNoEscalation(capabilities, await deps.authz.capabilitiesAt(principalOf(ctx), parent), parent);
      const now = deps.now();
      const record: RoleRecord = {
        uid: newChildUid(parent),
        parentUid: parent,
        name: input.name,
        description: input.description,
        capabilities,
        createTime: now,
        updateTime: now,
      };
      const role = roleMessage(record);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.roles.create(record),
        () => [{ kind: "role", action: "created", subject: record.uid, groupUid: parent, resource: { schema: RoleSchema, message: role } }],
      );
      return role;
    },

    async getRole(req, ctx) {
      // GetRole is unscoped so built-in roles are readable; custom roles are
      // authorized here, before the lookup, so a missing and a forbidden uid
      // get the same answer.
      const uid = requireUidp("uid", req.uid);
      const principal = principalOf(ctx);
      const group = parentOf(uid);
      if (group === null) {
        const within = await deps.authz.visibleWithin(principal, Capability.CAP_IAM_ROLES_LIST);
        if (within !== null && within.length === 0) throw new PermissionDeniedError();
      } else {
        await deps.authz.require(principal, [Capability.CAP_IAM_ROLES_LIST], group);
      }
      return roleMessage(await existing(uid));
    },

    async listRoles(req, ctx): Promise<ListRolesResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = req.name === "" ? {} : { name: req.name };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return { $typeName: "platformapi.iam.v2beta1.ListRolesResponse", roles: page.items.map(roleMessage), ...page.envelope };
    },

    async updateRole(req, ctx) {
      const input = req.role ?? create(RoleSchema);
      const uid = requireUidp("role.uid", input.uid);
      const fields = fieldsToUpdate(RoleSchema, input, req.updateMask, UPDATABLE);
      const current = await existing(uid);
      refuseBuiltIn(current, "changed");
      const group = current.parentUid!;
      validateFields(input, fields);
      const changes: RoleChanges = {};
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      if (fields.has("capabilities")) {
        changes.capabilities = normalizeCapabilities(input.capabilities);
        requireNoEscalation(changes.capabilities, await deps.authz.capabilitiesAt(principalOf(ctx), group), group);
      }
      return withEvents(
        deps,
        ctx,
        async (tx) => roleMessage(await tx.roles.update(uid, changes, deps.now())),
        (role) => [{ kind: "role", action: "updated", subject: uid, groupUid: group, resource: { schema: RoleSchema, message: role } }],
      );
    },

    async deleteRole(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      const current = await existing(uid);
      refuseBuiltIn(current, "deleted");
      await withEvents(
        deps,
        ctx,
        (tx) => tx.roles.delete(uid),
        () => [{ kind: "role", action: "deleted", subject: uid, groupUid: current.parentUid! }],
      );
      return {};
    },
  };
}
