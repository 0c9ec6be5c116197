import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync, statSync } from "node:fs";
import { join } from "node:path";
import { describeSystemError, StartupError, systemErrorCode } from "../../startup-error.js";

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
export class DataDirPermissionError extends StartupError {
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
  try {
    return prepare(dir, check);
  } catch (err) {
    if (err instanceof StartupError || systemErrorCode(err) === undefined) throw err;
    throw new StartupError(`cannot use data directory ${dir}: ${describeSystemError(err)}`);
  }
}

function prepare(dir: string, check: boolean): string {
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
  // SQLite writes its WAL and SHM files beside the database: the directory itself must be writable.
  accessSync(dir, constants.W_OK | constants.X_OK);
  return file;
}

/**
 * Refuses, changing nothing, when the data directory holds no database: every command but `serve` works on
 * the data a server made, and creating a new key there would mint tokens no server accepts.
 */
export function requireDatabase(dir: string): void {
  if (existsSync(dir) && !statSync(dir).isDirectory()) throw new DataDirPermissionError(`data directory ${dir} is not a directory`);
  if (existsSync(join(dir, DATABASE_FILE))) return;
  throw new StartupError(`no database in ${dir}; start the server first, or set PLATFORM_DATA_DIR to the server's data directory`);
}
