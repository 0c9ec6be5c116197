import { createHash } from "node:crypto";
import type { AdvisoryEventRecord, AdvisoryRecord } from "../store/store.js";

/**
 * OSV records (https://ossf.github.io/osv-schema/) as advisories: pure
 * functions from parsed JSON to records. One advisory per affected package
 * of a record, with uids derived from the record, so a re-import finds and
 * updates what an earlier import wrote.
 */

/** The author (and reviewer) of everything the import writes. */
const IMPORT_AUTHOR = "osv-import";

/** ReviewState number: the source database has already reviewed what it publishes. */
const REVIEW_STATE_APPROVED = 2;

/** Severity.Type numbers by OSV severity type; other types (e.g. "Ubuntu") are not kept. */
const SEVERITY_TYPES: Record<string, number> = { CVSS_V2: 1, CVSS_V3: 2, CVSS_V4: 3 };

/** Go's zero time, which some databases write for an unknown time. */
const ZERO_TIME = Date.parse("0001-01-01T00:00:00Z");
const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/i;

/** One affected package of an OSV record, with the fix versions of its ranges in order. */
export interface OsvPackage {
  ecosystem: string;
  name: string;
  fixed: string[];
}

/** The parts of a validated OSV record the import uses. Times are ms since the epoch; null when absent or unknown. */
export interface OsvRecord {
  id: string;
  aliases: string[];
  published: number | null;
  modified: number | null;
  withdrawn: number | null;
  severity: { type: string; score: string }[];
  affected: OsvPackage[];
}

