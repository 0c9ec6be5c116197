/**
 * Where `platform-api auth` keeps a person's sign-ins: one JSON file,
 * $XDG_CONFIG_HOME/platform-api/credentials.json (~/.config/… by default),
 * holding for each server URL (a profile) the refresh token and the current
 * API token with its expiry. The directory is made 0700 and the file 0600; a
 * file others may read is refused, not used (its tokens may have leaked).
 *
 * Every change is a read-modify-write under a lock file, written to a
 * temporary file that is renamed over the old one: a reader sees the old file
 * or the new one, never half of one, and two commands refreshing at once do
 * not both spend one refresh token (the server takes a refresh token used
 * twice for a stolen one and ends the whole session).
 */
import { randomBytes } from "node:crypto";
import {
  closeSync,
  fstatSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from "node:fs";
import { homedir } from "node:os";
import { dirname, isAbsolute, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describeSystemError, systemErrorCode } from "../../startup-error.js";
import { AuthCommandError } from "./error.js";

/** What is kept for one server. */
export interface ServerCredentials {
  /** The current API token (a JWT). */
  token: string;
  /** When token expires (RFC 3339). */
  expiry: string;
  /** The refresh token that gets the next API token; the server rotates it on every use. */
  refreshToken: string;
}

/** Each server's credentials, by its URL (as normalizeServerUrl writes it). */
export type CredentialsByServer = Record<string, ServerCredentials>;

const FILE_VERSION = 1;
/** A lock older than this is taken for a crashed holder's: holding it means one refresh request (30 s at most). */
const LOCK_STALE_MS = 60_000;
/** How long a command waits for another to release the lock before it gives up. */
const LOCK_WAIT_MS = 45_000;

/** The credentials file: under $XDG_CONFIG_HOME when it is an absolute path (the XDG rule), else ~/.config. */
export function credentialsPath(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_CONFIG_HOME;
  const config = xdg !== undefined && isAbsolute(xdg) ? xdg : join(homedir(), ".config");
  return join(config, "platform-api", "credentials.json");
}

/**
 * The credentials in the file at path; none when there is no file. Throws AuthCommandError when the file
 * may be read by others or is not one this command wrote.
 */
export function readCredentials(path: string): CredentialsByServer {
  let text: string;
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (err) {
    if (systemErrorCode(err) === "ENOENT") return {};
    throw new AuthCommandError(`cannot read ${path}: ${describeSystemError(err)}`);
  }
  try {
    // Checked on the open file, so the mode checked is the mode of what is read.
    const st = fstatSync(fd);
    if (process.platform !== "win32" && (st.mode & 0o077) !== 0) {
      const mode = (st.mode & 0o777).toString(8).padStart(4, "0");
      throw new AuthCommandError(
        `${path} has mode ${mode}: others may read it, so its tokens may have leaked; not using it (run chmod 600 ${path}, then \`platform-api auth logout\` and sign in again)`,
      );
    }
    if (process.getuid !== undefined && st.uid !== process.getuid())
      throw new AuthCommandError(`${path} belongs to another user (uid ${st.uid}); not using it`);
    text = readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
  return parseCredentials(path, text);
}

function parseCredentials(path: string, text: string): CredentialsByServer {
  const notOurs = (why: string) =>
    new AuthCommandError(`${path} is not a credentials file of this command (${why}); move it away and sign in again`);
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw notOurs("not JSON");
  }
  const { version, servers } = (doc ?? {}) as { version?: unknown; servers?: unknown };
  if (version !== FILE_VERSION) throw notOurs(`version ${JSON.stringify(version)}, expected ${FILE_VERSION}`);
  if (typeof servers !== "object" || servers === null || Array.isArray(servers)) throw notOurs("no servers object");
  const out: CredentialsByServer = {};
  for (const [server, c] of Object.entries(servers as Record<string, Partial<ServerCredentials>>)) {
    if (typeof c?.token !== "string" || typeof c.refreshToken !== "string" || typeof c.expiry !== "string")
      throw notOurs(`the entry of ${server} lacks token, expiry or refreshToken`);
    out[server] = { token: c.token, expiry: c.expiry, refreshToken: c.refreshToken };
  }
  return out;
}

/**
 * Replaces the file at path with servers, atomically: written with mode 0600 to a temporary file in the same
 * directory (made 0700 when missing), flushed, and renamed over the old one. Call it holding the lock.
 */
export function writeCredentials(path: string, servers: CredentialsByServer): void {
  const dir = dirname(path);
  makeDirectory(dir);
  const tmp = join(dir, `.credentials.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const fd = openSync(tmp, "wx", 0o600);
    try {
      writeSync(fd, `${JSON.stringify({ version: FILE_VERSION, servers }, null, 2)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new AuthCommandError(`cannot write ${path}: ${describeSystemError(err)}`);
  }
  // The rename itself reaches the disk with the directory.
  try {
    const dirFd = openSync(dir, "r");
    try {
      fsyncSync(dirFd);
    } finally {
      closeSync(dirFd);
    }
  } catch {
    // Not every platform can open a directory (Windows); the rename is done either way.
  }
}

function makeDirectory(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new AuthCommandError(`cannot create ${dir}: ${describeSystemError(err)}`);
  }
}

/**
 * Runs change holding the file's lock (`<path>.lock`, created exclusively): the credentials it reads and
 * writes cannot change under it. Waits while another live process holds the lock; a lock whose holder is
 * gone, or older than a minute, is broken.
 */
export async function withCredentialsLock<T>(path: string, change: () => Promise<T>): Promise<T> {
  const lock = `${path}.lock`;
  makeDirectory(dirname(path));
  const mine = `${process.pid} ${randomBytes(8).toString("hex")}\n`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      const fd = openSync(lock, "wx", 0o600);
      try {
        writeSync(fd, mine);
      } finally {
        closeSync(fd);
      }
      break;
    } catch (err) {
      if (systemErrorCode(err) !== "EEXIST") throw new AuthCommandError(`cannot create ${lock}: ${describeSystemError(err)}`);
    }
    const held = heldLock(lock);
    if (held !== null && isStale(held)) breakLock(lock, held.content);
    else if (Date.now() > deadline)
      throw new AuthCommandError(
        `${lock} is held by process ${held?.pid ?? "?"}: another platform-api auth command is running (remove the file if none is)`,
      );
    else await sleep(20 + Math.floor(Math.random() * 30));
  }
  try {
    return await change();
  } finally {
    // Only our own lock is removed (a lock broken as stale may belong to another process by now).
    if (heldLock(lock)?.content === mine) rmSync(lock, { force: true });
  }
}

