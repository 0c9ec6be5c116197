/**
 * Where a registry repository path lives in this server: the first path
 * segment is the organization's uid (a root group, 40 lowercase hex
 * characters), the rest is the name of a repo directly in that
 * organization, an OCI repository path itself ("<org uid>/team/app" is the
 * repo "team/app"). Anything else maps to nothing, so a path trick (`..`,
 * upper case, percent-encoding, empty segments, a sub-group's uid, a
 * repository of no organization) is granted nothing: it never names a
 * group, so no role binding can apply to it.
 */
import { REPO_NAME_MAX, REPO_NAME_PATTERN } from "../domain/registry-names.js";
import type { RepoRecord, StoreParts } from "../store/store.js";

/** The longest repository path accepted: the org uid, a slash and the longest repo name. */
export const REGISTRY_PATH_MAX = 40 + 1 + REPO_NAME_MAX;

const ORG_UID = /^[0-9a-f]{40}$/;

/** A registry repository path resolved to its organization and repo name. */
export interface RegistryRepository {
  /** The organization (root group) uid: the group the repo lives in. */
  orgUid: string;
  /** The repo's name in that group. */
  name: string;
}

/** The organization and repo name a repository path names, or null when it names none. */
export function registryRepository(path: string): RegistryRepository | null {
  if (path.length > REGISTRY_PATH_MAX) return null;
  const slash = path.indexOf("/");
  if (slash < 0) return null;
  const orgUid = path.slice(0, slash);
  const name = path.slice(slash + 1);
  // The pattern allows lowercase alphanumerics and single separators only: no "..", "%", "//", upper case.
  if (!ORG_UID.test(orgUid) || name.length > REPO_NAME_MAX || !REPO_NAME_PATTERN.test(name)) return null;
  return { orgUid, name };
}

/** The repository path of a repo in an organization: the inverse of registryRepository. */
export function registryPath(orgUid: string, name: string): string {
  return `${orgUid}/${name}`;
}

/** The repo a mapped path names (read through the store or inside a transaction), or null when there is none. */
export async function findRepo(store: StoreParts, repository: RegistryRepository): Promise<RepoRecord | null> {
  const page = await store.repos.list({
    hierarchy: { childrenOf: repository.orgUid },
    filter: { name: repository.name },
    order: { field: "uid", desc: false },
    after: null,
    offset: 0,
    limit: 1,
    visibleWithin: null,
  });
  return page.items[0] ?? null;
}
