import { create, createRegistry, toBinary, toJson, type DescMessage, type JsonObject } from "@bufbuild/protobuf";
import { anyPack, AnySchema, type Any } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  file_google_rpc_error_details,
  PreconditionFailureSchema,
  RetryInfoSchema,
} from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema, type Status } from "../../gen/google/rpc/status_pb.js";
import { ApiError, invalidField, type InvalidArgumentError } from "../domain/errors.js";

/** A detail as ConnectError accepts it: a message descriptor and its value. */
type OutgoingDetail = Extract<ConnectError["details"][number], { desc: unknown }>;

/** Every google.rpc detail type, so an Any in an error body never fails to render. */
const detailRegistry = createRegistry(file_google_rpc_error_details);

/**
 * ErrorInfo.domain of errors on a request that addressed no service: an
 * unknown route or method, and errors of the HTTP or HTTP/2 connection itself.
 * Every request that did address one gets its area's domain (areaErrorDomain),
 * whichever layer refused it. docs/calling-the-api.md (Errors) lists the domains and reasons.
 */
export const DEFAULT_ERROR_DOMAIN = "platform.api";

/** What every protocol answers for a request that is not its type's protobuf encoding. */
export function undecodableRequest(schema: DescMessage): InvalidArgumentError {
  return invalidField("request", `is not a valid protobuf encoding of ${schema.typeName}`);
}

/** ErrorInfo.domain of a service's errors: "iam.platform.api" for platformapi.iam.v2beta1.*; other packages (health) get the default. */
export function areaErrorDomain(serviceTypeName: string): string {
  const [root, area] = serviceTypeName.split(".");
  return root === "platformapi" && area ? `${area}.platform.api` : DEFAULT_ERROR_DOMAIN;
}

/** The standard gRPC code → HTTP status table (grpc-gateway, Envoy, connect-es). */
const HTTP_STATUS: Record<Code, number> = {
  [Code.Canceled]: 499,
  [Code.Unknown]: 500,
  [Code.InvalidArgument]: 400,
  [Code.DeadlineExceeded]: 504,
  [Code.NotFound]: 404,
  [Code.AlreadyExists]: 409,
  [Code.PermissionDenied]: 403,
  [Code.ResourceExhausted]: 429,
  [Code.FailedPrecondition]: 400,
  [Code.Aborted]: 409,
  [Code.OutOfRange]: 400,
  [Code.Unimplemented]: 501,
  [Code.Internal]: 500,
  [Code.Unavailable]: 503,
  [Code.DataLoss]: 500,
  [Code.Unauthenticated]: 401,
};

/** HTTP status for a gRPC code. */
export function httpStatusOf(code: Code): number {
  return HTTP_STATUS[code] ?? 500;
}

