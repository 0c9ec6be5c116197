/** `platform-api import-advisories`: OSV records into a group's advisories, while the server runs or not. */
import { importAdvisories, ImportInputError } from "../advisories/import.js";
import { isUidp } from "../domain/uidp.js";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";
import { STORE_ENVIRONMENT, withCommandStore } from "./environment.js";

const USAGE = "usage: platform-api import-advisories --group <uid> <file-or-dir>...";

/** The arguments, or a UsageError saying what is wrong with them. */
function importArgs(args: string[]): { group: string; paths: string[] } {
  const { values, positionals } = parseCommandArgs(args, USAGE, { group: { type: "string" } }, Infinity);
  const group = values.group as string | undefined;
  if (group === undefined || group === "") throw new UsageError("--group <uid> is required", USAGE);
  if (!isUidp(group)) throw new UsageError(`--group ${group}: not a group uid`, USAGE);
  if (positionals.length === 0) throw new UsageError("give at least one OSV file or directory", USAGE);
  return { group, paths: positionals };
}

export const importAdvisoriesCommand: Command = {
  summary: "import OSV vulnerability records as advisories of a group",
  help: `${USAGE}

Reads OSV JSON records (each file given, and every *.json below each directory given) and writes one advisory per record and affected package into the group (the server may be running). A re-import updates what changed and leaves the rest unchanged; it never duplicates. Malformed records are reported as "<file>: <id or ?>: <problem>" on stderr and skipped. Prints the counts of advisories created, updated and unchanged, and of records skipped. Exits 0 when everything importable was imported, 1 when the group does not exist, 2 on usage errors. ${STORE_ENVIRONMENT}`,
  async run(args) {
    const { group, paths } = importArgs(args);
    return withCommandStore(async (store) => {
      if (!(await store.groups.get(group))) {
        process.stderr.write(`group ${group} does not exist\n`);
        return 1;
      }
      let result: Awaited<ReturnType<typeof importAdvisories>>;
      try {
        result = await importAdvisories(store, group, paths, Date.now());
      } catch (err) {
        if (err instanceof ImportInputError) throw new UsageError(err.message, USAGE);
        throw err;
      }
      for (const p of result.problems) process.stderr.write(`${p.file}: ${p.id ?? "?"}: ${p.problem}\n`);
      process.stdout.write(
        `imported ${result.records} of ${result.records + result.skipped} OSV records into group ${group}\n` +
          `created: ${result.created}\nupdated: ${result.updated}\nunchanged: ${result.unchanged}\nskipped: ${result.skipped}\n`,
      );
      return 0;
    });
  },
};
