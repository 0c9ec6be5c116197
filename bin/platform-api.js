#!/usr/bin/env node
// Entry point of the `platform-api` command: runs the compiled JavaScript in dist/ (`npm run build`; npm ci
// builds it) with plain node. Stack traces point into the TypeScript sources through the source maps.
import { existsSync } from "node:fs";

process.setSourceMapsEnabled(true);
const main = new URL("../dist/src/main.js", import.meta.url);
if (!existsSync(main)) {
  process.stderr.write(`platform-api: ${main.pathname} is missing; run \`npm run build\` in ${new URL("..", import.meta.url).pathname}\n`);
  process.exit(2);
}
await import(main.href);
