import type { Authorizer } from "../auth/authorizer.js";
import type { ExchangeLabel } from "../auth/guarded-fetch.js";
import type { Principal } from "../auth/principal.js";
import type { TokenService } from "../auth/tokens.js";
import { EVENT_KINDS, type EventKind, type EventRecord } from "../domain/events.js";
import { isAtOrBelow } from "../domain/uidp.js";
import type { EventVisibility } from "../store/event-store.js";
import type { DeliveryLogEntry, SubscriptionRecord } from "../store/subscription-store.js";
import { deliveryRequest } from "./request.js";
import { postToSink, type SinkPolicy } from "./sink.js";

/**
 * What a subscription receives and how one event is posted to it: shared by
 * the deliverer's loop and RedeliverEvent, so both see and sign alike.
 */

/** The creator as the authorizer knows it (only subject and admin matter to visibleWithin). */
function creatorOf(s: SubscriptionRecord): Principal {
  return { subject: s.creatorUid, admin: s.creatorAdmin, token: { issuer: "", audience: [], issuedAt: 0, expiresAt: 0 } };
}

/** The subtree tops of `tops` (null: everywhere) that lie within group's subtree. */
function within(group: string, tops: readonly string[] | null): string[] {
  if (tops === null) return [group];
  const out: string[] = [];
  for (const top of tops) {
    if (isAtOrBelow(top, group)) return [group];
    if (isAtOrBelow(group, top)) out.push(top);
  }
  return out;
}

/**
 * Per kind, where the subscription sees events: the creator's visibility
 * now (visibleWithin of the kind's List capability, as ListEvents computes a
 * caller's) cut to the subscription's group and everything below it. A
 * creator whose grants were revoked (or who was deleted) sees nothing.
 */
export async function subscriptionVisibility(authz: Authorizer, s: SubscriptionRecord): Promise<EventVisibility> {
  const creator = creatorOf(s);
  const visible: Partial<Record<EventKind, readonly string[] | null>> = {};
  for (const kind of Object.keys(EVENT_KINDS) as EventKind[]) {
    visible[kind] = within(s.groupUid, await authz.visibleWithin(creator, EVENT_KINDS[kind].listCapability));
  }
  return visible as EventVisibility;
}

/** Whether an event's type starts with one of the prefixes (none: every type): what a subscription's types select. */
export function typeMatches(types: readonly string[], type: string): boolean {
  return types.length === 0 || types.some((prefix) => type.startsWith(prefix));
}

/** The prefix a feed read can filter on by itself: the one prefix, or "" (then typeMatches filters the page). */
export function readPrefix(s: SubscriptionRecord): string {
  return s.types.length === 1 ? s.types[0]! : "";
}

/** What posting an event needs besides the subscription and the event. */
export interface PostDeps {
  tokens: Pick<TokenService, "mintDelivery">;
  /** CloudEvents source: this deployment's base URL. */
  source: string;
  policy: SinkPolicy;
  now: () => number;
  /** One attempt's bound, connect to last byte (default SINK_TIMEOUT_MS). */
  sinkTimeoutMs?: number;
}

/**
 * Posts event to the subscription's sink once (signed, with a fresh bearer
 * token whose aud is the sink and sub the subscription) and returns the
 * attempt as the log keeps it, numbered `attempt`. Never throws for anything
 * the sink or the network does.
 */
export async function postEvent(deps: PostDeps, s: SubscriptionRecord, event: EventRecord, attempt: number): Promise<DeliveryLogEntry> {
  const time = deps.now();
  const { token } = await deps.tokens.mintDelivery(s.sink, s.uid);
  const request = deliveryRequest(event, { source: deps.source, secret: s.secret, token, now: time });
  const result = await postToSink(s.sink, request, {
    policy: deps.policy,
    timeoutMs: deps.sinkTimeoutMs,
    label: deliveryLabel(s, event, attempt),
  });
  return {
    time,
    eventId: event.id,
    eventType: event.type,
    status: result.status,
    latencyMs: result.latencyMs,
    outcome: result.outcome,
    error: result.error,
    attempt,
  };
}

/** The delivery's span when tracing is on: the POST whose traceparent the sink receives. */
function deliveryLabel(s: SubscriptionRecord, event: EventRecord, attempt: number): ExchangeLabel {
  return {
    name: "deliver event",
    attributes: {
      "cloudevents.event_id": event.id,
      "cloudevents.event_type": event.type,
      "platform.subscription.uid": s.uid,
      "platform.delivery.attempt": attempt,
    },
  };
}
