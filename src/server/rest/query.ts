/**
 * Query parameters into request fields, as grpc-gateway's PopulateQueryParameters fills them: every leaf field of
 * the request that neither the path nor the body binds may be given in the query string (or a form body), by its
 * dotted proto or JSON name. Each value is checked and turned into the JSON form the request decoder expects, so a
 * bad one is refused naming the parameter, and a name that is no parameter of the route is refused too.
 */
import { ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { invalidField } from "../../domain/errors.js";
import type { CompiledTemplate } from "./http-template.js";
import { getPath, setPath } from "./json-path.js";

/** How one query parameter maps onto the request message. */
export interface QueryField {
  /** JSON names from the request message down to the field. */
  jsonPath: string[];
  /** The dotted proto-name path, e.g. "uidp.descendants_of". */
  protoPath: string;
  field: DescField;
}

const SCALAR_JSON_NUMBER = new Set([ScalarType.INT32, ScalarType.UINT32, ScalarType.SINT32, ScalarType.FIXED32, ScalarType.SFIXED32]);
const SCALAR_INTEGER = new Set([
  ...SCALAR_JSON_NUMBER,
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);
const STRING_FORM_MESSAGES = new Set(["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"]);

/** Every leaf field reachable as a query parameter, by proto and JSON dotted names. */
export function queryFields(
  message: DescMessage,
  excluded: Set<string>,
  prefix: { proto: string[]; json: string[] },
  out: Map<string, QueryField>,
  depth = 0,
): void {
  if (depth > 4) return;
  for (const field of message.fields) {
    const protoPath = [...prefix.proto, field.name];
    if (excluded.has(protoPath.join("."))) continue;
    const jsonPath = [...prefix.json, field.jsonName];
    const isLeafMessage = field.fieldKind === "message" && STRING_FORM_MESSAGES.has(field.message.typeName);
    if (
      field.fieldKind === "scalar" ||
      field.fieldKind === "enum" ||
      isLeafMessage ||
      (field.fieldKind === "list" && field.listKind !== "message")
    ) {
      const entry = { jsonPath, protoPath: protoPath.join("."), field };
      out.set(protoPath.join("."), entry);
      out.set(jsonPath.join("."), entry);
    } else if (field.fieldKind === "message") {
      queryFields(field.message, excluded, { proto: protoPath, json: jsonPath }, out, depth + 1);
    }
  }
}

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/;

const snakeToCamel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/** Converts one query value to the JSON form fromJson expects for the field; throws INVALID_ARGUMENT. */
function queryValue(name: string, raw: string, field: DescField): JsonValue {
  const scalar =
    field.fieldKind === "scalar" ? field.scalar : field.fieldKind === "list" && field.listKind === "scalar" ? field.scalar : undefined;
  if (scalar === ScalarType.BOOL) {
    if (raw === "true" || raw === "1") return true;
    if (raw === "false" || raw === "0") return false;
    throw invalidField(name, "must be true or false");
  }
  if (scalar !== undefined && SCALAR_INTEGER.has(scalar)) {
    if (!/^-?\d{1,20}$/.test(raw)) throw invalidField(name, "must be an integer");
    if (SCALAR_JSON_NUMBER.has(scalar)) {
      const n = Number(raw);
      const unsigned = scalar === ScalarType.UINT32 || scalar === ScalarType.FIXED32;
      if (n > (unsigned ? 4294967295 : 2147483647) || n < (unsigned ? 0 : -2147483648)) throw invalidField(name, "is out of range");
      return n;
    }
    return raw;
  }
  if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.Timestamp") {
    if (!RFC3339.test(raw) || Number.isNaN(Date.parse(raw)))
      throw invalidField(name, "must be an RFC 3339 timestamp, e.g. 2026-01-02T03:04:05Z");
    return raw;
  }
  if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.FieldMask") {
    return raw
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p !== "")
      .map((p) => p.split(".").map(snakeToCamel).join("."))
      .join(",");
  }
  return raw;
}

/**
 * Writes params into the request's JSON by route's query parameters (its method and template name it when a
 * parameter is not one of them): a repeated field collects every value given, any other field may be given once.
 */
export function applyQuery(
  params: URLSearchParams,
  route: { httpMethod: string; template: CompiledTemplate; query: ReadonlyMap<string, QueryField> },
  json: JsonObject,
): void {
  const seen = new Set<string>();
  for (const [name, raw] of params) {
    const entry = route.query.get(name);
    if (!entry) throw invalidField(name, `is not a query parameter of ${route.httpMethod} ${route.template.source}`);
    const value = queryValue(name, raw, entry.field);
    if (entry.field.fieldKind === "list") {
      const current = getPath(json, entry.jsonPath);
      setPath(json, entry.jsonPath, [...(Array.isArray(current) ? current : []), value]);
    } else {
      const key = entry.jsonPath.join(".");
      if (seen.has(key)) throw invalidField(name, "is given more than once");
      seen.add(key);
      setPath(json, entry.jsonPath, value);
    }
  }
}
