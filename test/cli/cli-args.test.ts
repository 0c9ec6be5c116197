/**
 * Every command parses its arguments strictly (issue 24: `serve --port 9090` served on 8080 as if the option
 * were not there): an unknown option, an option without its value or an argument too many is refused before
 * anything runs — exit 2, nothing on stdout, a line naming it and the command's usage on stderr, and no data
 * directory created. The listing of `--help` and each command's own `--help` agree.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { platformCli } from "../support/platform-cli.js";

const dir = mkdtempSync(join(tmpdir(), "platform-cli-args-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let runs = 0;
/** A run over a data directory that does not exist: a command that got past its arguments would create or refuse it. */
const cli = (args: string[]) => {
  const dataDir = join(dir, `data-${++runs}`);
  return platformCli(dataDir, args, { PORT: "0", HOST: "127.0.0.1" }).then((run) => ({ ...run, dataDir }));
};
const GROUP = "a".repeat(40);

const REFUSED: [string[], string][] = [
  [["serve", "--port", "9090"], "unknown option --port"],
  [["serve", "--port=9090"], "unknown option --port"],
  [["serve", "extra"], 'unexpected argument "extra"'],
  [["admin-token", "--bogus"], "unknown option --bogus"],
  [["admin-token", "now"], 'unexpected argument "now"'],
  [["rotate-key", "--force"], "unknown option --force"],
  [["rotate-key", "--retire"], "--retire needs a value"],
  [["rotate-key", "--retire", "kid", "more"], 'unexpected argument "more"'],
  [["retire-key", "a", "b"], 'unexpected argument "b"'],
  [["retire-key", "--now", "a"], "unknown option --now"],
  [["list-keys", "-l"], "unknown option -l"],
  [["import-advisories", "--group", GROUP, "--force", "test/data/osv"], "unknown option --force"],
  [["import-advisories", "--group"], "--group needs a value"],
  [["keygen", "--out"], "--out needs a value"],
  [["keygen", "--out", "--alg", "ES256"], "--out needs a value"],
  [["keygen", "--out", join(dir, "k.jwk"), "--verbose"], "unknown option --verbose"],
  [["sign-jwt", "stray"], 'unexpected argument "stray"'],
];

for (const [args, message] of REFUSED) {
  test(`${args.join(" ")}: exit 2, "${message}" and the usage`, async () => {
    const run = await cli(args);
    assert.equal(run.code, 2, run.stderr);
    assert.equal(run.stdout, "");
    const lines = run.stderr.trimEnd().split("\n");
    assert.deepEqual(lines.slice(0, 1), [`platform-api ${args[0]}: ${message}`]);
    assert.equal(lines.length, 2, run.stderr);
    assert.match(lines[1]!, new RegExp(`^usage: .*platform-api ${args[0]}\\b`));
    assert.equal(existsSync(run.dataDir), false, "nothing ran: no data directory");
  });
}

test("the other helpers' commands refuse an unknown option too", async () => {
  for (const args of [
    ["backup", "--bogus", join(dir, "b.db")],
    ["migrate-to-postgres", "--bogus"],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
    assert.equal(run.stdout, "");
    assert.match(run.stderr, /--bogus/);
    assert.equal(existsSync(run.dataDir), false);
  }
});

test("an option before any command is refused as an option, with the usage", async () => {
  const run = await cli(["--port", "9090"]);
  assert.equal(run.code, 2);
  assert.match(run.stderr, /^unknown option: --port\n\nusage: platform-api /);
  assert.equal(existsSync(run.dataDir), false);
});

test("a kid that begins with a dash is still a kid, after --retire and alone", async () => {
  // No database there: the argument was taken as a kid, so the command went on to open the store and refused.
  for (const args of [
    ["retire-key", "-abc"],
    ["rotate-key", "--retire", "-abc"],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /^platform-api: no database in /, args.join(" "));
  }
});

test("each command's --help names it with the summary the listing gives", async () => {
  const listing = await cli(["--help"]);
  assert.equal(listing.code, 0, listing.stderr);
  const commands = [...listing.stdout.matchAll(/^ {2}(\S+) +(\S.*)$/gm)].map((m) => [m[1]!, m[2]!] as const);
  assert.ok(commands.length >= 10, listing.stdout);
  for (const [name, summary] of commands) {
    const help = await cli([name, "--help"]);
    assert.equal(help.code, 0, `${name}: ${help.stderr}`);
    assert.equal(help.stdout.split("\n")[0], `platform-api ${name}: ${summary}`);
    assert.match(help.stdout, /usage: /, name);
  }
});
