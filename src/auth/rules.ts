import { getOption, hasOption, type DescField, type DescMethod } from "@bufbuild/protobuf";
import { iam, iam_scope } from "../../gen/platformapi/annotations/v1/iam_pb.js";
import type { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";

/** The authorization rule of one RPC, read from its (platformapi.annotations.v1.iam) option. */
export type MethodRule =
  | { mode: "disabled" }
  | {
      mode: "enabled";
      capabilities: readonly Capability[];
      unscoped: boolean;
      /** localName path to the scope uid for a scoped method, e.g. ["group", "uid"] or ["parent"]. */
      scopePath: readonly string[] | null;
      /** The same path in proto names, for error messages: "group.uid". */
      scopeField: string | null;
    };

/**
 * Reads a method's rule. Throws when the method declares none, or declares a
 * scoped rule without marking a scope field: every RPC must say how it is
 * authorized, and the server refuses to start otherwise.
 */
export function methodRule(method: DescMethod): MethodRule {
  if (!hasOption(method, iam)) throw new Error(`${method.parent.typeName}.${method.name} has no iam option`);
  const option = getOption(method, iam);
  if (option.mode.case === "disabled") return { mode: "disabled" };
  if (option.mode.case !== "enabled") throw new Error(`${method.parent.typeName}.${method.name} has an empty iam option`);
  const rules = option.mode.value;
  const found = rules.unscoped ? null : findScopePath(method.input.fields);
  const scopePath = found?.map((f) => f.localName) ?? null;
  const scopeField = found?.map((f) => f.name).join(".") ?? null;
  if (!rules.unscoped && scopePath === null) {
    throw new Error(`${method.parent.typeName}.${method.name} is scoped but marks no iam_scope field`);
  }
  return { mode: "enabled", capabilities: rules.capabilities, unscoped: rules.unscoped, scopePath, scopeField };
}

function findScopePath(fields: readonly DescField[]): DescField[] | null {
  for (const field of fields) {
    if (!getOption(field, iam_scope)) continue;
    if (field.fieldKind === "scalar") return [field];
    if (field.fieldKind === "message") {
      const inner = findScopePath(field.message.fields);
      return inner ? [field, ...inner] : null;
    }
  }
  return null;
}
