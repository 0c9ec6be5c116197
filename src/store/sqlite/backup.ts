import { randomBytes } from "node:crypto";
import { closeSync, existsSync, fsyncSync, linkSync, openSync, renameSync, statSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import Database from "better-sqlite3";
import { describeSystemError, StartupError, systemErrorCode } from "../../startup-error.js";
import { DATABASE_FILE, requireDatabase } from "./data-dir.js";

/** What a backup wrote. */
export interface BackupResult {
  /** The backup file's absolute path. */
  file: string;
  bytes: number;
  /** The schema version it holds (SQLite's user_version). */
  schemaVersion: number;
}

/**
 * Writes a consistent copy of the data directory's database to `target` while servers keep reading and writing
 * it: `VACUUM INTO` reads one snapshot (a WAL read transaction, which blocks no writer) and writes a compact
 * database holding every table, the signing keys and the server's secrets included. The copy is made beside
 * the target as a new file of mode 0600, synced, checked (`PRAGMA quick_check`) and only then given the
 * target's name, so a failed or interrupted backup leaves no partial file under that name. An existing target
 * is refused unless `overwrite`; the database, a missing directory or a write failure are StartupError.
 */
export function backupDatabase(dataDir: string, target: string, overwrite: boolean): BackupResult {
  requireDatabase(dataDir);
  const source = join(dataDir, DATABASE_FILE);
  const file = resolve(target);
  refuseTarget(source, file, overwrite);
  const partial = join(dirname(file), `.${basename(file)}.partial-${randomBytes(6).toString("hex")}`);
  const db = openLive(source, 5_000);
  try {
    writeSnapshot(db, partial);
    const schemaVersion = checkedSchemaVersion(partial);
    publish(partial, file, overwrite);
    return { file, bytes: statSync(file).size, schemaVersion };
  } finally {
    db.close();
    if (existsSync(partial)) unlinkSync(partial);
  }
}

/** The data directory's database held so that no other connection, in any process, can read or write it. */
export interface DatabaseHold {
  /** Writes a consistent copy of the held database to a new file of mode 0600 (which must not exist). */
  snapshot(file: string): void;
  /** Lets other connections in again. */
  release(): void;
}

/**
 * Takes SQLite's exclusive lock on the data directory's database and keeps it until release(). A server keeps
 * its database open, holding a shared lock on the file for as long as it runs (WAL mode keeps it between
 * transactions), as does any other command using it; so the exclusive lock is refused at once while one runs,
 * and that is StartupError naming the database. While held, a server that starts waits for it (its busy timeout,
 * 5 s) and then refuses to start: nothing can write the database behind the holder's back.
 */
export function holdDatabase(dataDir: string): DatabaseHold {
  requireDatabase(dataDir);
  const source = join(dataDir, DATABASE_FILE);
  const db = openLive(source, 0);
  try {
    // In exclusive locking mode the locks a transaction takes are kept when it ends, until the connection closes.
    db.pragma("locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE; COMMIT");
  } catch (err) {
    db.close();
    if (err instanceof Database.SqliteError && err.code.startsWith("SQLITE_BUSY")) {
      throw new StartupError(
        `the database ${source} is in use by another process (a server still running on PLATFORM_DATA_DIR, or another platform-api command); stop it and try again`,
      );
    }
    throw openError(source, err);
  }
  return {
    snapshot: (file) => writeSnapshot(db, file),
    release: () => db.close(),
  };
}

/** The live database, opened as it is (no pragma that would write, no migration), waiting up to busyMs for locks. */
function openLive(file: string, busyMs: number): Database.Database {
  try {
    return new Database(file, { fileMustExist: true, timeout: busyMs });
  } catch (err) {
    throw openError(file, err);
  }
}

/** Refuses a target that is the database itself, a directory, in a missing directory, or (without overwrite) taken. */
function refuseTarget(source: string, file: string, overwrite: boolean): void {
  if ([source, `${source}-wal`, `${source}-shm`].includes(file)) {
    throw new StartupError(`${file} is the live database; write the backup to a file outside the data directory's database files`);
  }
  if (!existsSync(dirname(file))) throw new StartupError(`cannot write ${file}: its directory ${dirname(file)} does not exist`);
  if (!existsSync(file)) return;
  if (statSync(file).isDirectory()) throw new StartupError(`${file} is a directory; give the backup's file name`);
  if (!overwrite) throw new StartupError(`${file} already exists; name a new file, or give --force to replace it`);
}

/** VACUUM INTO a new file of mode 0600 (created first: SQLite would give it the umask's mode), then fsync it. */
function writeSnapshot(db: Database.Database, file: string): void {
  try {
    closeSync(openSync(file, "wx", 0o600));
    db.prepare("VACUUM INTO ?").run(file);
    const fd = openSync(file, "r+");
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch (err) {
    if (existsSync(file) && systemErrorCode(err) !== "EEXIST") unlinkSync(file);
    if (systemErrorCode(err) !== undefined) throw new StartupError(`cannot write ${file}: ${describeSystemError(err)}`);
    if (err instanceof Database.SqliteError) throw new StartupError(`cannot write ${file}: ${err.message} (${err.code})`);
    throw err;
  }
}

/** The copy's schema version, after SQLite's quick check found it whole. */
function checkedSchemaVersion(file: string): number {
  const copy = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const check = copy.pragma("quick_check", { simple: true });
    if (check !== "ok")
      throw new StartupError(`the copy written to ${file} failed SQLite's quick_check (${String(check)}); nothing was kept`);
    return copy.pragma("user_version", { simple: true }) as number;
  } finally {
    copy.close();
  }
}

/**
 * Gives the synced copy its name: a hard link when the name must be new (refused if it appeared meanwhile), a
 * rename when it may replace a file; then syncs the directory so the name survives a crash.
 */
function publish(partial: string, file: string, overwrite: boolean): void {
  try {
    if (overwrite) renameSync(partial, file);
    else linkPublish(partial, file);
    const dir = openSync(dirname(file), "r");
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  } catch (err) {
    if (err instanceof StartupError) throw err;
    throw new StartupError(`cannot write ${file}: ${describeSystemError(err)}`);
  }
}

/** Links partial as file, refusing an existing file; where hard links are not supported, renames it if file is still absent. */
function linkPublish(partial: string, file: string): void {
  try {
    linkSync(partial, file);
  } catch (err) {
    const code = systemErrorCode(err);
    if (code === "EEXIST") throw new StartupError(`${file} already exists; name a new file, or give --force to replace it`);
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP") throw err;
    if (existsSync(file)) throw new StartupError(`${file} already exists; name a new file, or give --force to replace it`);
    renameSync(partial, file);
  }
}

/** A database SQLite cannot open or read, as one line naming it. */
function openError(file: string, err: unknown): unknown {
  if (err instanceof Database.SqliteError) return new StartupError(`cannot open database ${file}: ${err.message} (${err.code})`);
  if (systemErrorCode(err) !== undefined) return new StartupError(`cannot open database ${file}: ${describeSystemError(err)}`);
  return err;
}
