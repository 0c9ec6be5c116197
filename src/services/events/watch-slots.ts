import { Code } from "@connectrpc/connect";
import type { Principal } from "../../auth/principal.js";
import { ApiError } from "../../domain/errors.js";
import { parentOf, rootOf } from "../../domain/uidp.js";

/** ErrorInfo reason of a watch refused because its identity, organization or process has as many open as allowed. */
export const WATCH_LIMIT = "WATCH_LIMIT";

/** How many WatchEvents streams one process serves: per identity, per organization, in all. */
export interface WatchBounds {
  perIdentity: number;
  perOrganization: number;
  total: number;
}

/**
 * The organization a watch counts against: the root group of its identity's
 * uid path (an identity made in an organization, wherever its bindings are),
 * or null for an identity at the root (a person, the administrator), which
 * belongs to no organization and is bounded by the per-identity cap alone.
 * A person's bindings in several organizations do not make its watches
 * theirs: a binding is granted by the organization, the identity is not
 * made by it, and counting it there would let a person spend the budget of
 * every organization that invited it.
 */
export function watchOrganization(subject: string): string | null {
  return parentOf(subject) === null ? null : rootOf(subject);
}

/**
 * Open streams per identity, per organization and in all; take() throws
 * RESOURCE_EXHAUSTED (WATCH_LIMIT, metadata scope identity, organization or
 * process) past any bound, the narrowest first. The built-in administrator
 * counts only in the total.
 */
export class WatchSlots {
  total = 0;
  private readonly perIdentity = new Map<string, number>();
  private readonly perOrganization = new Map<string, number>();

  constructor(private readonly bounds: WatchBounds) {}

  take(principal: Principal): () => void {
    const keys: [Map<string, number>, string][] = [];
    if (!principal.admin) {
      const identity = this.perIdentity.get(principal.subject) ?? 0;
      if (identity >= this.bounds.perIdentity)
        throw watchLimit(`this identity has ${identity} event watches open, the most allowed`, "identity", this.bounds.perIdentity);
      keys.push([this.perIdentity, principal.subject]);
      const org = watchOrganization(principal.subject);
      if (org !== null) {
        const open = this.perOrganization.get(org) ?? 0;
        if (open >= this.bounds.perOrganization) {
          const what = `this identity's organization has ${open} event watches open, the most allowed`;
          throw watchLimit(what, "organization", this.bounds.perOrganization);
        }
        keys.push([this.perOrganization, org]);
      }
    }
    if (this.total >= this.bounds.total)
      throw watchLimit(`this server serves at most ${this.bounds.total} event watches at once`, "process", this.bounds.total);
    this.total++;
    for (const [counts, key] of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      for (const [counts, key] of keys) {
        const left = (counts.get(key) ?? 1) - 1;
        if (left === 0) counts.delete(key);
        else counts.set(key, left);
      }
    };
  }
}

function watchLimit(what: string, scope: string, limit: number): ApiError {
  return new ApiError(Code.ResourceExhausted, WATCH_LIMIT, `Resource exhausted: ${what}; close one or retry later`, {
    metadata: { scope, limit: String(limit) },
  });
}