interface HeldLock {
  content: string;
  pid: number;
  mtimeMs: number;
}

function heldLock(lock: string): HeldLock | null {
  try {
    const content = readFileSync(lock, "utf8");
    return { content, pid: Number.parseInt(content, 10), mtimeMs: statSync(lock).mtimeMs };
  } catch {
    return null;
  }
}

/** Whether the holder has exited (no such process) or has held the lock longer than any holder does. */
function isStale(held: HeldLock): boolean {
  if (Date.now() - held.mtimeMs > LOCK_STALE_MS) return true;
  // A lock being written (no pid yet) is not stale.
  if (!Number.isInteger(held.pid) || held.pid <= 0) return false;
  try {
    process.kill(held.pid, 0);
    return false;
  } catch (err) {
    return systemErrorCode(err) === "ESRCH";
  }
}

/**
 * Removes the stale lock whose content was judged, and only it: moved aside first (atomic), then deleted when
 * it is the one judged, or put back when another process had just taken the lock in between.
 */
function breakLock(lock: string, judged: string): void {
  const aside = `${lock}.${process.pid}.${randomBytes(4).toString("hex")}`;
  try {
    renameSync(lock, aside);
  } catch {
    return; // someone else broke it first
  }
  let content = "";
  try {
    content = readFileSync(aside, "utf8");
  } catch {
    // gone: nothing to put back
  }
  if (content !== judged) {
    try {
      linkSync(aside, lock);
    } catch {
      // a third process holds the lock now; the one moved aside lost it
    }
  }
  rmSync(aside, { force: true });
}
