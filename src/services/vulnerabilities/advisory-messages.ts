import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  AdvisoryEventSchema,
  AdvisorySchema,
  SeveritySchema,
  type Advisory,
  type AdvisoryEvent,
} from "../../../gen/platformapi/vulnerabilities/v2beta1/advisories_pb.js";
import type { AdvisoryEventRecord, AdvisoryOrder, AdvisoryRecord } from "../../store/store.js";
import { timestampFromMs } from "../time.js";

// Stored advisories ↔ their API messages. An event's kind is stored as the
// AdvisoryEvent "type" oneof case name and the member message as proto3 JSON,
// so a kind added to the proto needs no change here.

/** The members of the AdvisoryEvent "type" oneof. */
const EVENT_MEMBERS = AdvisoryEventSchema.oneofs.find((o) => o.name === "type")!.fields;

/** The oneof member of an event, rebuilt from the stored type and its proto3 JSON; unset for an unknown type. */
function eventType(e: AdvisoryEventRecord): AdvisoryEvent["type"] {
  const member = EVENT_MEMBERS.find((f) => f.localName === e.type);
  if (member?.fieldKind !== "message") return { case: undefined };
  const value = fromJson(member.message, e.data as JsonValue, { ignoreUnknownFields: true });
  return { case: e.type, value } as AdvisoryEvent["type"];
}

/** The API shape of a stored advisory event. */
function advisoryEventMessage(e: AdvisoryEventRecord): AdvisoryEvent {
  return create(AdvisoryEventSchema, {
    uid: e.uid,
    createTime: timestampFromMs(e.createTime),
    author: e.author,
    reviewer: e.reviewer,
    reviewState: e.reviewState,
    issue: e.issue ?? undefined,
    type: eventType(e),
  });
}

/** The stored shape of an advisory event: its oneof case and member as proto3 JSON ("" and {} when unset). */
function advisoryEventRecord(e: AdvisoryEvent): AdvisoryEventRecord {
  const member = EVENT_MEMBERS.find((f) => f.localName === e.type.case);
  const data = member?.fieldKind === "message" && e.type.value !== undefined ? toJson(member.message, e.type.value) : {};
  return {
    uid: e.uid,
    createTime: e.createTime ? timestampMs(e.createTime) : 0,
    author: e.author,
    reviewer: e.reviewer,
    reviewState: e.reviewState,
    issue: e.issue ?? null,
    type: e.type.case ?? "",
    data: data as Record<string, unknown>,
  };
}

/** The API shape of a stored advisory. */
export function advisoryMessage(a: AdvisoryRecord): Advisory {
  return create(AdvisorySchema, {
    uid: a.uid,
    advisoryId: a.advisoryId,
    createTime: timestampFromMs(a.createTime),
    updateTime: timestampFromMs(a.updateTime),
    deleteTime: a.deleteTime === null ? undefined : timestampFromMs(a.deleteTime),
    author: a.author,
    artifactName: a.artifactName,
    artifactType: a.artifactType,
    artifactArchitecture: a.artifactArchitecture,
    componentName: a.componentName,
    componentLocation: a.componentLocation,
    componentType: a.componentType,
    aliases: a.aliases,
    events: a.events.map(advisoryEventMessage),
    legacyAdvisoryId: a.legacyAdvisoryId === "" ? undefined : a.legacyAdvisoryId,
    severities: a.severities.map((s) => create(SeveritySchema, { type: s.type, score: s.score })),
  });
}

/**
 * The stored shape of an advisory in a group. The message does not carry its
 * group or origin: parentUid is the group, and origin defaults to the artifact name.
 */
export function advisoryRecord(a: Advisory, parentUid: string, origin = a.artifactName): AdvisoryRecord {
  return {
    uid: a.uid,
    parentUid,
    advisoryId: a.advisoryId,
    legacyAdvisoryId: a.legacyAdvisoryId ?? "",
    author: a.author,
    artifactName: a.artifactName,
    artifactType: a.artifactType,
    artifactArchitecture: a.artifactArchitecture,
    componentName: a.componentName,
    componentLocation: a.componentLocation,
    componentType: a.componentType,
    origin,
    aliases: [...a.aliases],
    severities: a.severities.map((s) => ({ type: s.type, score: s.score })),
    events: a.events.map(advisoryEventRecord),
    createTime: a.createTime ? timestampMs(a.createTime) : 0,
    updateTime: a.updateTime ? timestampMs(a.updateTime) : 0,
    deleteTime: a.deleteTime ? timestampMs(a.deleteTime) : null,
  };
}

/** The keyset position of an advisory in a given order. */
export function advisoryCursor(a: AdvisoryRecord, field: AdvisoryOrder) {
  const key =
    field === "advisory_id" ? a.advisoryId : field === "created_at" ? a.createTime : field === "updated_at" ? a.updateTime : a.uid;
  return { key, uid: a.uid };
}
