import { create } from "@bufbuild/protobuf";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { GroupSchema, type Group, type GroupsService, type ListGroupsResponse } from "../../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { builtinRoleUid } from "../../domain/builtin-roles.js";
import { ApiError, InvalidArgumentError, NotFoundError } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription, checkName } from "../../domain/names.js";
import { newChildUid, newRootUid } from "../../domain/uidp.js";
import type { GroupChanges, GroupFilter, GroupOrder, GroupRecord, RoleBindingRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { insertWithEvents, withEvents, type Change } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";
import { roleBindingCreated } from "./hydrate.js";

const PAGING: PagingSpec<GroupOrder> = {
  orderFields: ["uid", "name", "created_at", "updated_at"],
  defaultOrder: "uid",
};
const UPDATABLE = ["name", "description"] as const;

/** The API shape of a stored group. */
export function groupMessage(g: GroupRecord): Group {
  // A plain message object (every field set): lists build one per item.
  return {
    $typeName: "platformapi.iam.v2beta1.Group",
    uid: g.uid,
    name: g.name,
    description: g.description,
    resourceLimits: g.resourceLimits,
    verified: g.verified,
    createTime: timestampFromMs(g.createTime),
    updateTime: timestampFromMs(g.updateTime),
  };
}

/** The keyset position of a group in a given order. */
function groupCursor(g: GroupRecord, field: GroupOrder) {
  const key = field === "name" ? g.name : field === "created_at" ? g.createTime : field === "updated_at" ? g.updateTime : g.uid;
  return { key, uid: g.uid };
}

function validateFields(group: { name: string; description: string }, fields: Iterable<string>): void {
  const violations = [];
  for (const f of fields) {
    if (f === "name") violations.push(...checkName("name", group.name));
    if (f === "description") violations.push(...checkDescription("description", group.description));
  }
  if (violations.length > 0) throw new InvalidArgumentError(violations);
}

/** ErrorInfo reason of a root organization refused by the per-identity quota. */
export const ORGANIZATION_QUOTA_EXCEEDED = "ORGANIZATION_QUOTA_EXCEEDED";

/**
 * RESOURCE_EXHAUSTED (HTTP 429): the caller already created `limit` root
 * organizations that still exist. Metadata names the quota and its limit,
 * as google.rpc.QuotaFailure would.
 */
function organizationQuotaExceeded(limit: number): ApiError {
  return new ApiError(
    Code.ResourceExhausted,
    ORGANIZATION_QUOTA_EXCEEDED,
    `Resource exhausted: this identity has created ${limit} organizations, the most one identity may; delete one first`,
    { metadata: { quota: "organizations_per_identity", limit: String(limit) } },
  );
}

/** GroupsService: organizations (root groups) and the folders below them. */
export function createGroupsService(deps: ServiceDeps): ServiceImpl<typeof GroupsService> {
  const { store } = deps;
  const LIST: ListSpec<GroupRecord, GroupFilter, GroupOrder> = {
    name: "groups",
    paging: PAGING,
    capability: Capability.CAP_IAM_GROUPS_LIST,
    list: (q, signal) => store.groups.list(q, signal),
    cursor: groupCursor,
  };
  return {
    async createGroup(req, ctx) {
      const principal = principalOf(ctx);
      const parent = req.parent === "" ? null : requireUidp("parent", req.parent);
      // A root organization needs only a signed-in caller; a folder needs
      // groups.create at its parent, checked before the parent is looked up.
      if (parent !== null) await deps.authz.require(principal, [Capability.CAP_IAM_GROUPS_CREATE], parent);
      const input = req.group ?? create(GroupSchema);
      validateFields(input, ["name", "description"]);
      const now = deps.now();
      const record: GroupRecord = {
        uid: parent === null ? newRootUid() : newChildUid(parent),
        parentUid: parent,
        name: input.name,
        description: input.description,
        verified: false,
        resourceLimits: {},
        createTime: now,
        updateTime: now,
      };
      const created: Change<typeof GroupSchema> = {
        kind: "group",
        action: "created",
        subject: record.uid,
        groupUid: record.uid,
        resource: { schema: GroupSchema, message: groupMessage(record) },
      };
      if (parent === null && !principal.admin) {
        // The creator of an organization owns it (the administrator needs no binding): both or neither.
        // The quota is counted in the same transaction, so concurrent creates cannot pass it together.
        const owner: RoleBindingRecord = {
          uid: newChildUid(record.uid),
          groupUid: record.uid,
          identityUid: principal.subject,
          roleUid: builtinRoleUid("owner"),
          createTime: now,
        };
        await withEvents(
          deps,
          ctx,
          async (tx) => {
            if ((await tx.groups.rootsCreatedBy(principal.subject)) >= deps.maxOrgsPerIdentity) {
              throw organizationQuotaExceeded(deps.maxOrgsPerIdentity);
            }
            await tx.groups.createRoot(record, principal.subject);
            await tx.roleBindings.create([owner]);
          },
          () => [created, roleBindingCreated(owner)],
        );
      } else {
        // One INSERT, its constraints deciding: its event rides in the same statement where the engine can.
        await insertWithEvents(deps, ctx, (parts) => parts.groups.create(record), [created]);
      }
      return groupMessage(record);
    },

    async getGroup(req) {
      const uid = requireUidp("uid", req.uid);
      const group = await store.groups.get(uid);
      if (!group) throw new NotFoundError("group", uid);
      return groupMessage(group);
    },

    async listGroups(req, ctx): Promise<ListGroupsResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = req.name === "" ? {} : { name: req.name };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return { $typeName: "platformapi.iam.v2beta1.ListGroupsResponse", groups: page.items.map(groupMessage), ...page.envelope };
    },

    async updateGroup(req, ctx) {
      const input = req.group ?? create(GroupSchema);
      const uid = requireUidp("group.uid", input.uid);
      const fields = fieldsToUpdate(GroupSchema, input, req.updateMask, UPDATABLE);
      validateFields(input, fields);
      const changes: GroupChanges = {};
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      const updated = await withEvents(
        deps,
        ctx,
        async (tx) => groupMessage(await tx.groups.update(uid, changes, deps.now())),
        (group) => [{ kind: "group", action: "updated", subject: uid, groupUid: uid, resource: { schema: GroupSchema, message: group } }],
      );
      return updated;
    },

    async deleteGroup(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.groups.delete(uid),
        () => [{ kind: "group", action: "deleted", subject: uid, groupUid: uid }],
      );
      return {};
    },
  };
}
