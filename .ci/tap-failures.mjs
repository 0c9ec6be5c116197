// Prints every failing test of a node:test log with its error and location, so the end of a CI log, which is
// what gets shown, names what failed. Usage: node .ci/tap-failures.mjs <log file>. Node 24's default reporter
// (spec) already ends with a "failing tests" section: that section is printed again; a TAP log (Node 20's default
// without a terminal, or --test-reporter=tap) has each "not ok" printed with its YAML block.
import { readFileSync } from "node:fs";
import { argv, exit, stdout } from "node:process";

const text = readFileSync(argv[2], "utf8");
const spec = text.lastIndexOf("\u2716 failing tests:");
if (spec >= 0) {
  stdout.write(text.slice(spec));
  exit(0);
}
const lines = text.split("\n");
const out = [];
let failures = 0;
for (let i = 0; i < lines.length; i++) {
  const m = /^(\s*)not ok \d+ - /.exec(lines[i]);
  if (!m) continue;
  const indent = m[1];
  out.push(lines[i]);
  // The YAML block follows at indent + 2 and ends with "..." at that indent.
  for (let j = i + 1; j < lines.length && j < i + 60; j++) {
    out.push(lines[j]);
    if (lines[j] === `${indent}  ...`) break;
  }
  failures++;
}
out.push(`# ${failures} failing test(s) and suite(s) listed above`);
stdout.write(`${out.join("\n")}\n`);
