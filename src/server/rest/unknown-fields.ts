import type { DescField, DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { InvalidArgumentError, type FieldViolation } from "../../domain/errors.js";

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
export function checkKnownFields(schema: DescMessage, json: JsonObject, bodyField: string): void {
  const violations: FieldViolation[] = [];
  walk(schema, json, "", violations, 0, bodyField);
  if (violations.length > 0) throw new InvalidArgumentError(violations);
}

function walk(schema: DescMessage, json: JsonObject, prefix: string, out: FieldViolation[], depth: number, bodyField = ""): void {
  for (const [key, value] of Object.entries(json)) {
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
    value.forEach((item, i) => isObject(item) && walk(target, item, `${path}[${i}].`, out, depth));
  } else if (mapMessage) {
    if (Array.isArray(value)) return;
    for (const [k, item] of Object.entries(value)) if (isObject(item)) walk(target, item, `${path}[${k}].`, out, depth);
  } else if (isObject(value)) {
    walk(target, value, path === "" ? "" : `${path}.`, out, depth);
  }
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
