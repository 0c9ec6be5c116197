import { getOption, ScalarType, type DescField, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { http } from "../../gen/google/api/annotations_pb.js";
import { InvalidArgumentError, type FieldViolation } from "./errors.js";

/**
 * Text fields where a tab and line breaks make sense (free prose, a pasted
 * JWKS document). Every other text field (uids, names, filters, patterns,
 * emails, tokens) takes no C0 control character at all. A field's own rule
 * may still be stricter: a group description refuses line breaks too.
 */
const MULTILINE_FIELDS: ReadonlySet<string> = new Set(["description", "issuer_keys"]);

/** Deeper than any request nests (a Struct could go on); what lies below is not walked. */
const MAX_DEPTH = 32;
// The patterns are about control characters, so they name some.
/* eslint-disable no-control-regex */
/** Any C0 control character (U+0000–U+001F). */
const ANY_CONTROL = /[\u0000-\u001f]/;
/** Any C0 control character but tab, line feed and carriage return. */
const CONTROL_BUT_LINE_BREAKS = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/;
/* eslint-enable no-control-regex */

/**
 * The violation for a text holding a C0 control character, or null: NUL
 * breaks PostgreSQL, and the rest have no meaning in a name, a uid or a
 * filter. A multi-line field takes tabs and line breaks.
 */
function controlCharacterViolation(field: string, text: string, multiline = false): FieldViolation | null {
  const found = (multiline ? CONTROL_BUT_LINE_BREAKS : ANY_CONTROL).exec(text);
  if (!found) return null;
  const code = `U+${found[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
  const allowed = multiline ? "printable text, tabs and line breaks" : "printable text";
  return { field, description: `holds the control character ${code}; only ${allowed} is accepted` };
}

/** The REST body field of each method ("" for none or the whole request), found once. */
const BODY_FIELDS = new WeakMap<DescMethod, string>();

function bodyFieldOf(method: DescMethod): string {
  let body = BODY_FIELDS.get(method);
  if (body === undefined) {
    body = getOption(method, http).body;
    if (body === "*") body = "";
    BODY_FIELDS.set(method, body);
  }
  return body;
}

/**
 * The first text field of a request that holds a control character its
 * field does not accept, or null. Paths use proto names and `[i]`/`[key]`
 * for items, and leave out the method's REST body field, so a field of the
 * resource is named as the resource's own ("description", not
 * "group.description"), like every other violation, on every protocol.
 */
function requestTextViolation(method: DescMethod, request: unknown): FieldViolation | null {
  const body = bodyFieldOf(method);
  return messageViolation(method.input, request, "", 0, body);
}

/**
 * Throws INVALID_ARGUMENT naming the field when any text of the request holds
 * a control character its field does not accept (NUL anywhere): every
 * protocol's request passes here before its handler, so nothing such is
 * stored, and no filter with a NUL reaches PostgreSQL.
 */
export function rejectControlCharacters(method: DescMethod, request: unknown): void {
  const violation = requestTextViolation(method, request);
  if (violation) throw new InvalidArgumentError([violation]);
}

/** The fields of each message type that can hold text at any depth, found once per type. */
const TEXT_FIELDS = new WeakMap<DescMessage, readonly DescField[]>();

/** The fields of schema the walk must visit: the others can hold no text, however deep. */
function textFieldsOf(schema: DescMessage): readonly DescField[] {
  let fields = TEXT_FIELDS.get(schema);
  if (fields === undefined) {
    fields = schema.fields.filter((f) => holdsTextDirectly(f) || (f.message !== undefined && reachesText(f.message)));
    TEXT_FIELDS.set(schema, fields);
  }
  return fields;
}

/** A string value or a string map key in the field itself. */
function holdsTextDirectly(field: DescField): boolean {
  if (field.fieldKind === "map" && field.mapKey === ScalarType.STRING) return true;
  return field.scalar === ScalarType.STRING;
}

/** Whether any message type reachable from schema (itself included, cycles too) has a text field. */
function reachesText(schema: DescMessage): boolean {
  const seen = new Set<DescMessage>();
  const stack = [schema];
  while (stack.length > 0) {
    const message = stack.pop()!;
    if (seen.has(message)) continue;
    seen.add(message);
    for (const field of message.fields) {
      if (holdsTextDirectly(field)) return true;
      if (field.message) stack.push(field.message);
    }
  }
  return false;
}

function messageViolation(schema: DescMessage, message: unknown, prefix: string, depth: number, bodyField = ""): FieldViolation | null {
  if (depth > MAX_DEPTH || typeof message !== "object" || message === null) return null;
  const fields = message as Record<string, unknown>;
  for (const field of textFieldsOf(schema)) {
    let value: unknown;
    if (field.oneof) {
      const chosen = fields[field.oneof.localName] as { case?: string; value?: unknown } | undefined;
      if (chosen?.case !== field.localName) continue;
      value = chosen.value;
    } else {
      value = fields[field.localName];
    }
    if (value === undefined || value === null) continue;
    const path = depth === 0 && field.name === bodyField ? "" : `${prefix}${field.name}`;
    const found = fieldViolation(field, value, path || field.name, path === "" ? "" : `${path}.`, depth);
    if (found) return found;
  }
  return null;
}

/** The violation in one field's value; path names the field, next prefixes its message's fields. */
function fieldViolation(field: DescField, value: unknown, path: string, next: string, depth: number): FieldViolation | null {
  const multiline = MULTILINE_FIELDS.has(field.name);
  switch (field.fieldKind) {
    case "scalar":
      return field.scalar === ScalarType.STRING && typeof value === "string" ? controlCharacterViolation(path, value, multiline) : null;
    case "message":
      return messageViolation(field.message, value, next, depth + 1);
    case "list": {
      if (!Array.isArray(value)) return null;
      for (let i = 0; i < value.length; i++) {
        const found = itemViolation(field, field.listKind, value[i], `${path}[${i}]`, multiline, depth);
        if (found) return found;
      }
      return null;
    }
    case "map": {
      if (typeof value !== "object") return null;
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        // A key is named by its map alone: it cannot name itself in a path.
        const badKey = controlCharacterViolation(path, key);
        if (badKey) return { field: path, description: `has a key that ${badKey.description}` };
        const found = itemViolation(field, field.mapKind, item, `${path}[${key}]`, multiline, depth);
        if (found) return found;
      }
      return null;
    }
    default:
      return null;
  }
}

/** The violation in one item of a list or a map; path names the item. */
function itemViolation(
  field: DescField & { fieldKind: "list" | "map" },
  kind: "message" | "scalar" | "enum",
  item: unknown,
  path: string,
  multiline: boolean,
  depth: number,
): FieldViolation | null {
  if (kind === "message" && field.message) return messageViolation(field.message, item, `${path}.`, depth + 1);
  if (kind === "scalar" && field.scalar === ScalarType.STRING && typeof item === "string") {
    return controlCharacterViolation(path, item, multiline);
  }
  return null;
}

/** Deeper than any stored record nests. */
const MAX_RECORD_DEPTH = 16;

/**
 * The path of the first text in a stored record (or a store call's argument)
 * that holds a NUL, which PostgreSQL cannot store in text or JSON, or null.
 * Walks strings, arrays and plain objects, keys included ("claims" names a
 * map whose key holds one); bytes, functions and other objects are left out.
 */
export function nulFieldOf(value: unknown, path = "", depth = 0): string | null {
  if (typeof value === "string") return value.includes("\u0000") ? path || "value" : null;
  if (depth > MAX_RECORD_DEPTH || typeof value !== "object" || value === null) return null;
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) {
      const found = nulFieldOf(item, `${path}[${i}]`, depth + 1);
      if (found !== null) return found;
    }
    return null;
  }
  if (Object.getPrototypeOf(value) !== Object.prototype) return null;
  for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
    if (key.includes("\u0000")) return path || "value";
    const found = nulFieldOf(item, path === "" ? key : `${path}.${key}`, depth + 1);
    if (found !== null) return found;
  }
  return null;
}