/** UPPER_SNAKE name of a code, used as the ErrorInfo reason when nothing better is known. */
export function reasonOf(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * An error's size is bounded whatever the request held: a gRPC error travels
 * in HTTP/2 trailers (grpc-message, and grpc-status-details-bin in base64),
 * and a header block over 64 KiB is never delivered, leaving the call and its
 * connection hanging. A request with thousands of bad list entries would
 * otherwise get one violation each. At most MAX_VIOLATIONS violations of at
 * most VIOLATION_BYTES in all are sent; ErrorInfo.metadata.omittedViolations
 * counts the rest. Worst case (all text non-ASCII): about 36 KiB of base64
 * details plus 18 KiB of percent-encoded message.
 */
const MAX_VIOLATIONS = 20;
const VIOLATION_BYTES = 16 * 1024;
const MAX_TEXT = 512;
const MAX_MESSAGE = 2048;

function clip(text: string, max = MAX_TEXT): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** The violations of err that fit the bounds above, clipped, and how many were left out. */
function boundedViolations(err: ApiError) {
  let room = VIOLATION_BYTES;
  const fits = (...texts: string[]) => (room -= texts.reduce((n, t) => n + Buffer.byteLength(t), 0)) >= 0;
  const fieldViolations = [];
  for (const v of err.fieldViolations.slice(0, MAX_VIOLATIONS)) {
    const clipped = { field: clip(v.field), description: clip(v.description) };
    if (!fits(clipped.field, clipped.description)) break;
    fieldViolations.push(clipped);
  }
  const violations = [];
  for (const v of err.preconditionViolations.slice(0, MAX_VIOLATIONS - fieldViolations.length)) {
    const clipped = { type: clip(v.type), subject: clip(v.subject), description: clip(v.description) };
    if (!fits(clipped.type, clipped.subject, clipped.description)) break;
    violations.push(clipped);
  }
  const omitted = err.fieldViolations.length + err.preconditionViolations.length - fieldViolations.length - violations.length;
  return { fieldViolations, violations, omitted };
}

/** Called with every error that is not a client's mistake; the default is silence. */
export type InternalErrorSink = (err: unknown) => void;

/**
 * Maps anything thrown by a handler to a ConnectError carrying exactly one
 * ErrorInfo. Unknown errors become INTERNAL with a fixed message, so no stack,
 * SQL or library text ever reaches a client.
 */
export function toConnectError(err: unknown, domain: string, onInternal?: InternalErrorSink): ConnectError {
  if (err instanceof ApiError) {
    const { fieldViolations, violations, omitted } = boundedViolations(err);
    const metadata = omitted > 0 ? { ...err.metadata, omittedViolations: String(omitted) } : err.metadata;
    const details: OutgoingDetail[] = [{ desc: ErrorInfoSchema, value: { reason: err.reason, domain, metadata } }];
    if (fieldViolations.length > 0) details.push({ desc: BadRequestSchema, value: { fieldViolations } });
    if (violations.length > 0) details.push({ desc: PreconditionFailureSchema, value: { violations } });
    if (err.retryDelayMs !== undefined) details.push({ desc: RetryInfoSchema, value: { retryDelay: durationOf(err.retryDelayMs) } });
    return new ConnectError(clip(err.message, MAX_MESSAGE), err.code, undefined, details);
  }
  if (err instanceof ConnectError) {
    // Already mapped (by the wrapper, which reported its cause): not reported twice.
    if (err.findDetails(ErrorInfoSchema).length > 0) return err;
    if (err.code === Code.Internal || err.code === Code.Unknown) onInternal?.(err);
    const message = err.code === Code.Internal || err.code === Code.Unknown ? "Internal error" : err.rawMessage;
    return new ConnectError(message, err.code, undefined, [
      { desc: ErrorInfoSchema, value: { reason: reasonOf(err.code), domain, metadata: {} } },
      ...err.details.filter((d) => "desc" in d),
    ]);
  }
  onInternal?.(err);
  return new ConnectError("Internal error", Code.Internal, undefined, [
    { desc: ErrorInfoSchema, value: { reason: "INTERNAL", domain, metadata: {} } },
  ]);
}

/** A google.protobuf.Duration's fields for a whole number of milliseconds. */
function durationOf(ms: number) {
  const whole = Math.max(0, Math.ceil(ms));
  return { seconds: BigInt(Math.floor(whole / 1000)), nanos: (whole % 1000) * 1_000_000 };
}

/**
 * Whole seconds a client should wait before retrying err (its RetryInfo,
 * rounded up, at least 1), for the Retry-After header of an HTTP answer;
 * undefined when the error says nothing of retrying.
 */
export function retryAfterSeconds(err: ConnectError): number | undefined {
  const [info] = err.findDetails(RetryInfoSchema);
  const delay = info?.retryDelay;
  if (delay === undefined) return undefined;
  return Math.max(1, Math.ceil(Number(delay.seconds) + delay.nanos / 1e9));
}

/** The google.rpc.Status of an error: the same value rendered on every wire. */
function statusOf(err: ConnectError): Status {
  const details: Any[] = err.details.map((d) =>
    "desc" in d
      ? anyPack(d.desc, create(d.desc, d.value))
      : create(AnySchema, { typeUrl: `type.googleapis.com/${d.type}`, value: d.value as Uint8Array }),
  );
  return create(StatusSchema, { code: err.code, message: err.rawMessage, details });
}

/** REST rendering: the HTTP status the code maps to, and the body {code, message, details:[{"@type",…}]}. */
export function restErrorBody(err: ConnectError): { status: number; body: JsonObject } {
  const json = toJson(StatusSchema, statusOf(err), { registry: detailRegistry }) as JsonObject;
  // Put "@type" first in each detail, as Google's own services do.
  const details = ((json.details as JsonObject[] | undefined) ?? []).map(({ "@type": type, ...rest }) => ({
    "@type": type ?? null,
    ...rest,
  }));
  return { status: httpStatusOf(err.code), body: { code: err.code, message: err.rawMessage, details } };
}

/** Serialized google.rpc.Status for the grpc-status-details-bin trailer. */
export function grpcStatusDetails(err: ConnectError): Uint8Array {
  return toBinary(StatusSchema, statusOf(err));
}

/** A grpc-message header's value: percent-encoded as grpc-js writes it (encodeURI), a lone surrogate replaced rather than thrown on. */
export function grpcMessageHeader(message: string): string {
  try {
    return encodeURI(message);
  } catch {
    return encodeURI(message.replace(/[\uD800-\uDFFF]/g, "\uFFFD"));
  }
}

/** ErrorInfo.reason of a request message over the limit (REST says BODY_TOO_LARGE). */
export const MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE";

/** RESOURCE_EXHAUSTED with one ErrorInfo, for a request message over `limit` bytes. */
export function messageTooLarge(limit: number, domain = DEFAULT_ERROR_DOMAIN): ConnectError {
  return toConnectError(new ApiError(Code.ResourceExhausted, MESSAGE_TOO_LARGE, `Request message exceeds ${limit} bytes`), domain);
}
