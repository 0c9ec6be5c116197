import { closeSync, existsSync, mkdirSync, openSync, statSync } from "node:fs";
import { join } from "node:path";

/** The database file inside the data directory. */
export const DATABASE_FILE = "platform.db";

/** Files SQLite keeps beside the database (WAL mode), checked like the database itself. */
const COMPANION_SUFFIXES = ["", "-wal", "-shm"];

/** Bits that let anyone but the owner read, write or enter. */
const NOT_OWNER = 0o077;

/**
 * The data directory cannot be used safely: it holds the token-signing key and
 * the administrator subject, so anyone who can read it can mint an
 * administrator token. The message is one line naming the path and the fix.
 */
export class DataDirPermissionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DataDirPermissionError";
  }
}

const octal = (mode: number) => `0${(mode & 0o777).toString(8)}`;

function refuseIfShared(path: string, what: string, fix: string): void {
  const mode = statSync(path).mode;
  if ((mode & NOT_OWNER) === 0) return;
  throw new DataDirPermissionError(
    `${what} ${path} is accessible by other users (mode ${octal(mode)}); run \`${fix}\`, or set PLATFORM_SKIP_PERMISSION_CHECK=true if you manage its permissions yourself`,
  );
}

/**
 * Prepares the data directory and returns the database path. A missing
 * directory is created 0700 and a missing database file 0600 before SQLite
 * opens it (SQLite gives the WAL and SHM files the database file's mode). When
 * `check` is on, an existing directory or database file that the group or
 * others can access is refused with DataDirPermissionError, changing nothing.
 */
export function prepareDataDir(dir: string, check: boolean): string {
  if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!statSync(dir).isDirectory()) throw new DataDirPermissionError(`data directory ${dir} is not a directory`);
  const file = join(dir, DATABASE_FILE);
  if (check) {
    refuseIfShared(dir, "data directory", `chmod 700 ${dir}`);
    for (const suffix of COMPANION_SUFFIXES) {
      const path = file + suffix;
      if (existsSync(path)) refuseIfShared(path, "database file", `chmod 600 ${file}*`);
    }
  }
  // "a" creates the file without truncating one that appeared meanwhile; an existing file keeps its mode.
  if (!existsSync(file)) closeSync(openSync(file, "a", 0o600));
  return file;
}
