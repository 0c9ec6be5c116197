import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { TagSchema, type ListTagsResponse, type Tag, type TagsService } from "../../../gen/platformapi/registry/v2beta1/tags_pb.js";
import { InvalidArgumentError, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkBundles, checkDigest, checkTagName } from "../../domain/registry-names.js";
import { newChildUid, parentOf } from "../../domain/uidp.js";
import type { TagFilter, TagOrder, TagRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";

const PAGING: PagingSpec<TagOrder> = {
  orderFields: ["uid", "name", "updated_at"],
  defaultOrder: "uid",
};

/** The API shape of a stored tag; tags have an update time only. */
export function tagMessage(t: TagRecord): Tag {
  return create(TagSchema, {
    uid: t.uid,
    name: t.name,
    digest: t.digest,
    deprecated: t.deprecated,
    bundles: t.bundles,
    updateTime: timestampFromMs(t.updateTime),
  });
}

/** The keyset position of a tag in a given order. */
function tagCursor(t: TagRecord, field: TagOrder) {
  const key = field === "name" ? t.name : field === "updated_at" ? t.updateTime : t.uid;
  return { key, uid: t.uid };
}

/**
 * TagsService: the tags of a repo; CreateTag creates or updates by name
 * under its repo. Creating needs CAP_TAG_CREATE (the method's rule);
 * re-pointing a tag that exists needs CAP_TAG_UPDATE as well.
 */
export function createTagsService(deps: ServiceDeps): ServiceImpl<typeof TagsService> {
  const { store } = deps;
  const LIST: ListSpec<TagRecord, TagFilter, TagOrder> = {
    name: "tags",
    paging: PAGING,
    capability: Capability.CAP_TAG_LIST,
    list: (q, signal) => store.tags.list(q, signal),
    cursor: tagCursor,
  };
  return {
    async createTag(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.tag ?? create(TagSchema);
      const violations: FieldViolation[] = [
        ...checkTagName("name", input.name),
        ...checkDigest("digest", input.digest),
        ...checkBundles("bundles", input.bundles),
      ];
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const record: TagRecord = {
        uid: newChildUid(parent),
        repoUid: parent,
        name: input.name,
        digest: input.digest,
        deprecated: input.deprecated,
        bundles: input.bundles,
        updateTime: deps.now(),
      };
      const mayUpdate = await deps.authz.holds(principalOf(ctx), [Capability.CAP_TAG_UPDATE], parent);
      const { tag } = await withEvents(
        deps,
        ctx,
        (tx) => tx.tags.put(record, { mayUpdate }),
        ({ tag, created }) => [
          // A tag belongs to its repo's group: that is where tag.list decides who sees it.
          {
            kind: "tag",
            action: created ? "created" : "updated",
            subject: tag.uid,
            groupUid: parentOf(parent) ?? parent,
            resource: { schema: TagSchema, message: tagMessage(tag) },
          },
        ],
      );
      return tagMessage(tag);
    },

    async getTag(req) {
      const uid = requireUidp("uid", req.uid);
      const tag = await store.tags.get(uid);
      if (!tag) throw new NotFoundError("tag", uid);
      return tagMessage(tag);
    },

    async listTags(req, ctx): Promise<ListTagsResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      // A malformed digest could match nothing: say so instead of listing nothing.
      const badDigest = req.digest === "" ? [] : checkDigest("digest", req.digest);
      if (badDigest.length > 0) throw new InvalidArgumentError(badDigest);
      const filter: TagFilter = {
        includeReferrers: req.includeReferrers,
        includeDates: req.includeDates,
        includeEpochs: req.includeEpochs,
      };
      if (req.name !== "") filter.name = req.name;
      if (req.digest !== "") filter.digest = req.digest;
      // Times are stored in whole milliseconds: "after" a fractional one is after its floor.
      if (req.updatedSince) filter.updatedSince = Number(req.updatedSince.seconds) * 1000 + Math.floor(req.updatedSince.nanos / 1e6);
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return { $typeName: "platformapi.registry.v2beta1.ListTagsResponse", tags: page.items.map(tagMessage), ...page.envelope };
    },

    async deleteTag(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.tags.delete(uid),
        // A tag belongs to its repo's group.
        () => [{ kind: "tag", action: "deleted", subject: uid, groupUid: parentOf(parentOf(uid) ?? uid) ?? uid }],
      );
      return {};
    },
  };
}
