import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { CatalogTier, RepoSchema, type RegistryService, type Repo } from "../../../gen/platformapi/registry/v1/registry_pb.js";
import { CatalogTier as CatalogTierV2 } from "../../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import type { RepoRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { v1ListQuery } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";

/** v2beta1 catalog tiers in v1 numbering: the same tiers under other names and numbers (v1 starts at APPLICATION = 4). */
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

/** v1 RegistryService: the repo list still served at GET /registry/v1/repos, for clients of v1 ({items}, v1 repos). */
export function createRegistryV1Service(deps: ServiceDeps): ServiceImpl<typeof RegistryService> {
  return {
    async listRepos(req, ctx) {
      const id = req.id === "" ? null : requireUidp("id", req.id);
      const visible = await deps.authz.visibleWithin(principalOf(ctx), Capability.CAP_REPO_LIST);
      const result = await deps.store.repos.list(
        v1ListQuery(hierarchyFilter(req.uidp), id, req.name === "" ? {} : { name: req.name }, visible),
      );
      return { items: result.items.map(v1Repo) };
    },
  };
}
