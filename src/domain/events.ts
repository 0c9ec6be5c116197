import { randomFillSync } from "node:crypto";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";

/**
 * The change feed's vocabulary: which kinds of resource emit events, the
 * CloudEvents type of each change, and which capability lets a caller see it.
 * One table, so an event type, its visibility and docs/events.md's list cannot
 * drift apart.
 */

/** This project's CloudEvents type prefix (reverse DNS of the error domain "platform.api"). */
const EVENT_TYPE_PREFIX = "api.platform.";

/** CloudEvents specversion of every event. */
export const CLOUDEVENTS_SPEC_VERSION = "1.0";

/** A kind of resource that emits events, with its type stem and the capability that lists it. */
interface EventKindSpec {
  /** Type stem after EVENT_TYPE_PREFIX, e.g. "iam.group". */
  stem: string;
  /** Seeing an event of this kind at a group needs this capability there (the kind's List capability). */
  listCapability: Capability;
}

/** Every kind of resource whose changes are events (advisories emit none, as in the contract). */
export const EVENT_KINDS = {
  group: { stem: "iam.group", listCapability: Capability.CAP_IAM_GROUPS_LIST },
  identity: { stem: "iam.identity", listCapability: Capability.CAP_IAM_IDENTITY_LIST },
  role: { stem: "iam.roles", listCapability: Capability.CAP_IAM_ROLES_LIST },
  roleBinding: { stem: "iam.rolebindings", listCapability: Capability.CAP_IAM_ROLE_BINDINGS_LIST },
  identityProvider: { stem: "iam.identity_providers", listCapability: Capability.CAP_IAM_IDENTITY_PROVIDERS_LIST },
  accountAssociation: { stem: "iam.account_associations", listCapability: Capability.CAP_IAM_ACCOUNT_ASSOCIATIONS_LIST },
  groupInvite: { stem: "iam.group_invite", listCapability: Capability.CAP_IAM_GROUP_INVITES_LIST },
  repo: { stem: "registry.repo", listCapability: Capability.CAP_REPO_LIST },
  tag: { stem: "registry.tag", listCapability: Capability.CAP_TAG_LIST },
} as const satisfies Record<string, EventKindSpec>;

export type EventKind = keyof typeof EVENT_KINDS;

/** What happened to the resource; "created.batch" is BatchCreateRoleBindings' one event for its bindings. */
export type EventAction = "created" | "updated" | "deleted" | "created.batch";

/** The CloudEvents type of a change, e.g. "api.platform.iam.group.created.v1". */
export function eventType(kind: EventKind, action: EventAction): string {
  return `${EVENT_TYPE_PREFIX}${EVENT_KINDS[kind].stem}.${action}.v1`;
}

/**
 * An event as a mutation writes it, in the same transaction as the change:
 * everything a reader needs, the feed position excepted (the store assigns it
 * at commit).
 */
export interface EventDraft {
  /** A fresh UUID, version 7 (eventId()). */
  id: string;
  kind: EventKind;
  /** eventType(kind, action). */
  type: string;
  /** The uid of the resource that changed. */
  subject: string;
  /** The group the resource belongs to (a group's own uid for group events): who may see it. */
  groupUid: string;
  /** Milliseconds since the epoch. */
  time: number;
  /** The CloudEvent's data, serialized JSON: {actor, requestId, body}. */
  data: string;
}

/** An event as the feed returns it: the draft and its place in the feed. */
export interface EventRecord extends EventDraft {
  /** Where the feed resumes right after this event (an opaque page token once encoded). */
  position: FeedPosition;
}

/**
 * A place in the feed, in commit order. SQLite commits one writer at a time,
 * so its sequence alone orders the feed (txid 0). PostgreSQL orders by the
 * writing transaction's id, then the sequence within it: see docs/events.md
 * for why the sequence alone would skip events there.
 */
export interface FeedPosition {
  txid: bigint;
  seq: bigint;
}

/** Whether a comes before b in the feed. */
export function positionBefore(a: FeedPosition, b: FeedPosition): boolean {
  return a.txid < b.txid || (a.txid === b.txid && a.seq < b.seq);
}

/** Random bytes drawn 10 at a time for event ids, refilled a pool at a time (as randomUUID caches its entropy). */
const entropy = Buffer.alloc(16 * 1024);
let entropyAt = entropy.length;
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/**
 * A fresh event id: a UUID of version 7 (RFC 9562), its first 48 bits the
 * time in milliseconds and the other 74 random. Ids made later sort later, so
 * the index on events' ids grows at its end rather than at random pages (a
 * random UUID's insert costs about a third more on SQLite), and a reader
 * can tell roughly when an event was made from its id alone.
 */
export function eventId(now = Date.now()): string {
  if (entropyAt + 10 > entropy.length) {
    randomFillSync(entropy);
    entropyAt = 0;
  }
  const b = entropy;
  const r = entropyAt;
  entropyAt += 10;
  const ms = Math.max(0, Math.floor(now)) % 2 ** 48;
  const hi = Math.floor(ms / 2 ** 16);
  const time = hi.toString(16).padStart(8, "0") + "-" + (ms % 2 ** 16).toString(16).padStart(4, "0");
  const version = "7" + HEX[b[r]! & 0x0f]!.slice(1) + HEX[b[r + 1]!];
  const variant = HEX[(b[r + 2]! & 0x3f) | 0x80]! + HEX[b[r + 3]!];
  let node = "";
  for (let i = r + 4; i < r + 10; i++) node += HEX[b[i]!];
  return `${time}-${version}-${variant}-${node}`;
}
