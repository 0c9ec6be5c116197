import { writeSync } from "node:fs";
import { hostname } from "node:os";
import { isatty } from "node:tty";
import { PACKAGE_VERSION } from "../package-root.js";
import { StartupError } from "../startup-error.js";
import { nextSchemaVersion } from "./schema-releases.js";

/** One schema migration applied: which, from which version to which, and how long it took. */
export interface MigrationStep {
  engine: "sqlite" | "postgres";
  /** The migration's number: the schema version it produces. */
  migration: number;
  /** What it changes, in a few words. */
  name: string;
  fromVersion: number;
  toVersion: number;
  durationMs: number;
}

/** Told of each migration step once it committed. */
export type MigrationLog = (step: MigrationStep) => void;

/** Levels at which an info line is written. */
const INFO_ENABLED = new Set(["trace", "debug", "info"]);

/**
 * Migration steps as JSON lines on stdout, in the shape of the server's own lines (pino's level, time, pid and
 * hostname, then the fields, msg last), at info: migrations run when the store opens, before the server and its
 * logger exist. Nothing is written at a LOG_LEVEL above info. fd 1 is written directly, so that the server's
 * logger finds it as it was (creating process.stdout would make a piped fd 1 non-blocking).
 */
export function jsonMigrationLog(level: string, fd = 1): MigrationLog {
  if (!INFO_ENABLED.has(level)) return () => {};
  // On a terminal the server's lines are human-readable (pino-pretty): so are these.
  if (isatty(fd)) return (step) => writeLine(fd, Buffer.from(`${prettyLine(step)}\n`));
  const write = jsonLines(fd);
  return (step) => write(30, step, "schema migration applied");
}

/** Writes JSON lines to fd in the shape of the server's own: pino's level, time, pid and hostname, the fields, msg last. */
function jsonLines(fd: number): (level: number, fields: object, msg: string) => void {
  const host = hostname();
  return (level, fields, msg) => {
    const line = { level, time: Date.now(), pid: process.pid, hostname: host, ...fields, msg };
    writeLine(fd, Buffer.from(`${JSON.stringify(line)}\n`));
  };
}

/**
 * A store's warning from before (or beside) the server's logger, as a JSON line on stderr in the shape of the
 * server's own (level 40); nothing at a LOG_LEVEL above warn.
 */
export function jsonStoreWarning(level: string, fd = 2): (msg: string, err: Error) => void {
  if (level === "error" || level === "fatal" || level === "silent") return () => {};
  const write = jsonLines(fd);
  return (msg, err) => write(40, { err: { message: err.message } }, msg);
}

/** A step as pino-pretty renders the server's lines: "[HH:MM:ss.lll] INFO (pid): msg" and the fields. */
function prettyLine(step: MigrationStep): string {
  const t = new Date();
  const time = [t.getHours(), t.getMinutes(), t.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
  const fields = Object.entries(step)
    .map(([k, v]) => `\n    ${k}: ${JSON.stringify(v)}`)
    .join("");
  return `[${time}.${String(t.getMilliseconds()).padStart(3, "0")}] INFO (${process.pid}): schema migration applied${fields}`;
}

/** Nothing ever wakes it: Atomics.wait on it is a synchronous 1 ms sleep. */
const SLEEP_CELL = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of bytes to fd, waiting out a full non-blocking pipe; a log line never stops a start (a closed reader, a full disk). */
function writeLine(fd: number, bytes: Buffer): void {
  for (let at = 0; at < bytes.length; ) {
    try {
      at += writeSync(fd, bytes, at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EAGAIN") return;
      Atomics.wait(SLEEP_CELL, 0, 0, 1);
    }
  }
}

/**
 * A database whose schema a newer platform-api migrated (a rollback to an older binary): refused at start with one
 * line that says what to do, never migrated down and never served (old code would misread new columns). Every
 * schema change moves the version to the next minor (schema-releases.ts), so the version that migrated it is this
 * one's next minor or a later one: a bound this binary can state without knowing that version.
 */
export function newerSchemaError(engine: MigrationStep["engine"], found: number, known: number): StartupError {
  const where = engine === "sqlite" ? "SQLite database" : "PostgreSQL database";
  return new StartupError(
    `the ${where}'s schema version ${found} is newer than this server's ${known} (platform-api ${PACKAGE_VERSION}): ` +
      `platform-api ${nextSchemaVersion(PACKAGE_VERSION)} or later migrated it (CHANGELOG.md names each version's schema); ` +
      `run that version again, or restore the backup taken before the upgrade (docs/operations.md: Upgrading and rolling back)`,
  );
}