/** A record that cannot be imported: its id when it has one, and every problem found. */
export interface OsvInvalid {
  id: string | null;
  problems: string[];
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const isText = (v: unknown): v is string => typeof v === "string" && v !== "";

/** An optional RFC 3339 time; null when absent or the zero time, undefined when malformed. */
function time(v: unknown): number | null | undefined {
  if (v === undefined) return null;
  if (typeof v !== "string" || !RFC3339.test(v)) return undefined;
  const ms = Date.parse(v);
  if (Number.isNaN(ms)) return undefined;
  return ms === ZERO_TIME ? null : ms;
}

/** The fix versions of one affected entry's ranges, or a problem. */
function fixedVersions(ranges: unknown, at: string, problems: string[]): string[] {
  if (ranges === undefined) return [];
  if (!Array.isArray(ranges)) {
    problems.push(`${at}.ranges must be an array`);
    return [];
  }
  const out: string[] = [];
  ranges.forEach((range: unknown, i) => {
    const events = isObject(range) ? range.events : undefined;
    if (!Array.isArray(events) || !events.every(isObject)) {
      problems.push(`${at}.ranges[${i}].events must be an array of objects`);
      return;
    }
    events.forEach((event, j) => {
      if (event.fixed === undefined) return;
      if (isText(event.fixed)) out.push(event.fixed);
      else problems.push(`${at}.ranges[${i}].events[${j}].fixed must be a non-empty string`);
    });
  });
  return out;
}

/** The affected packages, merging entries that name the same package. */
function affectedPackages(affected: unknown, problems: string[]): OsvPackage[] {
  if (affected === undefined || (Array.isArray(affected) && affected.length === 0)) {
    problems.push("no affected packages");
    return [];
  }
  if (!Array.isArray(affected)) {
    problems.push("affected must be an array");
    return [];
  }
  const byPackage = new Map<string, OsvPackage>();
  affected.forEach((entry: unknown, i) => {
    const pkg = isObject(entry) ? entry.package : undefined;
    if (!isObject(pkg) || !isText(pkg.ecosystem) || !isText(pkg.name)) {
      problems.push(`affected[${i}].package must be an object with a non-empty string ecosystem and name`);
      return;
    }
    const fixed = fixedVersions((entry as Json).ranges, `affected[${i}]`, problems);
    const key = `${pkg.ecosystem}\u0000${pkg.name}`;
    const known = byPackage.get(key) ?? { ecosystem: pkg.ecosystem, name: pkg.name, fixed: [] };
    for (const v of fixed) if (!known.fixed.includes(v)) known.fixed.push(v);
    byPackage.set(key, known);
  });
  return [...byPackage.values()];
}

function severities(severity: unknown, problems: string[]): OsvRecord["severity"] {
  if (severity === undefined) return [];
  if (!Array.isArray(severity) || !severity.every((s) => isObject(s) && isText(s.type) && isText(s.score))) {
    problems.push("severity must be an array of objects with a string type and score");
    return [];
  }
  return severity.map((s: Json) => ({ type: s.type as string, score: s.score as string }));
}

/** Validates a parsed OSV document; returns the record, or its id and every problem found. */
export function parseOsv(doc: unknown): OsvRecord | OsvInvalid {
  if (!isObject(doc)) return { id: null, problems: ["not an OSV record: expected a JSON object"] };
  const problems: string[] = [];
  const id = isText(doc.id) ? doc.id : null;
  if (id === null) problems.push(doc.id === undefined ? "missing id" : "id must be a non-empty string");
  const aliases = doc.aliases ?? [];
  if (!Array.isArray(aliases) || !aliases.every(isText)) problems.push("aliases must be an array of strings");
  const times = { published: time(doc.published), modified: time(doc.modified), withdrawn: time(doc.withdrawn) };
  for (const [field, value] of Object.entries(times)) {
    if (value === undefined) problems.push(`${field} must be an RFC 3339 time`);
  }
  const severity = severities(doc.severity, problems);
  const affected = affectedPackages(doc.affected, problems);
  if (problems.length > 0 || id === null) return { id, problems };
  return {
    id,
    aliases: [...new Set(aliases as string[])],
    published: times.published ?? null,
    modified: times.modified ?? null,
    withdrawn: times.withdrawn ?? null,
    severity,
    affected,
  };
}

/** True when parseOsv found problems. */
export function isInvalid(r: OsvRecord | OsvInvalid): r is OsvInvalid {
  return "problems" in r;
}

/** 16 hex characters of a sha256 over the parts: a stable child uid segment. */
function segment(...parts: string[]): string {
  return createHash("sha256").update(parts.join("\u0000")).digest("hex").slice(0, 16);
}

/** The uid of the advisory for one package of one OSV record in group: the same on every import. */
function advisoryUid(group: string, osvId: string, pkg: { ecosystem: string; name: string }): string {
  return `${group}/${segment(osvId, pkg.ecosystem, pkg.name)}`;
}

function event(advisory: string, createTime: number, type: string, data: Record<string, unknown>, key: string): AdvisoryEventRecord {
  return {
    uid: `${advisory}/${segment(type, key)}`,
    createTime,
    author: IMPORT_AUTHOR,
    reviewer: IMPORT_AUTHOR,
    reviewState: REVIEW_STATE_APPROVED,
    issue: null,
    type,
    data,
  };
}

/**
 * The advisories of one OSV record in group. The record's own times are used
 * where it has them (created at publication, updated at modification, deleted
 * at withdrawal); importTime stands in for unknown ones. Each advisory has a
 * manual detection at its creation and a fixed event per fix version at its
 * update, all approved.
 */
export function advisoriesFromOsv(record: OsvRecord, group: string, importTime: number): AdvisoryRecord[] {
  const createTime = record.published ?? record.modified ?? importTime;
  const updateTime = Math.max(createTime, record.modified ?? createTime);
  const severities = record.severity
    .filter((s) => s.type in SEVERITY_TYPES)
    .map((s) => ({ type: SEVERITY_TYPES[s.type]!, score: s.score }));
  return record.affected.map((pkg) => {
    const uid = advisoryUid(group, record.id, pkg);
    return {
      uid,
      parentUid: group,
      advisoryId: record.id,
      legacyAdvisoryId: "",
      author: IMPORT_AUTHOR,
      artifactName: pkg.name,
      artifactType: "library",
      artifactArchitecture: "",
      componentName: pkg.name,
      componentLocation: "",
      componentType: pkg.ecosystem.toLowerCase(),
      origin: pkg.name,
      aliases: record.aliases,
      severities,
      events: [
        event(uid, createTime, "detection", { manual: {} }, ""),
        ...pkg.fixed.map((v) => event(uid, updateTime, "fixed", { fixedVersion: v }, v)),
      ],
      createTime,
      updateTime,
      deleteTime: record.withdrawn,
    };
  });
}
