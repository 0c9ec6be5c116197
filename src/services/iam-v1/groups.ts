import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import type { GroupsService } from "../../../gen/platformapi/iam/v1/groups_pb.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import type { GroupRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { v1ListQuery } from "../paging/paging.js";

/** The v1 group shape: id in place of uid, no timestamps. */
function v1Group(g: GroupRecord) {
  return { id: g.uid, name: g.name, description: g.description, resourceLimits: g.resourceLimits, verified: g.verified };
}

/** v1 GroupsService: the list still served at GET /iam/v1/groups, for clients of v1 ({items}, each group with `id`). */
export function createGroupsV1Service(deps: ServiceDeps): ServiceImpl<typeof GroupsService> {
  return {
    async listGroups(req, ctx) {
      const id = req.id === "" ? null : requireUidp("id", req.id);
      const visible = await deps.authz.visibleWithin(principalOf(ctx), Capability.CAP_IAM_GROUPS_LIST);
      const result = await deps.store.groups.list(
        v1ListQuery(hierarchyFilter(req.uidp), id, req.name === "" ? {} : { name: req.name }, visible),
      );
      return { items: result.items.map(v1Group) };
    },
  };
}
