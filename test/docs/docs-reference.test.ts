/**
 * The reference pages list exactly what the code has, both ways: docs/configuration.md every setting of
 * `ENVIRONMENT_VARIABLES` (src/config.ts) with its default, docs/calling-the-api.md every service the server
 * registers and every `service` of proto/, docs/command-line.md every command of the command line's table
 * (src/cli/index.ts, as `platform-api --help` prints it). A setting, service or command added on one side and not the
 * other fails here, naming it.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ENVIRONMENT_VARIABLES } from "../../src/config.js";
import { SYSTEM_SERVICES } from "../../src/server/grpc/server.js";
import { CONTRACT_FILES } from "../../src/services/index.js";
import { readPage } from "../support/markdown.js";
import { platformCli } from "../support/platform-cli.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The text of a page's section: from its `## heading` line to the next `## ` heading. */
function section(page: string, heading: string): string {
  const text = readPage(page);
  const start = text.indexOf(`\n## ${heading}\n`);
  assert.notEqual(start, -1, `${page} has a section "## ${heading}"`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end === -1 ? undefined : end);
}

/** The first cell (a code span) and the rest of each row of the tables in text: `| \`x\` | b | c |` → ["x", ["b", "c"]]. */
function rows(text: string): [string, string[]][] {
  return [...text.matchAll(/^\| `([^`]+)` \|(.*)\|\s*$/gm)].map((m) => [m[1]!, m[2]!.split(" | ").map((c) => c.trim())]);
}

/** What is in a but not in b, and in b but not in a, as a readable difference. */
function difference(a: Iterable<string>, b: Iterable<string>): { missing: string[]; extra: string[] } {
  const as = new Set(a);
  const bs = new Set(b);
  return { missing: [...as].filter((x) => !bs.has(x)).sort(), extra: [...bs].filter((x) => !as.has(x)).sort() };
}

test("docs/configuration.md lists every setting of src/config.ts, with its default, and no other", () => {
  const documented = rows(section("docs/configuration.md", "Every setting"));
  const names = documented.map(([name]) => name);
  assert.deepEqual(
    names.filter((n, i) => names.indexOf(n) !== i),
    [],
    "each setting is listed once",
  );
  assert.deepEqual(
    difference(
      ENVIRONMENT_VARIABLES.map((v) => v.name),
      names,
    ),
    { missing: [], extra: [] },
    "missing: settings the code reads and the page does not list; extra: listed settings the code does not read",
  );
  for (const [name, [defaultCell]] of documented) {
    const expected = ENVIRONMENT_VARIABLES.find((v) => v.name === name)!.default;
    // The default as written in the code, in backticks or not, optionally followed by an explanation in parentheses.
    const written = defaultCell!.replaceAll("`", "");
    assert.ok(written === expected || written.startsWith(`${expected} (`), `${name}: the page says ${defaultCell}, the code ${expected}`);
  }
});

test("docs/calling-the-api.md lists every registered service and every service of proto/, and no other", () => {
  const documented = rows(section("docs/calling-the-api.md", "Services")).map(([name]) => name);
  const registered = [...CONTRACT_FILES.flatMap((f) => f.services.map((s) => s.typeName)), ...SYSTEM_SERVICES];
  assert.deepEqual(
    difference(registered, documented),
    { missing: [], extra: [] },
    "missing: registered, not listed; extra: listed, not registered",
  );

  const declared: string[] = [];
  for (const file of readdirSync(join(ROOT, "proto"), { recursive: true, encoding: "utf8" }).filter((f) => f.endsWith(".proto"))) {
    const proto = readFileSync(join(ROOT, "proto", file), "utf8");
    const pkg = /^package ([\w.]+);/m.exec(proto)?.[1];
    for (const m of proto.matchAll(/^service (\w+) \{/gm)) declared.push(`${pkg}.${m[1]}`);
  }
  assert.ok(declared.length > 10, `proto/ declares services (${declared.length})`);
  assert.deepEqual(
    difference([...declared, ...SYSTEM_SERVICES], documented),
    { missing: [], extra: [] },
    "missing: declared in proto/, not listed; extra: listed, not declared",
  );
});

test("docs/command-line.md lists every command of `platform-api --help`, and no other", async () => {
  const { stdout: help } = await platformCli(null, ["--help"]);
  const listing = /\ncommands:\n((?: {2}\S.*\n)+)/.exec(help);
  assert.ok(listing, `--help lists the commands:\n${help}`);
  const commands = listing[1]!
    .trimEnd()
    .split("\n")
    .map((line) => line.trim().split(/\s+/)[0]!);
  assert.ok(commands.includes("serve") && commands.length > 5, commands.join(" "));
  const documented = rows(section("docs/command-line.md", "Commands")).map(([name]) => name);
  assert.deepEqual(
    difference(commands, documented),
    { missing: [], extra: [] },
    "missing: a command, not listed; extra: listed, not a command",
  );
});
