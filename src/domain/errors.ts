import { Code } from "@connectrpc/connect";

/** One field that failed validation, as google.rpc.BadRequest.FieldViolation. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** One unmet precondition, as google.rpc.PreconditionFailure.Violation. */
export interface PreconditionViolation {
  type: string;
  subject: string;
  description: string;
}

/**
 * ApiError is the one error model of the domain and the store: a google.rpc
 * code, a stable UPPER_SNAKE reason for ErrorInfo, and the typed details that
 * fit. The transport layer renders it for every protocol; nothing else leaves
 * the process.
 */
export class ApiError extends Error {
  readonly code: Code;
  readonly reason: string;
  readonly fieldViolations: FieldViolation[];
  readonly preconditionViolations: PreconditionViolation[];
  readonly metadata: Record<string, string>;
  /** When the call may be retried (google.rpc.RetryInfo, and Retry-After on REST); undefined when not said. */
  readonly retryDelayMs: number | undefined;

  constructor(
    code: Code,
    reason: string,
    message: string,
    opts: {
      fieldViolations?: FieldViolation[];
      preconditionViolations?: PreconditionViolation[];
      metadata?: Record<string, string>;
      retryDelayMs?: number;
    } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.reason = reason;
    this.fieldViolations = opts.fieldViolations ?? [];
    this.preconditionViolations = opts.preconditionViolations ?? [];
    this.metadata = opts.metadata ?? {};
    this.retryDelayMs = opts.retryDelayMs;
  }
}

/** A request field is missing or malformed; one violation per bad field. */
export class InvalidArgumentError extends ApiError {
  constructor(violations: FieldViolation[]) {
    const first = violations[0] ?? { field: "request", description: "invalid" };
    super(Code.InvalidArgument, "INVALID_ARGUMENT", `Invalid argument: ${first.field}: ${first.description}`, {
      fieldViolations: violations,
    });
    this.name = "InvalidArgumentError";
  }
}

/** Shorthand for an InvalidArgumentError about a single field. */
export function invalidField(field: string, description: string): InvalidArgumentError {
  return new InvalidArgumentError([{ field, description }]);
}

/** The addressed resource does not exist (or the caller may not know it does). */
export class NotFoundError extends ApiError {
  constructor(kind: string, uid: string) {
    super(Code.NotFound, "NOT_FOUND", `Not found: ${kind} ${uid} does not exist`, {
      metadata: { kind, uid },
    });
    this.name = "NotFoundError";
  }
}

/** A resource with the same identity already exists. */
export class AlreadyExistsError extends ApiError {
  constructor(kind: string, uid: string) {
    super(Code.AlreadyExists, "ALREADY_EXISTS", `Already exists: ${kind} ${uid}`, { metadata: { kind, uid } });
    this.name = "AlreadyExistsError";
  }
}

/** The system is not in the state the operation needs (e.g. deleting a non-empty group). */
export class FailedPreconditionError extends ApiError {
  constructor(violations: PreconditionViolation[]) {
    const first = violations[0] ?? { type: "UNKNOWN", subject: "", description: "precondition not met" };
    super(Code.FailedPrecondition, "FAILED_PRECONDITION", `Precondition failed: ${first.description}`, {
      preconditionViolations: violations,
    });
    this.name = "FailedPreconditionError";
  }
}

/** The caller lacks a capability at the scope; never says whether the target exists. */
export class PermissionDeniedError extends ApiError {
  constructor(message = "Permission denied: the caller lacks a required capability at this scope") {
    super(Code.PermissionDenied, "PERMISSION_DENIED", message);
    this.name = "PermissionDeniedError";
  }
}

/** The request carries no valid API token. */
export class UnauthenticatedError extends ApiError {
  constructor(message = "Unauthenticated: a valid bearer token is required") {
    super(Code.Unauthenticated, "UNAUTHENTICATED", message);
    this.name = "UnauthenticatedError";
  }
}

/** Too many requests of one kind from one caller. */
export class ResourceExhaustedError extends ApiError {
  constructor(message: string) {
    super(Code.ResourceExhausted, "RESOURCE_EXHAUSTED", message);
    this.name = "ResourceExhaustedError";
  }
}

/**
 * The database cannot be reached or used now (down, restarting, failing over): nothing was done, unless a write's
 * COMMIT was sent before the connection broke. Retryable, with RetryInfo (and Retry-After on REST) of a second:
 * how often the store probes for the database's return.
 */
export class UnavailableError extends ApiError {
  constructor(message = "Unavailable: the database cannot be reached right now; retry shortly") {
    super(Code.Unavailable, "UNAVAILABLE", message, { retryDelayMs: 1000 });
    this.name = "UnavailableError";
  }
}

/** A write lost to concurrent writes more times than the store retries it: nothing was written, and the call may be retried. */
export class AbortedError extends ApiError {
  constructor(message = "Aborted: the write kept conflicting with concurrent writes and was not made; retry it") {
    super(Code.Aborted, "ABORTED", message);
    this.name = "AbortedError";
  }
}

/** The caller gave up (cancelled the call, or its deadline passed) before the store did the work: nothing was done. */
export class CancelledError extends ApiError {
  constructor(deadline: boolean) {
    super(
      deadline ? Code.DeadlineExceeded : Code.Canceled,
      deadline ? "DEADLINE_EXCEEDED" : "CANCELLED",
      deadline ? "Deadline exceeded: the call's deadline passed before the store ran it" : "Cancelled: the caller cancelled the call",
    );
    this.name = "CancelledError";
  }
}
