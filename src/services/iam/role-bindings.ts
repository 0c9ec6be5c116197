import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  BatchCreateRoleBindingsResponseSchema,
  RoleBindingSchema,
  type ListRoleBindingsResponse,
  type RoleBindingsService,
} from "../../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import type { Principal } from "../../auth/principal.js";
import { requireNoEscalation } from "../../domain/capabilities.js";
import { InvalidArgumentError, invalidField, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { isAtOrBelow, isUidp, newChildUid, parentOf } from "../../domain/uidp.js";
import type { IdentityRecord, RoleBindingFilter, RoleBindingOrder, RoleBindingRecord, RoleRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { createHydrator, roleBindingCreated, roleBindingMessage, type BindingRefs } from "./hydrate.js";

const PAGING: PagingSpec<RoleBindingOrder> = { orderFields: ["uid", "created_at"], defaultOrder: "uid" };
const UPDATABLE = ["identity_uid", "role_uid"] as const;
/** BatchCreateRoleBindings takes at most this many requests, the contract's limit (more is INVALID_ARGUMENT). */
const MAX_BATCH = 25;

/** The keyset position of a binding in a given order. */
function roleBindingCursor(b: RoleBindingRecord, field: RoleBindingOrder) {
  return { key: field === "created_at" ? b.createTime : b.uid, uid: b.uid };
}

/** Violations of a required uid-path field. */
function checkUid(field: string, value: string): FieldViolation[] {
  if (isUidp(value)) return [];
  return [
    { field, description: value === "" ? "is required" : 'must be a uid path: 40 lowercase hex characters, then "/" and 16 hex per level' },
  ];
}

/** RoleBindingsService: grants of a role to an identity in a group. */
export function createRoleBindingsService(deps: ServiceDeps): ServiceImpl<typeof RoleBindingsService> {
  const { store, authz } = deps;
  const LIST: ListSpec<RoleBindingRecord, RoleBindingFilter, RoleBindingOrder> = {
    name: "roleBindings",
    paging: PAGING,
    capability: Capability.CAP_IAM_ROLE_BINDINGS_LIST,
    list: (q, signal) => store.roleBindings.list(q, signal),
    cursor: roleBindingCursor,
  };

  // A missing reference and one the caller may not see give the same NOT_FOUND,
  // so a binding request never reveals what exists in another organization.
  // A person (a root-level uid, as LookupIdentity predicts it) is bindable
  // whether or not they have signed up, with the same answer either way: the
  // record is returned for hydration, which shows it only to callers who may
  // read it. A group's identity is bindable only where the caller can list it.
  async function bindableIdentity(principal: Principal, uid: string): Promise<IdentityRecord | null> {
    const identity = await store.identities.get(uid);
    if (parentOf(uid) === null) return identity;
    if (identity && (await authz.holds(principal, [Capability.CAP_IAM_IDENTITY_LIST], identity.uid))) return identity;
    throw new NotFoundError("identity", uid);
  }

  /** GetIdentity's rule: an identity's own fields are for itself and for holders of CAP_IAM_IDENTITY_LIST at it. */
  const readableBy = (principal: Principal) => async (uid: string) =>
    principal.subject === uid || (await authz.holds(principal, [Capability.CAP_IAM_IDENTITY_LIST], uid));

  async function bindableRole(uid: string, group: string): Promise<RoleRecord> {
    const role = await store.roles.get(uid);
    // Built-in roles bind anywhere; a custom role only at or below the group that defines it.
    if (role && (role.parentUid === null || isAtOrBelow(role.parentUid, group))) return role;
    throw new NotFoundError("role", uid);
  }

  /** Every check of a new binding: the group, both references, no escalation. */
  async function prepare(principal: Principal, group: string, identityUid: string, roleUid: string, now: number) {
    const groupRecord = await store.groups.get(group);
    if (!groupRecord) throw new NotFoundError("group", group);
    const identity = await bindableIdentity(principal, identityUid);
    const role = await bindableRole(roleUid, group);
    requireNoEscalation(role.capabilities, await authz.capabilitiesAt(principal, group), group);
    const record: RoleBindingRecord = { uid: newChildUid(group), groupUid: group, identityUid, roleUid, createTime: now };
    const refs: BindingRefs = {
      group: groupRecord,
      identity: identity && (await readableBy(principal)(identityUid)) ? identity : null,
      role,
    };
    return { record, refs };
  }

  return {
    async createRoleBinding(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const identityUid = req.roleBinding?.identityUid ?? "";
      const roleUid = req.roleBinding?.roleUid ?? "";
      const violations = [...checkUid("identity_uid", identityUid), ...checkUid("role_uid", roleUid)];
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const { record, refs } = await prepare(principalOf(ctx), parent, identityUid, roleUid, deps.now());
      await withEvents(
        deps,
        ctx,
        (tx) => tx.roleBindings.create([record]),
        () => [roleBindingCreated(record)],
      );
      return roleBindingMessage(record, refs);
    },

    async batchCreateRoleBindings(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      if (req.requests.length === 0 || req.requests.length > MAX_BATCH)
        throw invalidField("requests", `must hold 1 to ${MAX_BATCH} requests`);
      const violations = req.roleUid === "" ? [] : checkUid("role_uid", req.roleUid);
      const items = req.requests.map((sub, i) => {
        const at = `requests[${i}]`;
        const identityUid = sub.roleBinding?.identityUid ?? "";
        const ownRole = sub.roleBinding?.roleUid ?? "";
        violations.push(...checkUid(`${at}.parent`, sub.parent));
        if (isUidp(sub.parent) && !isAtOrBelow(parent, sub.parent)) {
          violations.push({ field: `${at}.parent`, description: `must be the batch parent ${parent} or a group below it` });
        }
        violations.push(...checkUid(`${at}.role_binding.identity_uid`, identityUid));
        if (ownRole !== "" && req.roleUid !== "" && ownRole !== req.roleUid) {
          violations.push({ field: `${at}.role_binding.role_uid`, description: `differs from the batch role_uid ${req.roleUid}` });
        } else if (ownRole !== "" || req.roleUid === "") {
          violations.push(...checkUid(`${at}.role_binding.role_uid`, ownRole));
        }
        return { parent: sub.parent, identityUid, roleUid: ownRole === "" ? req.roleUid : ownRole };
      });
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const principal = principalOf(ctx);
      // The wrapper checked the batch parent only.
      for (const sub of new Set(items.map((it) => it.parent)))
        await authz.require(principal, [Capability.CAP_IAM_ROLE_BINDINGS_CREATE], sub);
      const now = deps.now();
      const prepared: Awaited<ReturnType<typeof prepare>>[] = [];
      for (const it of items) prepared.push(await prepare(principal, it.parent, it.identityUid, it.roleUid, now));
      const records = prepared.map((p) => p.record);
      // One event for the batch (the contract's rolebindings.created.batch), naming the bindings by uid only.
      const batch = create(BatchCreateRoleBindingsResponseSchema, {
        roleBindings: records.map((r) => roleBindingMessage(r, { identity: null, group: null, role: null })),
      });
      await withEvents(
        deps,
        ctx,
        (tx) => tx.roleBindings.create(records),
        () => [
          {
            kind: "roleBinding",
            action: "created.batch",
            subject: parent,
            groupUid: parent,
            resource: { schema: BatchCreateRoleBindingsResponseSchema, message: batch },
          },
        ],
      );
      return {
        $typeName: "platformapi.iam.v2beta1.BatchCreateRoleBindingsResponse",
        roleBindings: prepared.map((p) => roleBindingMessage(p.record, p.refs)),
      };
    },

    async getRoleBinding(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      const binding = await store.roleBindings.get(uid);
      if (!binding) throw new NotFoundError("role binding", uid);
      return createHydrator(store, readableBy(principalOf(ctx)))(binding);
    },

    async listRoleBindings(req, ctx): Promise<ListRoleBindingsResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter: RoleBindingFilter = {};
      const violations: FieldViolation[] = [];
      for (const [field, value, key] of [
        ["identity", req.identity, "identityUid"],
        ["group", req.group, "groupUid"],
        ["role", req.role, "roleUid"],
      ] as const) {
        if (value === "") continue;
        violations.push(...checkUid(field, value));
        filter[key] = value;
      }
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const principal = principalOf(ctx);
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return {
        $typeName: "platformapi.iam.v2beta1.ListRoleBindingsResponse",
        roleBindings: await Promise.all(page.items.map(createHydrator(store, readableBy(principal)))),
        ...page.envelope,
      };
    },

    async updateRoleBinding(req, ctx) {
      const input = req.roleBinding ?? create(RoleBindingSchema);
      const uid = requireUidp("role_binding.uid", input.uid);
      const fields = fieldsToUpdate(RoleBindingSchema, input, req.updateMask, UPDATABLE);
      const violations = [
        ...(fields.has("identity_uid") ? checkUid("identity_uid", input.identityUid) : []),
        ...(fields.has("role_uid") ? checkUid("role_uid", input.roleUid) : []),
      ];
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const current = await store.roleBindings.get(uid);
      if (!current) throw new NotFoundError("role binding", uid);
      const principal = principalOf(ctx);
      const hydrate = createHydrator(store, readableBy(principal));
      if (fields.size === 0) return hydrate(current);
      const changes: Partial<Pick<RoleBindingRecord, "identityUid" | "roleUid">> = {};
      if (fields.has("identity_uid")) {
        await bindableIdentity(principal, input.identityUid);
        changes.identityUid = input.identityUid;
      }
      const role = fields.has("role_uid") ? await bindableRole(input.roleUid, current.groupUid) : await store.roles.get(current.roleUid);
      if (fields.has("role_uid")) changes.roleUid = input.roleUid;
      // Pointing a binding at a new identity grants the role afresh: the same no-escalation rule applies.
      requireNoEscalation(role?.capabilities ?? [], await authz.capabilitiesAt(principal, current.groupUid), current.groupUid);
      const updated = await withEvents(
        deps,
        ctx,
        (tx) => tx.roleBindings.update(uid, changes),
        (b) => [{ ...roleBindingCreated(b), action: "updated" }],
      );
      return hydrate(updated);
    },

    async deleteRoleBinding(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.roleBindings.delete(uid),
        (deleted) => (deleted ? [{ kind: "roleBinding", action: "deleted", subject: uid }] : []),
      );
      return {};
    },
  };
}
