/**
 * `platform-api backup <file>`: a consistent copy of the SQLite database while servers run. It loads no server
 * and no PostgreSQL driver: the configuration, SQLite and the copy.
 */
import { StartupError } from "../startup-error.js";
import { backupDatabase } from "../store/sqlite/backup.js";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { commandConfig } from "./environment.js";

const USAGE = "usage: platform-api backup [--force] <file>";

export const backupCommand: Command = {
  summary: "write a consistent copy of the SQLite database to a file, while the server runs",
  help: `${USAGE}

Writes a consistent copy of the SQLite database in PLATFORM_DATA_DIR to <file> while servers keep serving and writing (one snapshot of the database: every write committed before it, none after). The copy holds everything a server needs: every record, the token signing keys and the server's secrets, so treat it as you treat the data directory. The file is created with mode 0600, written and synced under a temporary name beside it, checked with SQLite's quick_check and only then given its name. An existing file is refused unless --force is given.

To restore: stop every server using the data directory, put the copy into a new directory as its platform.db (mkdir -m 700 <new dir> && install -m 600 <file> <new dir>/platform.db), and start the server with PLATFORM_DATA_DIR=<new dir> and the same PLATFORM_BASE_URL and PLATFORM_AUTH_URL as before: tokens issued before the backup keep verifying. Never copy a backup over a platform.db that still has its platform.db-wal beside it.

With PLATFORM_DATABASE_URL set, back up PostgreSQL with pg_dump -Fc and restore with pg_restore instead (see docs/operations.md, Backups, restore and upgrades); this command refuses.

Prints the file, its size and schema version. Exits 0 when the copy is written, 2 when nothing was written: a usage error, no database in PLATFORM_DATA_DIR, PLATFORM_DATABASE_URL set, an existing file without --force, or a file that cannot be written.`,
  async run(args) {
    const { values, positionals } = parseCommandArgs(args, USAGE, { force: { type: "boolean" } }, 1);
    if (positionals.length === 0) throw new UsageError("give the backup's file name", USAGE);
    const cfg = commandConfig();
    if (cfg.databaseUrl !== "") {
      throw new StartupError(
        "PLATFORM_DATABASE_URL is set: back up PostgreSQL with pg_dump -Fc and restore with pg_restore (docs/operations.md: Backups, restore and upgrades); backup copies the SQLite database of PLATFORM_DATA_DIR",
      );
    }
    const done = backupDatabase(cfg.dataDir, positionals[0]!, values.force === true);
    process.stdout.write(`backed up ${cfg.dataDir} to ${done.file}: ${done.bytes} bytes, schema version ${done.schemaVersion}\n`);
    return 0;
  },
};
