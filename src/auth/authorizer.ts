import type { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { PermissionDeniedError } from "../domain/errors.js";
import { topsOf } from "../domain/uid-tops.js";
import { isAtOrBelow } from "../domain/uidp.js";
import type { RoleRecord, Store } from "../store/store.js";
import { AUTHZ_TABLES } from "../store/versions.js";
import type { Principal } from "./principal.js";

/** One group where an identity holds capabilities (through one or more role bindings). */
interface Grant {
  group: string;
  capabilities: ReadonlySet<Capability>;
}

/**
 * Answers what a principal may do. A role binding at group G grants its role's
 * capabilities on G and every descendant of G; the administrator holds every
 * capability everywhere.
 */
export interface Authorizer {
  /** Every capability the principal holds at scope (a group or resource uid). */
  capabilitiesAt(principal: Principal, scope: string): Promise<ReadonlySet<Capability>>;
  /** True when the principal holds all of capabilities at scope. */
  holds(principal: Principal, capabilities: readonly Capability[], scope: string): Promise<boolean>;
  /**
   * Throws PermissionDeniedError unless the principal holds all of capabilities
   * at scope. Call it before looking the target up, so the answer is the same
   * whether or not the target exists.
   */
  require(principal: Principal, capabilities: readonly Capability[], scope: string): Promise<void>;
  /**
   * The groups at or below which the principal holds capability, with no group
   * listed below another; null means everywhere (the administrator). A List
   * passes it to the store as visibleWithin.
   */
  visibleWithin(principal: Principal, capability: Capability): Promise<readonly string[] | null>;
}

const CACHE_LIMIT = 10_000;
const NOTHING: ReadonlySet<Capability> = new Set<Capability>();

/** What the cache keeps per identity: its grants and, per capability asked, their tops. */
interface Entry {
  version: number;
  grants: Grant[];
  tops: Map<Capability, readonly string[]>;
}

/** An Authorizer over the store's role bindings, cached until they change; onCache(hit) is told of each cache lookup (metrics). */
export function createAuthorizer(
  store: Store,
  allCapabilities: readonly Capability[],
  onCache: (hit: boolean) => void = () => {},
): Authorizer {
  const all: ReadonlySet<Capability> = new Set(allCapabilities);
  const cache = new Map<string, Entry>();

  async function entryOf(subject: string): Promise<Entry> {
    // The version is read before the data, so grants read after a write are
    // never cached under the version from before it.
    const version = store.version(AUTHZ_TABLES);
    const hit = cache.get(subject);
    onCache(hit?.version === version);
    if (hit && hit.version === version) return hit;
    const byGroup = new Map<string, Set<Capability>>();
    // Each role is read once however many bindings name it (an owner of 2,000 organizations holds one role).
    const roles = new Map<string, Promise<RoleRecord | null>>();
    for (const binding of await store.roleBindings.forIdentity(subject)) {
      let role = roles.get(binding.roleUid);
      if (!role) roles.set(binding.roleUid, (role = store.roles.get(binding.roleUid)));
      const found = await role;
      if (!found) continue;
      const caps = byGroup.get(binding.groupUid) ?? new Set<Capability>();
      for (const c of found.capabilities) caps.add(c as Capability);
      byGroup.set(binding.groupUid, caps);
    }
    const grants = [...byGroup].map(([group, capabilities]) => ({ group, capabilities }));
    const entry = { version, grants, tops: new Map() };
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(subject, entry);
    return entry;
  }

  const authorizer: Authorizer = {
    async capabilitiesAt(principal, scope) {
      if (principal.admin) return all;
      const out = new Set<Capability>();
      for (const g of (await entryOf(principal.subject)).grants) {
        if (isAtOrBelow(g.group, scope)) for (const c of g.capabilities) out.add(c);
      }
      return out.size === 0 ? NOTHING : out;
    },
    async holds(principal, capabilities, scope) {
      if (principal.admin) return true;
      const held = await authorizer.capabilitiesAt(principal, scope);
      return capabilities.every((c) => held.has(c));
    },
    async require(principal, capabilities, scope) {
      if (!(await authorizer.holds(principal, capabilities, scope))) throw new PermissionDeniedError();
    },
    async visibleWithin(principal, capability) {
      if (principal.admin) return null;
      const entry = await entryOf(principal.subject);
      let tops = entry.tops.get(capability);
      if (!tops) {
        // One sort and one pass (topsOf), not a scan of every earlier group per group.
        tops = Object.freeze(topsOf(entry.grants.filter((g) => g.capabilities.has(capability)).map((g) => g.group)));
        entry.tops.set(capability, tops);
      }
      return tops;
    },
  };
  return authorizer;
}
