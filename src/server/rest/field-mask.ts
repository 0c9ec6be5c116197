/**
 * The update mask a request without one implies, as grpc-gateway's FieldMaskFromRequestBody infers it: when a
 * method's request has an update_mask beside a message carried as the HTTP body (a PATCH), a caller who names no
 * mask updates the fields the body's keys name. Output-only keys are ignored rather than rejected (unknown ones
 * are refused when the request is decoded, by checkKnownFields).
 */
import { getOption, type DescMessage } from "@bufbuild/protobuf";
import { field_behavior, FieldBehavior } from "../../../gen/google/api/field_behavior_pb.js";

/** The message of the body field whose keys imply update_mask, or null when the method has no mask to infer. */
export function maskedBodyMessage(input: DescMessage, body: string): DescMessage | null {
  const maskField = input.fields.find((f) => f.name === "update_mask");
  const bodyField = input.fields.find((f) => f.name === body);
  return maskField && bodyField?.fieldKind === "message" ? bodyField.message : null;
}

/** The update mask body implies: its keys that name writable fields of resource, as JSON names joined by ",". */
export function inferredMask(resource: DescMessage, body: unknown): string {
  if (typeof body !== "object" || body === null) return "";
  const paths: string[] = [];
  for (const key of Object.keys(body)) {
    const field = resource.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field || getOption(field, field_behavior).includes(FieldBehavior.OUTPUT_ONLY)) continue;
    paths.push(field.jsonName);
  }
  return paths.join(",");
}
