/**
 * What every command module exports and the table in index.ts loads: in a file of its own, so a command
 * depends on this contract and not on the table that imports it (no import circle).
 */

/** One command: what `--help` says of it, and its run, which resolves with the exit code. */
export interface Command {
  summary: string;
  help: string;
  run(args: string[]): Promise<number>;
}
