import { createBearerAuthenticator } from "../../auth/authenticator.js";
import type { Principal } from "../../auth/principal.js";
import type { EventKind } from "../../domain/events.js";
import { isAtOrBelow } from "../../domain/uidp.js";
import type { EventVisibility } from "../../store/event-store.js";
import type { ServiceDeps } from "../context.js";
import { eventVisibility } from "./feed-view.js";

/**
 * What a WatchEvents stream was admitted with, checked again each time it
 * wakes: a stream is no way around what a new call would be refused.
 */
export interface WatchCredentials {
  /** What the caller may see: as the stream began, then as last checked. */
  readonly visible: EventVisibility;
  /**
   * Authenticates the call's headers again, as a new call would be (a token
   * whose key was retired, or whose identity was deleted, throws the
   * authenticator's UNAUTHENTICATED), then computes the caller's visibility
   * again: false when it hides something the stream could see (the stream
   * ends), else true, visible now being the new one (grants added are used
   * at once). Both are cached reads while their tables are unchanged.
   */
  check(): Promise<boolean>;
}

/** The credentials of a stream admitted as principal with these request headers. */
export async function watchCredentials(deps: ServiceDeps, principal: Principal, headers: Headers): Promise<WatchCredentials> {
  // The wrapper's authenticator, over the same token service and identity lookup: the same checks, the same errors.
  // The administrator is no stored identity; anyone else must still exist.
  const authenticator = createBearerAuthenticator(
    deps.tokens,
    principal.admin ? principal.subject : "",
    async (uid) => (await deps.store.identities.get(uid)) !== null,
  );
  let visible = await eventVisibility(deps, principal);
  return {
    get visible() {
      return visible;
    },
    async check() {
      await authenticator.authenticate(headers);
      const now = await eventVisibility(deps, principal);
      if (narrower(visible, now)) return false;
      visible = now;
      return true;
    },
  };
}

/** Whether now hides some place before showed, for some kind of event. */
export function narrower(before: EventVisibility, now: EventVisibility): boolean {
  return (Object.keys(before) as EventKind[]).some((kind) => {
    const was = before[kind];
    const is = now[kind];
    if (was === is || is === null) return false;
    if (was === null) return true;
    return was.some((top) => !is.some((t) => isAtOrBelow(t, top)));
  });
}
