/**
 * `platform-api migrate-to-postgres`: an SQLite deployment's data copied into a fresh PostgreSQL database, with
 * the SQLite database held exclusively meanwhile, so no server writes it behind the copy.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { FailedPreconditionError } from "../domain/errors.js";
import { StartupError } from "../startup-error.js";
import { copyStore } from "../store/copy.js";
import { openEngine } from "../store/open.js";
import { holdDatabase } from "../store/sqlite/backup.js";
import { DATABASE_FILE, prepareDataDir, requireDatabase } from "../store/sqlite/data-dir.js";
import { openSqliteStore } from "../store/sqlite/index.js";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { commandConfig } from "./environment.js";

const USAGE = "usage: PLATFORM_DATABASE_URL=postgres://… platform-api migrate-to-postgres";

export const migrateToPostgresCommand: Command = {
  summary: "copy an SQLite deployment's data into PostgreSQL",
  help: `${USAGE}

Copies everything in the SQLite database of PLATFORM_DATA_DIR into the PostgreSQL database at PLATFORM_DATABASE_URL, in one transaction, keeping every uid and time: groups, roles, identities, role bindings, identity providers, account associations, group invites, repos, tags with their tag registry times and the deleted digests remembered (what the registry's notifications left), advisories, events (the feed), subscriptions (with their secrets), signing keys and the server's secrets. Tokens issued before keep working (with the same PLATFORM_BASE_URL and PLATFORM_AUTH_URL), and the administrator stays the administrator. Feed cursors issued before do not carry over (positions differ between the engines), and each subscription's deliveries start with the events written after the copy: let deliveries catch up before stopping the server.

Stop every server using the data directory first: the command takes SQLite's exclusive lock on the database and refuses at once while any other process has it open (a running server keeps it open), and keeps the lock until it is done, so no server can start and write meanwhile. It reads a snapshot written next to the database (as large as the database; removed afterwards) and leaves the SQLite database unchanged.

The target must be an empty database no server has run on (create one with createdb): the command creates the schema, and refuses a database that holds groups or identities or that a server has used. Prints the count of each kind copied. Exits 0 when copied; 1, copying nothing, when the target is not empty or source rows hold a NUL character, which PostgreSQL cannot store (each such row named on one line: table, uid, field); 2, copying nothing, on usage errors, when PLATFORM_DATABASE_URL is not set, when PLATFORM_DATA_DIR holds no database, while another process uses it, or when PostgreSQL cannot be reached.`,
  async run(args) {
    parseCommandArgs(args, USAGE);
    const cfg = commandConfig();
    if (cfg.databaseUrl === "") throw new UsageError("PLATFORM_DATABASE_URL must name the target PostgreSQL database", USAGE);
    try {
      requireDatabase(cfg.dataDir);
      prepareDataDir(cfg.dataDir, !cfg.skipPermissionCheck);
      const hold = holdDatabase(cfg.dataDir);
      try {
        return await copyHeld(hold.snapshot, cfg.dataDir, cfg.databaseUrl);
      } finally {
        hold.release();
      }
    } catch (err) {
      if (err instanceof StartupError) throw new StartupError(`${err.message}; nothing was copied`);
      throw err;
    }
  },
};

/**
 * Copies a snapshot of the held database (written to a private directory inside the data directory) into PostgreSQL,
 * which is opened first: an unreachable target costs no snapshot.
 */
async function copyHeld(snapshot: (file: string) => void, dataDir: string, databaseUrl: string): Promise<number> {
  const target = await openEngine({ databaseUrl, dataDir });
  // mkdtemp makes the directory 0700: the snapshot holds the keys, like the data directory.
  const work = mkdtempSync(join(dataDir, ".migrate-to-postgres-"));
  try {
    snapshot(join(work, DATABASE_FILE));
    const source = openSqliteStore({ dataDir: work });
    try {
      const counts = await copyStore(source, target);
      for (const [kind, n] of Object.entries(counts)) process.stdout.write(`${kind}: ${n}\n`);
      return 0;
    } catch (err) {
      if (!(err instanceof FailedPreconditionError)) throw err;
      // One line per problem (each unstorable row names its table, uid and field), no stack trace.
      const problems = err.preconditionViolations.map((v) => v.description);
      process.stderr.write(`${(problems.length > 0 ? problems : [err.message]).join("\n")}; nothing was copied\n`);
      return 1;
    } finally {
      await source.close();
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
    await target.close();
  }
}
