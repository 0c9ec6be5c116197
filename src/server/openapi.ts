import { getOption, ScalarType, type DescEnum, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { FieldBehavior, field_behavior } from "../../gen/google/api/field_behavior_pb.js";
import { methodRule } from "../auth/rules.js";
import type { RestOperation } from "./rest-transcoder.js";

type Schema = Record<string, unknown>;

const WELL_KNOWN: Record<string, Schema> = {
  "google.protobuf.Timestamp": { type: "string", format: "date-time", examples: ["2026-01-02T03:04:05.000Z"] },
  "google.protobuf.Duration": { type: "string", pattern: "^-?[0-9]+(\\.[0-9]+)?s$", examples: ["86400s"] },
  "google.protobuf.FieldMask": { type: "string", description: "Comma-separated field paths" },
  "google.protobuf.Empty": { type: "object" },
  "google.protobuf.Any": { type: "object", properties: { "@type": { type: "string" } }, additionalProperties: true },
};

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

/**
 * Builds the OpenAPI 3.1 document from the REST operations the transcoder
 * serves: paths and parameters from the google.api.http rules, request and
 * response schemas in proto3 JSON form from the descriptors, the error body,
 * and bearer authentication from each method's iam option.
 */
export function openApiDocument(operations: readonly RestOperation[], info: { title: string; version: string; serverUrl: string }): Schema {
  const schemas: Record<string, Schema> = {};
  const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

  function enumRef(e: DescEnum): Schema {
    if (!schemas[e.typeName]) schemas[e.typeName] = { type: "string", enum: e.values.map((v) => v.name) };
    return ref(e.typeName);
  }

  function messageRef(m: DescMessage): Schema {
    if (WELL_KNOWN[m.typeName]) return WELL_KNOWN[m.typeName]!;
    if (!schemas[m.typeName]) {
      schemas[m.typeName] = {}; // placeholder for recursive types
      const properties: Record<string, Schema> = {};
      const required: string[] = [];
      for (const f of m.fields) {
        properties[f.jsonName] = fieldSchema(f);
        if (getOption(f, field_behavior).includes(FieldBehavior.REQUIRED)) required.push(f.jsonName);
      }
      const oneofs = m.oneofs.map((o) => o.fields.map((f) => f.jsonName).join(", "));
      schemas[m.typeName] = {
        type: "object",
        properties,
        ...(required.length > 0 ? { required } : {}),
        ...(oneofs.length > 0 ? { description: oneofs.map((o) => `At most one of: ${o}.`).join(" ") } : {}),
      };
    }
    return ref(m.typeName);
  }

  function valueSchema(f: DescField): Schema {
    if (f.fieldKind === "scalar" || (f.fieldKind === "list" && f.listKind === "scalar")) return scalarSchema(f.scalar!);
    if (f.fieldKind === "enum" || (f.fieldKind === "list" && f.listKind === "enum")) return enumRef(f.enum!);
    return messageRef(f.message!);
  }

  function fieldSchema(f: DescField): Schema {
    const behavior = getOption(f, field_behavior);
    const notes = {
      ...(behavior.includes(FieldBehavior.OUTPUT_ONLY) ? { readOnly: true } : {}),
      ...(behavior.includes(FieldBehavior.INPUT_ONLY) ? { writeOnly: true } : {}),
    };
    if (f.fieldKind === "list") return { type: "array", items: valueSchema(f), ...notes };
    if (f.fieldKind === "map") {
      const value = f.mapKind === "scalar" ? scalarSchema(f.scalar) : f.mapKind === "enum" ? enumRef(f.enum) : messageRef(f.message);
      return { type: "object", additionalProperties: value, ...notes };
    }
    const schema = valueSchema(f);
    return Object.keys(notes).length > 0 ? { allOf: [schema], ...notes } : schema;
  }

  function fieldAt(m: DescMessage, path: string): DescField | undefined {
    let current: DescMessage | undefined = m;
    let field: DescField | undefined;
    for (const name of path.split(".")) {
      field = current?.fields.find((f) => f.name === name);
      current = field?.fieldKind === "message" ? field.message : undefined;
    }
    return field;
  }

  const paths: Record<string, Record<string, Schema>> = {};
  schemas["google.rpc.Status"] = {
    type: "object",
    description: "The error body (AIP-193): a google.rpc code, a message, and typed details with exactly one ErrorInfo.",
    properties: {
      code: { type: "integer", format: "int32" },
      message: { type: "string" },
      details: { type: "array", items: WELL_KNOWN["google.protobuf.Any"] },
    },
    required: ["code", "message", "details"],
  };

  for (const op of operations) {
    const rule = methodRule(op.descriptor);
    const openPath = op.path.replace(/\{([^}=]+)(=[^}]*)?\}/g, "{$1}");
    const variants = [openPath];
    if (op.optionalTrailing && op.method === "POST") variants.push(openPath.replace(/\/\{[^}]+\}$/, ""));
    for (const path of variants) {
      const parameters: Schema[] = op.variables
        .filter((v) => path.includes(`{${v.name}}`))
        .map((v) => ({
          name: v.name,
          in: "path",
          required: true,
          schema: { type: "string" },
          ...(v.multiSegment ? { description: "A uid path; its slashes are sent as they are (not percent-encoded).", "x-multi-segment": true } : {}),
        }));
      for (const q of op.queryParams) {
        const f = fieldAt(op.descriptor.input, q);
        if (!f) continue;
        const schema = f.fieldKind === "list" ? { type: "array", items: valueSchema(f) } : valueSchema(f);
        parameters.push({ name: q, in: "query", required: false, schema, ...(f.fieldKind === "list" ? { style: "form", explode: true } : {}) });
      }
      const bodyField = op.body !== "" && op.body !== "*" ? op.descriptor.input.fields.find((f) => f.name === op.body) : undefined;
      const requestSchema = op.body === "*" ? messageRef(op.descriptor.input) : bodyField?.message ? messageRef(bodyField.message) : undefined;
      const operation: Schema = {
        operationId: `${op.rpc.split(".").slice(-2).join("_")}${path === openPath ? "" : "_root"}`,
        tags: [op.service.name],
        summary: op.descriptor.name,
        ...(parameters.length > 0 ? { parameters } : {}),
        ...(requestSchema ? { requestBody: { required: true, content: { "application/json": { schema: requestSchema } } } } : {}),
        responses: {
          "200": { description: "OK", content: { "application/json": { schema: messageRef(op.descriptor.output) } } },
          default: { description: "Error", content: { "application/json": { schema: ref("google.rpc.Status") } } },
        },
        ...(rule.mode === "disabled" ? { security: [] } : {}),
      };
      (paths[path] ??= {})[op.method.toLowerCase()] = operation;
    }
  }

  return {
    openapi: "3.1.0",
    info: { title: info.title, version: info.version },
    servers: [{ url: info.serverUrl }],
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "An API token: `npx platform-api admin-token`, or from /sts/exchange." } },
      schemas,
    },
  };
}
