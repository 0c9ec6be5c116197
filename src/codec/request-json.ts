import {
  fromJson,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
  type Registry,
} from "@bufbuild/protobuf";
import { InvalidArgumentError, invalidField, type FieldViolation } from "../domain/errors.js";

/**
 * A request message from its proto3 JSON form, for every protocol that takes
 * JSON (REST bodies and queries, Connect and gRPC-Web JSON). Throws
 * INVALID_ARGUMENT naming the field: unknown keys and enum names first (the
 * parser's own refusals of those name only the message type), then whatever
 * else the parser refuses. bodyField, when the JSON was built around a REST
 * body, is dropped from violation paths; wholeField names the JSON as a whole
 * ("body" for REST, "request" for the RPC protocols) when no field is to blame.
 */
export function messageFromJson<Desc extends DescMessage>(
  schema: Desc,
  json: JsonObject,
  opts: { bodyField?: string; wholeField?: string; registry: Registry },
): MessageShape<Desc> {
  const bodyField = opts.bodyField ?? "";
  checkKnownFields(schema, json, bodyField);
  checkEnumNames(schema, json, bodyField);
  try {
    return fromJson(schema, json, { registry: opts.registry });
  } catch (err) {
    throw decodeError(err, opts.wholeField ?? "body");
  }
}

/** Types whose JSON form is not an object of their fields (strings, Struct, Any…): fromJson checks those itself. */
const OPAQUE_JSON = /^google\.protobuf\./;
/** Deeper than any of our messages nest; fromJson (which rejects unknown keys too) judges what lies below. */
const MAX_DEPTH = 32;

/**
 * Throws INVALID_ARGUMENT with one BadRequest violation per key of a request
 * body that names no field, as proto3 JSON parsers and grpc-gateway do by
 * default: a misspelt key is a client's mistake to report, not a field to drop
 * (a PATCH `{"descripton": …}` would otherwise succeed and change nothing).
 * Paths use proto names and `[i]` for list items (google.rpc.BadRequest's
 * form); bodyField is dropped, so a key of the resource is named as the
 * resource's own, like every other violation ("nmae", not "group.nmae").
 */
function checkKnownFields(schema: DescMessage, json: JsonObject, bodyField: string): void {
  const violations: FieldViolation[] = [];
  walk(schema, json, "", violations, 0, bodyField);
  if (violations.length > 0) throw new InvalidArgumentError(violations);
}

/**
 * The walk stops at this many unknown keys: the answer names no more than
 * that (MAX_VIOLATIONS in errors.ts), and a body of 400,000 unknown keys must
 * not cost 400,000 violations' worth of work before it is refused.
 */
const MAX_UNKNOWN_KEYS = 20;

function walk(schema: DescMessage, json: JsonObject, prefix: string, out: FieldViolation[], depth: number, bodyField = ""): void {
  for (const key in json) {
    if (out.length >= MAX_UNKNOWN_KEYS) return;
    if (!Object.hasOwn(json, key)) continue;
    const value = json[key]!;
    const field = schema.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field) {
      out.push({ field: `${prefix}${key}`, description: `is not a field of ${schema.typeName}` });
      continue;
    }
    if (value === null || depth >= MAX_DEPTH) continue;
    const path = depth === 0 && field.name === bodyField ? "" : `${prefix}${field.name}`;
    walkValue(field, value, path, out, depth + 1);
  }
}

function walkValue(field: DescField, value: JsonValue, path: string, out: FieldViolation[], depth: number): void {
  const message =
    field.fieldKind === "message" ? field.message : field.fieldKind === "list" && field.listKind === "message" ? field.message : undefined;
  const mapMessage = field.fieldKind === "map" && field.mapKind === "message" ? field.message : undefined;
  const target = message ?? mapMessage;
  if (!target || OPAQUE_JSON.test(target.typeName) || typeof value !== "object" || value === null) return;
  if (field.fieldKind === "list") {
    if (!Array.isArray(value)) return;
    for (let i = 0; i < value.length && out.length < MAX_UNKNOWN_KEYS; i++) {
      const item = value[i];
      if (isObject(item)) walk(target, item, `${path}[${i}].`, out, depth);
    }
  } else if (mapMessage) {
    if (Array.isArray(value)) return;
    for (const [k, item] of Object.entries(value)) {
      if (out.length >= MAX_UNKNOWN_KEYS) return;
      if (isObject(item)) walk(target, item, `${path}[${k}].`, out, depth);
    }
  } else if (isObject(value)) {
    walk(target, value, path === "" ? "" : `${path}.`, out, depth);
  }
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A fromJson failure as INVALID_ARGUMENT naming the field when the message says which. */
function decodeError(err: unknown, wholeField: string): InvalidArgumentError {
  const text = err instanceof Error ? err.message : String(err);
  const m = /cannot decode (?:field|message) ([\w.]+)(?: from JSON)?: (.*)$/s.exec(text);
  const field = m ? m[1]!.split(".").pop()! : wholeField;
  const reason = m ? m[2]!.slice(0, 200) : "is malformed";
  return new InvalidArgumentError([{ field, description: reason }]);
}

/**
 * Throws INVALID_ARGUMENT naming the field when a JSON enum value is a name
 * the enum does not define. bodyField is dropped from violation paths, so a
 * field of the resource is named as the resource's own ("catalog_tier").
 */
function checkEnumNames(schema: DescMessage, json: JsonValue, bodyField: string, prefix = "", depth = 0): void {
  if (depth > 8 || json === null || typeof json !== "object" || Array.isArray(json)) return;
  for (const field of schema.fields) {
    const value = (json as JsonObject)[field.jsonName] ?? (json as JsonObject)[field.name];
    if (value === undefined || value === null) continue;
    const path = prefix === "" && field.name === bodyField ? "" : `${prefix}${field.name}`;
    const next = path === "" ? "" : `${path}.`;
    const enumOf =
      field.fieldKind === "enum"
        ? field.enum
        : field.fieldKind === "list" && field.listKind === "enum"
          ? field.enum
          : field.fieldKind === "map" && field.mapKind === "enum"
            ? field.enum
            : undefined;
    if (enumOf) {
      const values = field.fieldKind === "map" ? Object.values(value as JsonObject) : Array.isArray(value) ? value : [value];
      for (const v of values) {
        if (typeof v === "string" && !enumOf.values.some((e) => e.name === v)) {
          throw invalidField(path || field.name, `${JSON.stringify(v).slice(0, 80)} is not a value of ${enumOf.typeName}`);
        }
      }
    } else if (field.fieldKind === "message") {
      checkEnumNames(field.message, value, bodyField, next, depth + 1);
    } else if (field.fieldKind === "list" && field.listKind === "message" && Array.isArray(value)) {
      for (const item of value) checkEnumNames(field.message, item, bodyField, next, depth + 1);
    } else if (field.fieldKind === "map" && field.mapKind === "message" && typeof value === "object" && !Array.isArray(value)) {
      for (const item of Object.values(value as JsonObject)) checkEnumNames(field.message, item, bodyField, next, depth + 1);
    }
  }
}
