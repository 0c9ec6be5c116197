/**
 * A reason the server or a command cannot start that the operator fixes, not a bug: the command line prints
 * its message as one line (no stack) and exits 2. The message names the cause and the path, port or address.
 */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StartupError";
  }
}

/** What a system error code means, in the words of a one-line start-up error. */
const SYSTEM_ERRORS: Record<string, string> = {
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOTDIR: "a part of the path is a file, not a directory",
  EISDIR: "is a directory",
  EROFS: "read-only file system",
  ENOSPC: "no space left on the device",
  EEXIST: "already exists",
  ENOENT: "no such file or directory",
  ELOOP: "too many symbolic links",
  ENAMETOOLONG: "the path is too long",
};

/** The code of a Node system error (EACCES, EADDRINUSE…), or undefined. */
export function systemErrorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^E[A-Z]+$/.test(code) ? code : undefined;
}

/** "permission denied (EACCES)" for a system error; the error's own message otherwise. */
export function describeSystemError(err: unknown): string {
  const code = systemErrorCode(err);
  if (code !== undefined) return `${SYSTEM_ERRORS[code] ?? code.toLowerCase()} (${code})`;
  return err instanceof Error ? err.message : String(err);
}
