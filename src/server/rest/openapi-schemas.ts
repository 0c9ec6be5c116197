import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { field_behavior, FieldBehavior } from "../../../gen/google/api/field_behavior_pb.js";
import { DESCRIPTION_PATTERN, NAME_MAX, NAME_MIN, NAME_PATTERN } from "../../domain/names.js";
import { BUNDLES, DIGEST_PATTERN, LIST_MAX, REPO_NAME_MAX, REPO_NAME_PATTERN, TAG_PATTERN } from "../../domain/registry-names.js";

export type Schema = Record<string, unknown>;

/**
 * Which side of the wire a schema describes. "output": a response, every
 * field the server always writes is required, input-only fields are never
 * required. "input": a Create body, the REQUIRED fields and no output-only
 * ones. "patch": an Update body, where every field is optional.
 */
export type SchemaMode = "output" | "input" | "patch";

const WELL_KNOWN: Record<string, Schema> = {
  "google.protobuf.Timestamp": { type: "string", format: "date-time", examples: ["2026-01-02T03:04:05.000Z"] },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]+)?s$", examples: ["86400s"] },
  "google.protobuf.FieldMask": { type: "string", description: "Comma-separated field paths" },
  "google.protobuf.Empty": { type: "object" },
  "google.protobuf.Any": { type: "object", properties: { "@type": { type: "string" } }, additionalProperties: true },
};

const NAME_RULE = { pattern: NAME_PATTERN.source, minLength: NAME_MIN, maxLength: NAME_MAX };
const DESCRIPTION_RULE = { pattern: DESCRIPTION_PATTERN.source, maxLength: 512 };
const BUNDLES_RULE = { maxItems: LIST_MAX, items: { type: "string", enum: BUNDLES } };

/** The rules the services enforce on input (src/domain/names.ts, registry-names.ts), by "message.field". */
const INPUT_RULES: Record<string, Schema> = {
  "platformapi.iam.v2beta1.Group.name": NAME_RULE,
  "platformapi.iam.v2beta1.Group.description": DESCRIPTION_RULE,
  "platformapi.iam.v2beta1.Identity.name": NAME_RULE,
  "platformapi.iam.v2beta1.Identity.description": DESCRIPTION_RULE,
  "platformapi.iam.v2beta1.Identity.company": DESCRIPTION_RULE,
  "platformapi.iam.v2beta1.IdentityProvider.name": NAME_RULE,
  "platformapi.iam.v2beta1.IdentityProvider.description": DESCRIPTION_RULE,
  "platformapi.iam.v2beta1.Role.name": { minLength: 1, maxLength: 63 },
  "platformapi.iam.v2beta1.Role.description": DESCRIPTION_RULE,
  "platformapi.iam.v2beta1.AccountAssociation.description": DESCRIPTION_RULE,
  "platformapi.registry.v2beta1.Repo.name": { pattern: REPO_NAME_PATTERN.source, minLength: 1, maxLength: REPO_NAME_MAX },
  "platformapi.registry.v2beta1.Repo.description": DESCRIPTION_RULE,
  "platformapi.registry.v2beta1.Repo.bundles": BUNDLES_RULE,
  "platformapi.registry.v2beta1.Tag.name": { pattern: TAG_PATTERN.source, maxLength: 128 },
  "platformapi.registry.v2beta1.Tag.digest": { pattern: DIGEST_PATTERN.source },
  "platformapi.registry.v2beta1.Tag.bundles": BUNDLES_RULE,
};

/** Paging parameters every List takes; the server rejects negative values (src/services/paging/paging.ts). */
const QUERY_RULES: Record<string, Schema> = { page_size: { minimum: 0 }, skip: { minimum: 0 } };

