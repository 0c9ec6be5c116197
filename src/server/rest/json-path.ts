/**
 * Paths into the JSON form of a request message. The transcoder assembles a request as proto3 JSON before it is
 * decoded, writing each query parameter and path variable at the JSON names that lead to its field; these are the
 * steps of that walk, and the one that turns a template variable's proto names into those JSON names.
 */
import type { DescField, DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";

/** Sets value at path, making the objects on the way (in place of anything there that is not one). */
export function setPath(target: JsonObject, path: string[], value: JsonValue): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === undefined || next === null || typeof next !== "object" || Array.isArray(next)) node[key] = {};
    node = node[key] as JsonObject;
  }
  node[path[path.length - 1]!] = value;
}

/** The value at path, or undefined when something on the way is not an object. */
export function getPath(json: JsonObject, path: string[]): JsonValue | undefined {
  let node: JsonValue | undefined = json;
  for (const key of path) {
    if (node === null || typeof node !== "object" || Array.isArray(node)) return undefined;
    node = node[key];
  }
  return node;
}

/** The JSON names of a proto field path from message down; throws (at start-up) when a name is not a field. */
export function jsonPathOf(message: DescMessage, protoPath: string[]): string[] {
  const out: string[] = [];
  let current: DescMessage | undefined = message;
  for (const name of protoPath) {
    const field: DescField | undefined = current?.fields.find((f) => f.name === name);
    if (!field) throw new Error(`template variable ${protoPath.join(".")} names no field of ${message.typeName}`);
    out.push(field.jsonName);
    current = field.fieldKind === "message" ? field.message : undefined;
  }
  return out;
}
