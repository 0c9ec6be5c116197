import type { HandlerContext } from "@connectrpc/connect";
import { principalKey, type Principal } from "../auth/principal.js";
import { UnauthenticatedError } from "../domain/errors.js";
import type { PageTokenSealer } from "../store/page-token.js";
import type { Store } from "../store/store.js";

/** What every service implementation is built from. */
export interface ServiceDeps {
  store: Store;
  pageTokens: PageTokenSealer;
  /** Milliseconds since the epoch; injectable for tests. */
  now: () => number;
}

/** The principal the service wrapper set for this call. */
export function principalOf(ctx: HandlerContext): Principal {
  const principal = ctx.values.get(principalKey);
  if (!principal) throw new UnauthenticatedError();
  return principal;
}

/**
 * The groups a principal may list within: null means everything. Until
 * role bindings exist every authenticated principal is the administrator.
 */
export function visibleWithin(principal: Principal): readonly string[] | null {
  return principal.admin ? null : [];
}
