/**
 * Distribution's notifications (`application/vnd.docker.distribution.events.v1+json`,
 * a body `{"events":[…]}`) read as catalogue changes. Only manifest events
 * matter: a push with a tag (the tag now points at the manifest), a delete by
 * digest (tags at the manifest are gone) or by tag (Distribution's tag
 * delete). Everything else (blobs, pulls, mounts, events this server cannot
 * place) is ignored, never refused: a refusal would only make the registry
 * deliver it again.
 */
import { InvalidArgumentError } from "../domain/errors.js";
import { DIGEST_PATTERN, TAG_PATTERN } from "../domain/registry-names.js";
import { registryRepository, type RegistryRepository } from "./mapping.js";

/** The media types of manifests and indexes: the events a catalogue follows. */
export const MANIFEST_MEDIA_TYPES: ReadonlySet<string> = new Set([
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
  "application/vnd.docker.distribution.manifest.v1+json",
  "application/vnd.docker.distribution.manifest.v1+prettyjws",
]);

/** The most events one notification may carry (Distribution sends one to a few per request). */
export const MAX_EVENTS_PER_NOTIFICATION = 100;

/** One catalogue change a notification asks for. */
export type RegistryChange =
  | { kind: "push"; where: RegistryRepository; path: string; tag: string; digest: string; timeUs: number; actor: string }
  | {
      kind: "delete";
      where: RegistryRepository;
      path: string;
      which: { digest: string } | { name: string };
      timeUs: number;
      actor: string;
    };

/** What one notification holds: its changes, and how many events were ignored (not a manifest change, or malformed) or unmapped. */
export interface ParsedNotification {
  changes: RegistryChange[];
  ignored: number;
  unmapped: string[];
}

const TIMESTAMP = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;

/** An RFC 3339 timestamp (Distribution's, with up to nanoseconds) in microseconds since the epoch, or null. */
export function timestampMicros(text: unknown): number | null {
  const m = typeof text === "string" ? TIMESTAMP.exec(text) : null;
  if (!m) return null;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) return null;
  return ms * 1000 + Number(((m[2] ?? "") + "000000").slice(0, 6));
}

type Json = Record<string, unknown>;
const record = (v: unknown): Json | null => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : null);
const text = (v: unknown): string => (typeof v === "string" ? v : "");

/** One event as a change, "ignored" when it is none, or "unmapped" when its repository names no organization's repo. */
function changeOf(event: unknown): RegistryChange | "ignored" | "unmapped" {
  const e = record(event);
  const target = record(e?.target);
  if (!e || !target) return "ignored";
  const action = text(e.action);
  const path = text(target.repository);
  const digest = text(target.digest);
  const tag = text(target.tag);
  const timeUs = timestampMicros(e.timestamp);
  const actor = text(record(e.actor)?.name);
  if (timeUs === null || (action !== "push" && action !== "delete")) return "ignored";
  if (action === "push" && (!MANIFEST_MEDIA_TYPES.has(text(target.mediaType)) || !TAG_PATTERN.test(tag) || !DIGEST_PATTERN.test(digest)))
    return "ignored";
  // Distribution's manifest delete names the digest only (no media type); a blob's digest is never a tag's.
  const which = DIGEST_PATTERN.test(digest) ? { digest } : TAG_PATTERN.test(tag) ? { name: tag } : null;
  if (action === "delete" && which === null) return "ignored";
  const where = registryRepository(path);
  if (where === null) return "unmapped";
  return action === "push"
    ? { kind: "push", where, path, tag, digest, timeUs, actor }
    : { kind: "delete", where, path, which: which!, timeUs, actor };
}

/** Reads a notification body; InvalidArgumentError when it is not `{"events":[…]}` of at most MAX_EVENTS_PER_NOTIFICATION. */
export function parseNotification(body: unknown): ParsedNotification {
  const events = record(body)?.events;
  if (!Array.isArray(events)) throw new InvalidArgumentError([{ field: "events", description: "must be an array of events" }]);
  if (events.length > MAX_EVENTS_PER_NOTIFICATION)
    throw new InvalidArgumentError([{ field: "events", description: `at most ${MAX_EVENTS_PER_NOTIFICATION} events per notification` }]);
  const parsed: ParsedNotification = { changes: [], ignored: 0, unmapped: [] };
  for (const event of events) {
    const change = changeOf(event);
    if (change === "ignored") parsed.ignored++;
    else if (change === "unmapped") parsed.unmapped.push(text(record(record(event)?.target)?.repository).slice(0, 300));
    else parsed.changes.push(change);
  }
  return parsed;
}
