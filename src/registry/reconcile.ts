/**
 * The reconcile: repairs the catalogue from what the registry holds, for
 * whatever its notifications missed (the endpoint down past the registry's
 * retries, a notification lost, a server restored from a backup). For each
 * repository the registry lists that maps to an organization: a repo is
 * created if missing, each tag created or moved to the digest the registry
 * resolves, and the repo's catalogue tags the registry no longer has are
 * removed. Repositories the registry does not list are left alone (a repo
 * and tags made through the API alone are not the registry's).
 *
 * Each repository's changes carry the time its tags were read (microseconds):
 * a notification of a later push wins over them, and they win over anything
 * older, with the same rule as notifications (putFromRegistry).
 */
import { findRepo, registryRepository } from "./mapping.js";
import { createRegistryCatalogue, type CatalogueDeps, type ChangeOrigin } from "./notifications-catalogue.js";
import type { RegistryClient } from "./reconcile-client.js";

/** Who the reconcile's changes are attributed to in the events feed. */
export const RECONCILE_ACTOR = "registry-reconcile";

export interface ReconcileOptions {
  /** Repositories read at most in one run (the rest wait for the next). */
  maxRepos: number;
  /** Tags one repository may have; a repository with more is an error (its view would be partial). */
  maxTagsPerRepo: number;
  /** The events' request id. */
  requestId: string;
}

export interface ReconcileSummary {
  repositories: number;
  unmapped: number;
  reposCreated: number;
  tagsCreatedOrMoved: number;
  tagsRemoved: number;
  tagsUnchanged: number;
  /** True when maxRepos stopped the walk before the catalogue's end. */
  truncated: boolean;
}

/** Walks the registry and repairs the catalogue; throws RegistryReadError (from the client) when the registry cannot be read. */
export async function reconcileCatalogue(deps: CatalogueDeps, client: RegistryClient, opts: ReconcileOptions): Promise<ReconcileSummary> {
  const catalogue = createRegistryCatalogue(deps);
  const origin: ChangeOrigin = { actor: RECONCILE_ACTOR, requestId: opts.requestId };
  const summary: ReconcileSummary = {
    repositories: 0,
    unmapped: 0,
    reposCreated: 0,
    tagsCreatedOrMoved: 0,
    tagsRemoved: 0,
    tagsUnchanged: 0,
    truncated: false,
  };
  for await (const path of client.repositories(opts.maxRepos + 1)) {
    if (summary.repositories === opts.maxRepos) {
      summary.truncated = true;
      break;
    }
    summary.repositories++;
    const where = registryRepository(path);
    if (where === null || !(await deps.store.groups.get(where.orgUid))) {
      summary.unmapped++;
      continue;
    }
    const readUs = deps.now() * 1000;
    const names = await client.tags(path, opts.maxTagsPerRepo);
    const existed = (await findRepo(deps.store, where)) !== null;
    for (const name of names) {
      const digest = await client.digest(path, name);
      if (digest === null) continue;
      const outcome = await catalogue.tagPushed(where, name, digest, readUs, origin);
      if (outcome === "applied") summary.tagsCreatedOrMoved++;
      else if (outcome === "unchanged") summary.tagsUnchanged++;
    }
    const repo = await findRepo(deps.store, where);
    if (repo === null) continue;
    if (!existed) summary.reposCreated++;
    const inRegistry = new Set(names);
    for (const tag of await catalogueTagNames(deps, repo.uid, opts.maxTagsPerRepo)) {
      if (inRegistry.has(tag)) continue;
      if ((await catalogue.tagsDeleted(where, { name: tag }, readUs, origin)) === "applied") summary.tagsRemoved++;
    }
  }
  return summary;
}

/** The names of a repo's tags in the catalogue (every form: referrers, dated, epochs). */
async function catalogueTagNames(deps: CatalogueDeps, repoUid: string, limit: number): Promise<string[]> {
  const page = await deps.store.tags.list({
    hierarchy: { childrenOf: repoUid },
    filter: { includeReferrers: true, includeDates: true, includeEpochs: true },
    order: { field: "name", desc: false },
    after: null,
    offset: 0,
    limit,
    visibleWithin: null,
  });
  return page.items.map((t) => t.name);
}
