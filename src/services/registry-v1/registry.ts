import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "../time.js";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platform/capabilities/v1/capabilities_pb.js";
import { CatalogTier, RepoSchema, type RegistryService, type Repo } from "../../../gen/platform/registry/v1/registry_pb.js";
import { CatalogTier as CatalogTierV2 } from "../../../gen/platform/registry/v2beta1/repos_pb.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import type { RepoRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";

/** The most repos one v1 list returns; v1 has no paging. */
const V1_LIST_LIMIT = 10_000;

/** v2beta1 catalog tiers in v1 numbering: the same tiers under other names and numbers (contract §18.2). */
const V1_TIER: Record<number, CatalogTier> = {
  [CatalogTierV2.APPLICATION]: CatalogTier.APPLICATION,
  [CatalogTierV2.BASE]: CatalogTier.BASE,
  [CatalogTierV2.FIPS]: CatalogTier.FIPS,
  [CatalogTierV2.AI]: CatalogTier.AI,
  [CatalogTierV2.DEVTOOLS]: CatalogTier.DEVTOOLS,
  [CatalogTierV2.COMMERCIAL]: CatalogTier.COMMERCIAL,
};

/** The v1 repo shape: id in place of uid, create time only, v1 tier numbers. */
function v1Repo(r: RepoRecord): Repo {
  return create(RepoSchema, {
    id: r.uid,
    name: r.name,
    catalogTier: V1_TIER[r.catalogTier] ?? CatalogTier.UNKNOWN,
    bundles: r.bundles,
    aliases: r.aliases,
    createTime: timestampFromMs(r.createTime),
    activeTags: r.activeTags,
    description: r.description,
  });
}

/** v1 RegistryService: the repo list still served at /registry/v1/repos (spec §4.9). */
export function createRegistryV1Service(deps: ServiceDeps): ServiceImpl<typeof RegistryService> {
  return {
    listRepos(req, ctx) {
      const hierarchy = hierarchyFilter(req.uidp);
      if (req.id !== "") hierarchy.ids = [requireUidp("id", req.id)];
      const result = deps.store.repos.list({
        hierarchy,
        filter: req.name === "" ? {} : { name: req.name },
        order: { field: "uid", desc: false },
        after: null,
        offset: 0,
        limit: V1_LIST_LIMIT,
        visibleWithin: deps.authz.visibleWithin(principalOf(ctx), Capability.CAP_REPO_LIST),
      });
      return { items: result.items.map(v1Repo) };
    },
  };
}
