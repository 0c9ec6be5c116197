// Prints every failing test of a node:test TAP log with its YAML block (error, location), so the end of a
// CI log, which is what gets shown, names what failed. Usage: node .ci/tap-failures.mjs <log file>
import { readFileSync } from "node:fs";
import { argv, stdout } from "node:process";

const lines = readFileSync(argv[2], "utf8").split("\n");
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
