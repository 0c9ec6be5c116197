import type { Schema } from "./openapi-schemas.js";

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const typeUrl = (name: string) => `type.googleapis.com/google.rpc.${name}`;
const atType = (name: string) => ({ type: "string", const: typeUrl(name) });
const DETAILS = ["ErrorInfo", "BadRequest", "PreconditionFailure"];

/**
 * The error body, google.rpc.Status in JSON as AIP-193 has it ({code, message, details}, each detail naming its
 * type in "@type"), and the detail types the server sends (src/server/errors.ts).
 */
export const ERROR_SCHEMAS: Record<string, Schema> = {
  "google.rpc.Status": {
    type: "object",
    description:
      "The error body (AIP-193): the google.rpc code, a message, and typed details: always one ErrorInfo (reason and domain to switch on), " +
      "a BadRequest naming the fields of an invalid request, a PreconditionFailure when the resource's state forbids the call.",
    properties: {
      code: { type: "integer", format: "int32", description: "The google.rpc.Code, e.g. 3 for INVALID_ARGUMENT." },
      message: { type: "string", description: "A developer-facing message." },
      details: {
        type: "array",
        items: {
          oneOf: DETAILS.map((d) => ref(`google.rpc.${d}`)),
          discriminator: {
            propertyName: "@type",
            mapping: Object.fromEntries(DETAILS.map((d) => [typeUrl(d), `#/components/schemas/google.rpc.${d}`])),
          },
        },
      },
    },
    required: ["code", "message", "details"],
  },
  "google.rpc.ErrorInfo": {
    type: "object",
    description: "Why the call failed, as a stable UPPER_SNAKE reason within a domain.",
    properties: {
      "@type": atType("ErrorInfo"),
      reason: { type: "string", examples: ["NOT_FOUND"] },
      domain: { type: "string", examples: ["iam.platform.api"] },
      metadata: { type: "object", additionalProperties: { type: "string" } },
    },
    required: ["@type", "reason", "domain"],
  },
  "google.rpc.BadRequest": {
    type: "object",
    description: "The request fields that are invalid.",
    properties: {
      "@type": atType("BadRequest"),
      fieldViolations: { type: "array", items: ref("google.rpc.BadRequest.FieldViolation") },
    },
    required: ["@type", "fieldViolations"],
  },
  "google.rpc.BadRequest.FieldViolation": {
    type: "object",
    properties: {
      field: { type: "string", description: "The field's path in the request, e.g. group.name." },
      description: { type: "string" },
    },
    required: ["field"],
  },
  "google.rpc.PreconditionFailure": {
    type: "object",
    description: "The preconditions the resource's state does not meet.",
    properties: {
      "@type": atType("PreconditionFailure"),
      violations: { type: "array", items: ref("google.rpc.PreconditionFailure.Violation") },
    },
    required: ["@type", "violations"],
  },
  "google.rpc.PreconditionFailure.Violation": {
    type: "object",
    properties: { type: { type: "string" }, subject: { type: "string" }, description: { type: "string" } },
  },
};

const errorResponse = (description: string) => ({ description, content: { "application/json": { schema: ref("google.rpc.Status") } } });

/** Shared error responses (components.responses), by HTTP status, with the google.rpc codes each carries. */
export const ERROR_RESPONSES: Record<string, Schema> = {
  BadRequest: errorResponse(
    "INVALID_ARGUMENT (a BadRequest names the fields), FAILED_PRECONDITION (a PreconditionFailure says why) or OUT_OF_RANGE.",
  ),
  Unauthenticated: errorResponse("UNAUTHENTICATED: the bearer token is missing, expired or not valid here."),
  PermissionDenied: errorResponse("PERMISSION_DENIED: the caller lacks a capability the call needs on its target."),
  NotFound: errorResponse("NOT_FOUND: no such resource, or not one the caller may see."),
  Conflict: errorResponse("ALREADY_EXISTS, or ABORTED when a concurrent change won: retry."),
  TooManyRequests: errorResponse("RESOURCE_EXHAUSTED: a rate or size limit was hit."),
  Error: errorResponse("Any other error (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, …), in the same body."),
};
