import { create, isMessage, toJson, type DescMessage, type JsonObject, type JsonValue, type Message, type Registry } from "@bufbuild/protobuf";

/**
 * How to fix up one message's proto3 JSON: which fields hold timestamps and
 * which hold nested messages. Computed once per message type.
 */
interface JsonPlan {
  timestamps: string[];
  nested: { jsonName: string; plan: JsonPlan; shape: "single" | "list" | "map" }[];
  dropIfEmpty: string[];
}

const plans = new WeakMap<DescMessage, JsonPlan | null>();

function planOf(schema: DescMessage, seen = new Set<DescMessage>()): JsonPlan | null {
  if (plans.has(schema)) return plans.get(schema)!;
  if (seen.has(schema)) return null;
  seen.add(schema);
  const plan: JsonPlan = { timestamps: [], nested: [], dropIfEmpty: [] };
  for (const field of schema.fields) {
    if (field.name === "next_page_token") plan.dropIfEmpty.push(field.jsonName);
    const message =
      field.fieldKind === "message" ? field.message
      : field.fieldKind === "list" && field.listKind === "message" ? field.message
      : field.fieldKind === "map" && field.mapKind === "message" ? field.message
      : undefined;
    if (!message) continue;
    if (message.typeName === "google.protobuf.Timestamp") {
      if (field.fieldKind === "message") plan.timestamps.push(field.jsonName);
      continue;
    }
    const inner = planOf(message, seen);
    if (inner) {
      const shape = field.fieldKind === "list" ? "list" : field.fieldKind === "map" ? "map" : "single";
      plan.nested.push({ jsonName: field.jsonName, plan: inner, shape });
    }
  }
  const useful = plan.timestamps.length + plan.nested.length + plan.dropIfEmpty.length > 0 ? plan : null;
  plans.set(schema, useful);
  return useful;
}

/** RFC 3339 UTC with exactly three fractional digits, e.g. 2026-01-02T03:04:05.000Z. */
export function millisTimestamp(value: string): string {
  return value.replace(/(?:\.(\d+))?Z$/, (_, frac: string | undefined) => `.${(frac ?? "").padEnd(3, "0").slice(0, 3)}Z`);
}

function fix(json: JsonObject, plan: JsonPlan): void {
  for (const name of plan.timestamps) {
    const v = json[name];
    if (typeof v === "string") json[name] = millisTimestamp(v);
  }
  for (const name of plan.dropIfEmpty) if (json[name] === "") delete json[name];
  for (const { jsonName, plan: inner, shape } of plan.nested) {
    const v = json[jsonName];
    if (v === undefined || v === null) continue;
    if (shape === "single") fix(v as JsonObject, inner);
    else if (shape === "list") for (const item of v as JsonObject[]) fix(item, inner);
    else for (const item of Object.values(v as JsonObject)) fix(item as JsonObject, inner);
  }
}

/**
 * The REST form of a response (DESIGN.md): proto3 JSON with unpopulated fields
 * emitted, int64 as strings, timestamps with exactly three fractional digits,
 * and nextPageToken left out on the last page.
 */
export function responseJson(schema: DescMessage, value: unknown, registry: Registry): JsonValue {
  const message = isMessage(value, schema) ? value : create(schema, value as never);
  const json = toJson(schema, message as Message, { alwaysEmitImplicit: true, registry });
  const plan = planOf(schema);
  if (plan && json !== null && typeof json === "object" && !Array.isArray(json)) fix(json, plan);
  return json;
}
