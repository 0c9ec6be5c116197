import type { DescField, DescMessage, DescService } from "@bufbuild/protobuf";
import { methodRule } from "../../auth/rules.js";
import { ERROR_RESPONSES, ERROR_SCHEMAS } from "./openapi-errors.js";
import { SchemaBuilder, type Schema } from "./openapi-schemas.js";
import { protoComments } from "./proto-comments.js";
import type { RestOperation } from "./transcoder.js";

const VARIABLE = /\{([^}=]+)(=[^}]*)?\}/g;
const errorRef = (name: string) => ({ $ref: `#/components/responses/${name}` });

/** Names without the "platformapi." root, e.g. "iam.v2beta1.GroupsService": unique across versions. */
const shortName = (typeName: string) => typeName.replace(/^platformapi\./, "");

/** The first sentence of a comment, on one line. */
function firstSentence(text: string): string {
  const flat = text.replace(/\s*\n\s*/g, " ");
  const end = flat.search(/\.(\s|$)/);
  return end < 0 ? flat : flat.slice(0, end + 1);
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

/**
 * One parameter name per path shape: Create binds `parent`, Get and Delete
 * `uid`, Update `group.uid`, all at the same place of the same path, which
 * OpenAPI allows only under one name. The name is "uid" where some operation
 * binds a uid there; each parameter's description says which field it binds.
 */
function parameterNames(operations: readonly RestOperation[]): Map<string, string[]> {
  const byShape = new Map<string, string[][]>();
  for (const op of operations) {
    const shape = op.path.replace(VARIABLE, "{}");
    const names = byShape.get(shape) ?? [];
    op.variables.forEach((v, i) => (names[i] ??= []).push(v.name.split(".").pop()!));
    byShape.set(shape, names);
  }
  return new Map(
    [...byShape].map(([shape, names]) => [shape, names.map((candidates) => (candidates.includes("uid") ? "uid" : candidates[0]!))]),
  );
}

/**
 * The 200 of a server-streaming method: newline-delimited JSON, one object
 * per line (OpenAPI describes each line's schema; the body is their
 * sequence), as grpc-gateway renders server streams.
 */
function streamResponse(message: Schema): Schema {
  return {
    description:
      "A stream: newline-delimited JSON (`application/x-ndjson`), sent as messages are produced. Each line is " +
      '`{"result": <message>}`; a stream that fails after its first message ends with one `{"error": <google.rpc.Status>}` line ' +
      "(an error before the first message is an ordinary error response). The schema below is that of one line.",
    content: {
      "application/x-ndjson": {
        schema: {
          oneOf: [
            { type: "object", required: ["result"], properties: { result: message }, additionalProperties: false },
            {
              type: "object",
              required: ["error"],
              properties: { error: { $ref: "#/components/schemas/google.rpc.Status" } },
              additionalProperties: false,
            },
          ],
        },
      },
    },
  };
}

/**
 * Builds the OpenAPI 3.1 document from the REST operations the transcoder
 * serves: paths and parameters from the google.api.http rules, request and
 * response schemas in proto3 JSON form from the descriptors, summaries and
 * descriptions from the proto comments, the error body, and bearer
 * authentication from each method's iam option.
 */
export function openApiDocument(operations: readonly RestOperation[], info: { title: string; version: string; serverUrl: string }): Schema {
  const comments = protoComments();
  const schemas = new SchemaBuilder(comments);
  const names = parameterNames(operations);
  const paths: Record<string, Record<string, Schema>> = {};
  const tags = new Map<string, Schema>();
  const operationIds = new Set<string>();

  const tagOf = (service: DescService) => {
    const name = shortName(service.typeName);
    if (!tags.has(name)) tags.set(name, { name, ...schemas.describe(service.typeName) });
    return name;
  };

  for (const op of operations) {
    const shapeNames = names.get(op.path.replace(VARIABLE, "{}"))!;
    let index = 0;
    const openPath = op.path.replace(VARIABLE, () => `{${shapeNames[index++]}}`);
    // A trailing {parent=**} also matches the bare collection: POST there creates a root.
    const variants = [openPath];
    if (op.optionalTrailing && op.method === "POST") variants.push(openPath.replace(/\/\{[^}]+\}$/, ""));
    const comment = comments.get(`${op.service.typeName}.${op.descriptor.name}`);
    const isSecured = methodRule(op.descriptor).mode !== "disabled";
    for (const path of variants) {
      const parameters: Schema[] = op.variables
        .map((v, i) => ({ v, name: shapeNames[i]! }))
        .filter(({ name }) => path.includes(`{${name}}`))
        .map(({ v, name }) => {
          const field = fieldAt(op.descriptor.input, v.name);
          const fieldComment = field ? comments.get(`${field.parent.typeName}.${field.name}`) : undefined;
          const text = [
            `Binds the request field \`${v.name}\`.`,
            fieldComment,
            v.multiSegment ? "A uid path: its slashes may be sent as they are or percent-encoded (%2F)." : undefined,
          ];
          return {
            name,
            in: "path",
            required: true,
            description: text.filter((t) => t !== undefined).join(" "),
            schema: { type: "string" },
            "x-request-field": v.name,
            ...(v.multiSegment ? { "x-multi-segment": true } : {}),
          };
        });
      const formFields: Record<string, Schema> = {};
      for (const q of op.queryParams) {
        const f = fieldAt(op.descriptor.input, q);
        if (!f) continue;
        formFields[q] = { ...schemas.describe(`${f.parent.typeName}.${f.name}`), ...schemas.query(f) };
        parameters.push({
          name: q,
          in: "query",
          required: false,
          ...schemas.describe(`${f.parent.typeName}.${f.name}`),
          schema: schemas.query(f),
          ...(f.fieldKind === "list" ? { style: "form", explode: true } : {}),
        });
      }
      const bodyField = op.body !== "" && op.body !== "*" ? op.descriptor.input.fields.find((f) => f.name === op.body) : undefined;
      const mode = op.method === "PATCH" ? "patch" : "input";
      const requestSchema =
        op.body === "*"
          ? schemas.message(op.descriptor.input, mode)
          : bodyField?.message
            ? schemas.message(bodyField.message, mode)
            : undefined;
      const isRoot = path !== openPath;
      const baseId = `${shortName(op.service.typeName)}.${op.descriptor.name}${isRoot ? "_root" : ""}`;
      const operationId = operationIds.has(baseId) ? `${baseId}_${op.method.toLowerCase()}` : baseId;
      operationIds.add(operationId);
      const description = [
        comment,
        isRoot ? `Without a path parameter: \`${variants[0]!.match(/\{[^}]+\}$/)![0]}\` is empty.` : undefined,
        `RPC \`${op.rpc}\`${op.body === "*" ? "; the body is the whole request" : op.body !== "" ? `; the body is the request field \`${op.body}\`` : ""}.`,
      ];
      const operation: Schema = {
        operationId,
        tags: [tagOf(op.service)],
        summary: comment ? `${op.descriptor.name}: ${firstSentence(comment)}` : op.descriptor.name,
        description: description.filter((t) => t !== undefined).join("\n\n"),
        ...(parameters.length > 0 ? { parameters } : {}),
        ...(requestSchema ? { requestBody: { required: true, content: { "application/json": { schema: requestSchema } } } } : {}),
        // A POST that maps no body takes its query parameters as a form body too (OAuth-style token requests).
        ...(!requestSchema && op.method === "POST" && Object.keys(formFields).length > 0
          ? {
              requestBody: {
                required: false,
                content: { "application/x-www-form-urlencoded": { schema: { type: "object", properties: formFields } } },
              },
            }
          : {}),
        responses: {
          "200": op.streaming
            ? streamResponse(schemas.message(op.descriptor.output, "output"))
            : { description: "OK", content: { "application/json": { schema: schemas.message(op.descriptor.output, "output") } } },
          "400": errorRef("BadRequest"),
          ...(isSecured ? { "401": errorRef("Unauthenticated"), "403": errorRef("PermissionDenied") } : {}),
          ...(op.variables.length > 0 && !isRoot ? { "404": errorRef("NotFound") } : {}),
          ...(op.method !== "GET" ? { "409": errorRef("Conflict") } : {}),
          "429": errorRef("TooManyRequests"),
          default: errorRef("Error"),
        },
        ...(isSecured ? {} : { security: [] }),
      };
      (paths[path] ??= {})[op.method.toLowerCase()] = operation;
    }
  }

  return {
    openapi: "3.1.0",
    info: {
      title: info.title,
      version: info.version,
      description:
        "IAM, registry catalogue, advisories and OIDC token exchange. The same methods are served over gRPC, Connect and gRPC-Web on this port.",
      license: { name: "Apache-2.0", identifier: "Apache-2.0" },
    },
    servers: [{ url: info.serverUrl }],
    security: [{ bearer: [] }],
    tags: [...tags.values()],
    paths,
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description: "An API token: `npx platform-api admin-token`, or from /sts/exchange.",
        },
      },
      responses: ERROR_RESPONSES,
      schemas: { ...schemas.schemas, ...ERROR_SCHEMAS },
    },
  };
}
