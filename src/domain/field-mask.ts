import { getOption, isFieldSet, type DescMessage, type Message } from "@bufbuild/protobuf";
import type { FieldMask } from "@bufbuild/protobuf/wkt";
import { field_behavior, FieldBehavior } from "../../gen/google/api/field_behavior_pb.js";
import { invalidField } from "./errors.js";

/** Proto names of the fields marked OUTPUT_ONLY on a message. */
function outputOnlyFields(schema: DescMessage): Set<string> {
  const out = new Set<string>();
  for (const field of schema.fields) {
    if (getOption(field, field_behavior).includes(FieldBehavior.OUTPUT_ONLY)) out.add(field.name);
  }
  return out;
}

/**
 * Decides which fields an Update changes (AIP-134):
 * - a mask names exactly the fields to change; "*" means every updatable field;
 *   an output-only or unknown path is INVALID_ARGUMENT on update_mask;
 * - without a mask, every updatable field set in the resource changes. (Over
 *   REST the transcoder infers the mask from the body's keys, so a key sent
 *   with an empty value clears that field.)
 */
export function fieldsToUpdate<T extends Message>(
  schema: DescMessage,
  resource: T,
  mask: FieldMask | undefined,
  updatable: readonly string[],
): Set<string> {
  const paths = (mask?.paths ?? []).filter((p) => p !== "");
  if (paths.length === 0) {
    const out = new Set<string>();
    for (const field of schema.fields) {
      if (updatable.includes(field.name) && isFieldSet(resource, field)) out.add(field.name);
    }
    return out;
  }
  if (paths.length === 1 && paths[0] === "*") return new Set(updatable);
  const outputOnly = outputOnlyFields(schema);
  const out = new Set<string>();
  for (const path of paths) {
    if (updatable.includes(path)) {
      out.add(path);
    } else if (outputOnly.has(path.split(".")[0]!)) {
      throw invalidField("update_mask", `${path} is output only and cannot be updated`);
    } else {
      throw invalidField("update_mask", `${path} is not an updatable field; updatable: ${updatable.join(", ")}`);
    }
  }
  return out;
}