function scalarSchema(scalar: ScalarType): Schema {
  switch (scalar) {
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BYTES:
      return { type: "string", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return { type: "number" };
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return { type: "string", format: "int64", pattern: "^-?[0-9]+$" };
    default:
      return { type: "integer", format: "int32" };
  }
}

const behaviorOf = (f: DescField) => getOption(f, field_behavior);

/** True when the REST writer (src/codec/json.ts) always writes the field, so a response has it. */
function alwaysWritten(f: DescField): boolean {
  if (f.oneof || f.name === "next_page_token") return false;
  if (f.fieldKind === "list" || f.fieldKind === "map") return true;
  return f.fieldKind !== "message" && f.presence !== FeatureSet_FieldPresence.EXPLICIT;
}

/**
 * Builds JSON Schemas (proto3 JSON form) from message descriptors into one
 * components.schemas map: a response form per message, plus "_Input" and
 * "_Patch" forms for messages sent in Create and Update bodies.
 */
export class SchemaBuilder {
  readonly schemas: Record<string, Schema> = {};

  constructor(private readonly comments: ReadonlyMap<string, string>) {}

  private ref(name: string): Schema {
    return { $ref: `#/components/schemas/${name}` };
  }

  /** The comment of a declaration, as a description member (or nothing). */
  describe(fullName: string): Schema {
    const text = this.comments.get(fullName);
    return text === undefined ? {} : { description: text };
  }

  enum(e: DescEnum): Schema {
    this.schemas[e.typeName] ??= { type: "string", enum: e.values.map((v) => v.name), ...this.describe(e.typeName) };
    return this.ref(e.typeName);
  }

  /** A reference to the message's schema in this mode, building it on first use. */
  message(m: DescMessage, mode: SchemaMode): Schema {
    const known = WELL_KNOWN[m.typeName];
    if (known) return known;
    // Request messages are only ever inputs: they keep their plain name.
    const name = mode === "output" || m.typeName.endsWith("Request") ? m.typeName : `${m.typeName}_${mode === "input" ? "Input" : "Patch"}`;
    if (this.schemas[name]) return this.ref(name);
    this.schemas[name] = {}; // a placeholder for recursive types
    const properties: Record<string, Schema> = {};
    const required: string[] = [];
    for (const f of m.fields) {
      const behavior = behaviorOf(f);
      if (mode !== "output" && behavior.includes(FieldBehavior.OUTPUT_ONLY)) continue;
      properties[f.jsonName] = this.field(f, mode);
      const isRequired =
        mode === "output"
          ? alwaysWritten(f) && !behavior.includes(FieldBehavior.INPUT_ONLY)
          : mode === "input" && behavior.includes(FieldBehavior.REQUIRED);
      if (isRequired) required.push(f.jsonName);
    }
    const oneofs = m.oneofs.map((o) => `At most one of: ${o.fields.map((f) => f.jsonName).join(", ")}.`);
    const description = [this.comments.get(m.typeName), ...oneofs].filter((t) => t !== undefined).join("\n\n");
    this.schemas[name] = {
      type: "object",
      ...(description !== "" ? { description } : {}),
      properties,
      ...(required.length > 0 ? { required } : {}),
    };
    return this.ref(name);
  }

  /** One element of a field: its scalar, enum or message schema. */
  value(f: DescField, mode: SchemaMode): Schema {
    if (f.fieldKind === "scalar" || (f.fieldKind === "list" && f.listKind === "scalar")) return scalarSchema(f.scalar!);
    if (f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind === "enum")) return this.enum(f.enum!);
    if (f.fieldKind === "map")
      return f.mapKind === "scalar" ? scalarSchema(f.scalar) : f.mapKind === "enum" ? this.enum(f.enum) : this.message(f.message, mode);
    return this.message(f.message!, mode);
  }

  /** A field as a property: its comment, output-only/input-only notes and, on input, the rules the server enforces. */
  field(f: DescField, mode: SchemaMode): Schema {
    const behavior = behaviorOf(f);
    const rules = mode === "output" ? {} : (INPUT_RULES[`${f.parent.typeName}.${f.name}`] ?? {});
    const notes = {
      ...this.describe(`${f.parent.typeName}.${f.name}`),
      ...(behavior.includes(FieldBehavior.OUTPUT_ONLY) ? { readOnly: true } : {}),
      ...(behavior.includes(FieldBehavior.INPUT_ONLY) ? { writeOnly: true } : {}),
    };
    if (f.fieldKind === "list") return { type: "array", items: this.value(f, mode), ...notes, ...rules };
    if (f.fieldKind === "map") return { type: "object", additionalProperties: this.value(f, mode), ...notes };
    const schema = this.value(f, mode);
    if ("$ref" in schema) return { ...schema, ...notes };
    return { ...schema, ...notes, ...rules };
  }

  /** A query parameter's schema: the field's, with the paging rules. */
  query(f: DescField): Schema {
    const item = { ...this.value(f, "input"), ...(QUERY_RULES[f.name] ?? {}) };
    return f.fieldKind === "list" ? { type: "array", items: item } : item;
  }
}
