#!/usr/bin/env node
// Entry point of the `platform-api` command: runs the compiled JavaScript in dist/ (`npm run build`; npm ci
// builds it) with plain node. Stack traces point into the TypeScript sources through the source maps.
import { existsSync } from "node:fs";
import { supportedNode } from "./supported-node.js";

// Node 20 loads the SQLite driver (Node-API 10) only to crash on it: say what is needed instead.
if (!supportedNode(process.versions.node)) {
  process.stderr.write(
    `platform-api: Node.js ${process.versions.node} is not supported; run it on Node.js 24 LTS, or 22.14 or later (README: Prerequisites)\n`,
  );
  process.exit(2);
}

process.setSourceMapsEnabled(true);
const main = new URL("../dist/src/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(`platform-api: ${main.pathname} is missing; run \`npm run build\` in ${new URL("..", import.meta.url).pathname}\n`);
  process.exit(2);
}
await import(main.href);
