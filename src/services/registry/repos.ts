import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  CatalogTier,
  RepoSchema,
  type ListReposResponse,
  type Repo,
  type ReposService,
} from "../../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, type FieldViolation } from "../../domain/errors.js";
import { fieldsToUpdate } from "../../domain/field-mask.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { checkDescription } from "../../domain/names.js";
import { checkActiveTags, checkAliases, checkBundles, checkRepoName } from "../../domain/registry-names.js";
import { newChildUid } from "../../domain/uidp.js";
import type { RepoChanges, RepoFilter, RepoOrder, RepoRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";

const PAGING: PagingSpec<RepoOrder> = {
  orderFields: ["uid", "name", "created_at", "updated_at"],
  defaultOrder: "uid",
};
const UPDATABLE = ["name", "description", "catalog_tier", "bundles", "aliases", "active_tags"] as const;
/**
 * Operator-managed fields (proto name → record key): the contract makes them internal-only, so customers read them and
 * changing them needs CAP_REPO_INTERNAL_ADMIN.
 */
const INTERNAL = { catalog_tier: "catalogTier", bundles: "bundles", aliases: "aliases", active_tags: "activeTags" } as const;
const TIERS = new Set<number>(Object.values(CatalogTier).filter((v): v is number => typeof v === "number"));

/** The API shape of a stored repo. */
export function repoMessage(r: RepoRecord): Repo {
  return create(RepoSchema, {
    uid: r.uid,
    name: r.name,
    description: r.description,
    catalogTier: r.catalogTier as CatalogTier,
    bundles: r.bundles,
    aliases: r.aliases,
    activeTags: r.activeTags,
    createTime: timestampFromMs(r.createTime),
    updateTime: timestampFromMs(r.updateTime),
  });
}

/** The keyset position of a repo in a given order. */
function repoCursor(r: RepoRecord, field: RepoOrder) {
  const key = field === "name" ? r.name : field === "created_at" ? r.createTime : field === "updated_at" ? r.updateTime : r.uid;
  return { key, uid: r.uid };
}

/** The operator-managed fields among fields whose value in input differs from current. */
function changedInternal(input: Repo, current: Repo | RepoRecord, fields: ReadonlySet<string>): string[] {
  return Object.entries(INTERNAL)
    .filter(([field, key]) => fields.has(field) && JSON.stringify(input[key]) !== JSON.stringify(current[key]))
    .map(([field]) => field);
}

function validateFields(repo: Repo, fields: ReadonlySet<string>): void {
  const violations: FieldViolation[] = [];
  if (fields.has("name")) violations.push(...checkRepoName("name", repo.name));
  if (fields.has("description")) violations.push(...checkDescription("description", repo.description));
  if (fields.has("catalog_tier") && !TIERS.has(repo.catalogTier)) {
    violations.push({ field: "catalog_tier", description: "must be a CatalogTier value" });
  }
  if (fields.has("bundles")) violations.push(...checkBundles("bundles", repo.bundles));
  if (fields.has("aliases")) violations.push(...checkAliases("aliases", repo.aliases));
  if (fields.has("active_tags")) violations.push(...checkActiveTags("active_tags", repo.activeTags));
  if (violations.length > 0) throw new InvalidArgumentError(violations);
}

/** ReposService: the registry catalogue's repositories, each directly below a group. */
export function createReposService(deps: ServiceDeps): ServiceImpl<typeof ReposService> {
  const { store, authz } = deps;
  const LIST: ListSpec<RepoRecord, RepoFilter, RepoOrder> = {
    name: "repos",
    paging: PAGING,
    capability: Capability.CAP_REPO_LIST,
    list: (q, signal) => store.repos.list(q, signal),
    cursor: repoCursor,
  };

  async function existing(uid: string): Promise<RepoRecord> {
    const repo = await store.repos.get(uid);
    if (!repo) throw new NotFoundError("repo", uid);
    return repo;
  }

  /**
   * Changing an operator-managed field away from what is stored (a new repo
   * stores the defaults) needs CAP_REPO_INTERNAL_ADMIN at the group, checked
   * before the values are validated. Sending a field back unchanged does not.
   */
  async function requireInternalAdmin(
    ctx: HandlerContext,
    group: string,
    input: Repo,
    current: Repo | RepoRecord,
    fields: ReadonlySet<string>,
  ): Promise<void> {
    const changed = changedInternal(input, current, fields);
    if (changed.length === 0 || (await authz.holds(principalOf(ctx), [Capability.CAP_REPO_INTERNAL_ADMIN], group))) return;
    throw new PermissionDeniedError(`Permission denied: ${changed.join(", ")} can only be changed with CAP_REPO_INTERNAL_ADMIN`);
  }

  return {
    async createRepo(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.repo ?? create(RepoSchema);
      const fields = new Set<string>(UPDATABLE);
      await requireInternalAdmin(ctx, parent, input, create(RepoSchema), fields);
      validateFields(input, fields);
      const now = deps.now();
      const record: RepoRecord = {
        uid: newChildUid(parent),
        parentUid: parent,
        name: input.name,
        description: input.description,
        catalogTier: input.catalogTier,
        bundles: input.bundles,
        aliases: input.aliases,
        activeTags: input.activeTags,
        createTime: now,
        updateTime: now,
      };
      const message = repoMessage(record);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.repos.create(record),
        () => [{ kind: "repo", action: "created", subject: record.uid, resource: { schema: RepoSchema, message } }],
      );
      return message;
    },

    async getRepo(req) {
      return repoMessage(await existing(requireUidp("uid", req.uid)));
    },

    async listRepos(req, ctx): Promise<ListReposResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter = req.name === undefined ? {} : { name: req.name };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      return { $typeName: "platformapi.registry.v2beta1.ListReposResponse", repos: page.items.map(repoMessage), ...page.envelope };
    },

    async updateRepo(req, ctx) {
      const input = req.repo ?? create(RepoSchema);
      const uid = requireUidp("repo.uid", input.uid);
      const fields = fieldsToUpdate(RepoSchema, input, req.updateMask, UPDATABLE);
      const current = await existing(uid);
      await requireInternalAdmin(ctx, current.parentUid, input, current, fields);
      validateFields(input, fields);
      const changes: RepoChanges = {};
      if (fields.has("name")) changes.name = input.name;
      if (fields.has("description")) changes.description = input.description;
      if (fields.has("catalog_tier")) changes.catalogTier = input.catalogTier;
      if (fields.has("bundles")) changes.bundles = input.bundles;
      if (fields.has("aliases")) changes.aliases = input.aliases;
      if (fields.has("active_tags")) changes.activeTags = input.activeTags;
      return withEvents(
        deps,
        ctx,
        async (tx) => repoMessage(await tx.repos.update(uid, changes, deps.now())),
        (message) => [{ kind: "repo", action: "updated", subject: uid, resource: { schema: RepoSchema, message } }],
      );
    },

    async deleteRepo(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.repos.delete(uid),
        () => [{ kind: "repo", action: "deleted", subject: uid }],
      );
      return {};
    },
  };
}
