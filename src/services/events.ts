import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { principalKey, requestIdKey } from "../auth/principal.js";
import { eventId, eventType, type EventAction, type EventDraft, type EventKind } from "../domain/events.js";
import { parentOf } from "../domain/uidp.js";
import { insertWithEvents as insertWithEventsIn, type Store, type StoreParts } from "../store/store.js";
import type { FeedCursors } from "./events/feed-cursor.js";
import type { WatchOptions } from "./events/feed-notifier.js";

/**
 * Renders a resource message as the REST API returns it (the same JSON text),
 * so an event's body is exactly what a Get after the change would answer.
 * Injected by the composition root, which owns the JSON codec.
 */
export type MessageJson = <Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>) => string;

/** What a mutation says about its change; the rest of the event comes from the call. */
export interface Change<Desc extends DescMessage> {
  kind: EventKind;
  action: EventAction;
  /** The uid of the resource that changed. */
  subject: string;
  /**
   * The group the resource belongs to, the CloudEvents extension "group" (a
   * group's own uid for group events). Default: the subject's parent, or the
   * subject itself at the root.
   */
  groupUid?: string;
  /**
   * The resource after the change, as the API returns it (secrets already
   * cleared by the caller); absent for a delete, whose body is {"uid": subject}.
   */
  resource?: { schema: Desc; message: MessageShape<Desc> };
  /** Who made the change, when not the call's principal (a person registering at first sign-in is their own actor). */
  actor?: string;
}

/**
 * Builds the CloudEvent of one change made by this call, for the mutation's
 * transaction to append (EventStore.append): the actor is the caller's
 * identity, the request id the call's, the time the change's.
 */
function changeEvent<Desc extends DescMessage>(ctx: HandlerContext, json: MessageJson, time: number, change: Change<Desc>): EventDraft {
  const body = change.resource ? json(change.resource.schema, change.resource.message) : JSON.stringify({ uid: change.subject });
  const actor = JSON.stringify({ subject: change.actor ?? ctx.values.get(principalKey)?.subject ?? "" });
  const data = `{"actor":${actor},"requestId":${JSON.stringify(ctx.values.get(requestIdKey))},"body":${body}}`;
  return {
    id: eventId(time),
    kind: change.kind,
    type: eventType(change.kind, change.action),
    subject: change.subject,
    groupUid: change.groupUid ?? parentOf(change.subject) ?? change.subject,
    time,
    data,
  };
}

/** What the services need to write events: set by the composition root. */
export interface EventDeps {
  /** The REST JSON of a message (an event's body is what a Get would answer). */
  json: MessageJson;
  /** CloudEvents source of every event: this deployment's base URL. */
  source: string;
  /** How feed positions are sealed into the cursors clients hold. */
  cursors: FeedCursors;
  /** How long events are kept (PLATFORM_EVENT_RETENTION), for the expired-cursor error. */
  retentionMs: number;
  /** WatchEvents' notifier and bounds: told after every commit that wrote events. */
  watch: WatchOptions;
  /** Told of the events of every committed transaction (metrics). */
  written?: (events: readonly EventDraft[]) => void;
}

/**
 * The events a call's transaction appended, until it commits. A transaction
 * run again (a serialization failure) appends again: the last attempt's
 * events are the ones committed.
 */
const pending = new WeakMap<HandlerContext, readonly EventDraft[]>();

/** What emitting needs of the service deps. */
type EmitDeps = { store: Store; now: () => number; events: EventDeps };

/**
 * Appends the events of changes made by this call in tx, the transaction
 * that made them (for mutations that run their own transaction).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function emit(tx: StoreParts, deps: EmitDeps, ctx: HandlerContext, changes: readonly Change<any>[]): Promise<void> {
  if (changes.length === 0) return;
  const time = deps.now();
  const drafts = changes.map((change) => changeEvent(ctx, deps.events.json, time, change));
  pending.set(ctx, drafts);
  await tx.events.append(drafts);
}

/**
 * Runs a mutation and appends the events of its changes in one transaction
 * (the outbox): a write that rolls back emits nothing, and a committed one is
 * never without its events. changes sees the write's result (the record after
 * the change, as the store returned it).
 */
export function withEvents<T>(
  deps: EmitDeps,
  ctx: HandlerContext,
  write: (tx: StoreParts) => Promise<T>,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  changes: (result: T) => readonly Change<any>[],
): Promise<T> {
  return committed(
    deps,
    ctx,
    deps.store.transaction(async (tx) => {
      const result = await write(tx);
      await emit(tx, deps, ctx, changes(result));
      return result;
    }, ctx.signal),
  );
}

/**
 * Runs a write that is one plain INSERT with the events of its changes
 * (known before it runs), atomically: in the INSERT's own statement where
 * the engine can (Store.insertWithEvents), else in a transaction.
 */
export function insertWithEvents<T>(
  deps: EmitDeps,
  ctx: HandlerContext,
  write: (parts: StoreParts) => Promise<T>,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  changes: readonly Change<any>[],
): Promise<T> {
  const time = deps.now();
  const drafts = changes.map((change) => changeEvent(ctx, deps.events.json, time, change));
  pending.set(ctx, drafts);
  return committed(deps, ctx, insertWithEventsIn(deps.store, write, drafts, ctx.signal));
}

/** A call's transaction that appended events (emit), once it has committed: waiting watches read the feed again at once. */
export async function committed<T>(deps: EmitDeps, ctx: HandlerContext, transaction: Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await transaction;
  } catch (err) {
    pending.delete(ctx);
    throw err;
  }
  const written = pending.get(ctx);
  pending.delete(ctx);
  if (written !== undefined) {
    deps.events.written?.(written);
    deps.events.watch.notifier.notify();
  }
  return result;
}
