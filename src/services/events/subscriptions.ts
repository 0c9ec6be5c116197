import { create } from "@bufbuild/protobuf";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  Delivery_Outcome,
  DeliverySchema,
  Subscription_State,
  SubscriptionSchema,
  type Delivery,
  type ListSubscriptionsResponse,
  type Subscription,
  type SubscriptionsService,
} from "../../../gen/platformapi/events/v1/subscriptions_pb.js";
import { generateWebhookSecret } from "../../delivery/signature.js";
import { sinkUrlProblem } from "../../delivery/sink.js";
import { postEvent, subscriptionVisibility, typeMatches } from "../../delivery/subscriber.js";
import { ApiError, InvalidArgumentError, invalidField, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { newChildUid } from "../../domain/uidp.js";
import type { DeliveryLogEntry, SubscriptionFilter, SubscriptionOrder, SubscriptionRecord } from "../../store/subscription-store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import type { PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";

const PAGING: PagingSpec<SubscriptionOrder> = {
  orderFields: ["uid", "created_at", "updated_at"],
  defaultOrder: "created_at desc",
};
/** Type prefixes one subscription may name at most. */
const MAX_TYPES = 20;
/** A type prefix: what ListEvents accepts as type_prefix, not empty. */
const TYPE_PREFIX = /^[A-Za-z0-9._-]{1,256}$/;
/** An event id as we issue them (a UUID), loosely: what may be looked up. */
const EVENT_ID = /^[A-Za-z0-9-]{1,64}$/;

const STATES = { active: Subscription_State.ACTIVE, failing: Subscription_State.FAILING } as const;
const OUTCOMES = { delivered: Delivery_Outcome.DELIVERED, retry: Delivery_Outcome.RETRY, failed: Delivery_Outcome.FAILED } as const;

/** The API shape of a stored subscription: secret "" unless this is the Create response that reveals it once. */
function subscriptionMessage(s: SubscriptionRecord, secret = ""): Subscription {
  return create(SubscriptionSchema, {
    uid: s.uid,
    sink: s.sink,
    types: s.types,
    state: STATES[s.state],
    lastError: s.lastError,
    createTime: timestampFromMs(s.createTime),
    updateTime: timestampFromMs(s.updateTime),
    secret,
  });
}

/** The API shape of a delivery log entry. */
function deliveryMessage(d: DeliveryLogEntry): Delivery {
  return create(DeliverySchema, {
    time: timestampFromMs(d.time),
    eventId: d.eventId,
    eventType: d.eventType,
    status: d.status,
    latencyMs: d.latencyMs,
    outcome: OUTCOMES[d.outcome],
    error: d.error,
    attempt: d.attempt,
  });
}

/** ErrorInfo reason of a subscription refused by the per-organization quota. */
const SUBSCRIPTION_QUOTA_EXCEEDED = "SUBSCRIPTION_QUOTA_EXCEEDED";

/** RESOURCE_EXHAUSTED (HTTP 429): the organization has `limit` subscriptions; metadata names the quota and its limit. */
function subscriptionQuotaExceeded(limit: number): ApiError {
  return new ApiError(
    Code.ResourceExhausted,
    SUBSCRIPTION_QUOTA_EXCEEDED,
    `Resource exhausted: this organization has ${limit} subscriptions, the most one organization may; delete one first`,
    { metadata: { quota: "subscriptions_per_organization", limit: String(limit) } },
  );
}

/** ErrorInfo reason of a RedeliverEvent refused while another post is in flight. */
const REDELIVERY_IN_FLIGHT = "REDELIVERY_IN_FLIGHT";
/** RedeliverEvent posts one process makes at once (one per subscription). */
const MAX_REDELIVERIES = 32;

/** RESOURCE_EXHAUSTED (HTTP 429): a redelivery of this subscription (or too many of any) is being posted now. */
function redeliveryInFlight(uid: string): ApiError {
  return new ApiError(
    Code.ResourceExhausted,
    REDELIVERY_IN_FLIGHT,
    `Resource exhausted: a redelivery is being posted (to subscription ${uid}, or ${MAX_REDELIVERIES} at once); retry when it has answered`,
    { retryDelayMs: 1000 },
  );
}

function subscriptionCursor(s: SubscriptionRecord, field: SubscriptionOrder) {
  const key = field === "created_at" ? s.createTime : field === "updated_at" ? s.updateTime : s.uid;
  return { key, uid: s.uid };
}

/**
 * SubscriptionsService: deliveries of the change feed to HTTP sinks
 * (src/delivery/). Changes to subscriptions emit no events: a subscription
 * is delivery configuration, and its secret must never reach a feed.
 */
export function createSubscriptionsService(deps: ServiceDeps): ServiceImpl<typeof SubscriptionsService> {
  const { store } = deps;
  const LIST: ListSpec<SubscriptionRecord, SubscriptionFilter, SubscriptionOrder> = {
    name: "subscriptions",
    paging: PAGING,
    capability: Capability.CAP_SUBSCRIPTIONS_LIST,
    list: (q, signal) => store.subscriptions.list(q, signal),
    cursor: subscriptionCursor,
  };

  // Subscriptions with a RedeliverEvent post in flight in this process.
  const redelivering = new Set<string>();

  async function existing(uid: string): Promise<SubscriptionRecord> {
    const found = await store.subscriptions.get(uid);
    if (!found) throw new NotFoundError("subscription", uid);
    return found;
  }

  return {
    async createSubscription(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.subscription ?? create(SubscriptionSchema);
      const violations: FieldViolation[] = [];
      const sinkProblem = input.sink === "" ? "is required" : sinkUrlProblem(input.sink, deps.issuerPolicy);
      if (sinkProblem !== undefined) violations.push({ field: "sink", description: sinkProblem });
      if (input.types.length > MAX_TYPES) violations.push({ field: "types", description: `must name at most ${MAX_TYPES} prefixes` });
      input.types.forEach((t, i) => {
        if (!TYPE_PREFIX.test(t))
          violations.push({ field: `types[${i}]`, description: "must be 1 to 256 letters, digits, dots, dashes and underscores" });
      });
      if (violations.length > 0) throw new InvalidArgumentError(violations);
      const principal = principalOf(ctx);
      const now = deps.now();
      const secret = generateWebhookSecret();
      const record: SubscriptionRecord = {
        uid: newChildUid(parent),
        groupUid: parent,
        sink: input.sink,
        types: [...new Set(input.types)],
        state: "active",
        lastError: "",
        secret,
        creatorUid: principal.subject,
        creatorAdmin: principal.admin,
        createTime: now,
        updateTime: now,
      };
      // Delivery starts with the first event at or after its creation. The quota is counted in the transaction
      // that creates, so concurrent creates cannot pass it together (SERIALIZABLE on PostgreSQL).
      const org = parent.split("/")[0]!;
      await store.transaction(async (tx) => {
        if ((await tx.subscriptions.countInTree(org)) >= deps.maxSubscriptionsPerOrg)
          throw subscriptionQuotaExceeded(deps.maxSubscriptionsPerOrg);
        await tx.subscriptions.create(record, now);
      }, ctx.signal);
      return subscriptionMessage(record, secret);
    },

    async getSubscription(req) {
      return subscriptionMessage(await existing(requireUidp("uid", req.uid)));
    },

    async listSubscriptions(req, ctx): Promise<ListSubscriptionsResponse> {
      const page = await listPage(deps, ctx, req, { hierarchy: hierarchyFilter(req.uidp), filter: {} }, LIST);
      return {
        $typeName: "platformapi.events.v1.ListSubscriptionsResponse",
        subscriptions: page.items.map((s) => subscriptionMessage(s)),
        ...page.envelope,
      };
    },

    async deleteSubscription(req) {
      await store.subscriptions.delete(requireUidp("uid", req.uid));
      return {};
    },

    async listDeliveries(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      // Unscoped in the proto (a List); checked here at the subscription, before looking it up.
      await deps.authz.require(principalOf(ctx), [Capability.CAP_SUBSCRIPTIONS_LIST], uid);
      await existing(uid);
      const log = await store.deliveries.log(uid);
      return { $typeName: "platformapi.events.v1.ListDeliveriesResponse", deliveries: log.map(deliveryMessage) };
    },

    async redeliverEvent(req) {
      const uid = requireUidp("uid", req.uid);
      if (!EVENT_ID.test(req.eventId)) throw invalidField("event_id", req.eventId === "" ? "is required" : "is not an event id");
      const subscription = await existing(uid);
      const position = await store.deliveries.eventPosition(req.eventId);
      // The same read the deliverer makes, from just before the event: only an event the subscription receives.
      const page =
        position &&
        (await store.events.read({
          after: { txid: position.txid, seq: position.seq - 1n },
          typePrefix: "",
          hierarchy: {},
          visible: await subscriptionVisibility(deps.authz, subscription),
          limit: 1,
        }));
      const event = page?.events[0];
      if (!event || event.id !== req.eventId || !typeMatches(subscription.types, event.type)) throw new NotFoundError("event", req.eventId);
      // An outbound post per call, up to the sink timeout each: one at a time per subscription, and a bounded
      // number per process, so no caller can hold more of this process's connections than that.
      if (redelivering.has(uid) || redelivering.size >= MAX_REDELIVERIES) throw redeliveryInFlight(uid);
      redelivering.add(uid);
      try {
        const attempt = await postEvent(
          { tokens: deps.tokens, source: deps.events.source, policy: deps.issuerPolicy, now: deps.now },
          subscription,
          event,
          0,
        );
        await store.deliveries.logAttempt(uid, attempt);
        return deliveryMessage(attempt);
      } finally {
        redelivering.delete(uid);
      }
    },
  };
}
