#!/usr/bin/env node
// `npm run build`: compiles src/ and gen/ to JavaScript in dist/ (with source maps), which `npm start` and the
// `platform-api` command run with plain node. `--if-stale` (npm ci's prepare, npm start, npm test) compiles only
// when a source is newer than the last build, so an unchanged checkout starts without running the compiler.
// Either way dist/build-info.json names the commit the build comes from (`platform-api --version`).
// Plain JavaScript on purpose: it runs before anything is compiled.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { buildCommit } from "./build-commit.mjs";

const ROOT = join(import.meta.dirname, "..");
const STAMP = join(ROOT, "dist", ".built");
const BUILD_INFO = join(ROOT, "dist", "build-info.json");
const INPUTS = ["src", "gen", "tsconfig.json", "tsconfig.build.json", "package.json"];

/** The newest modification time under a file or directory, in ms. */
function newest(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let max = st.mtimeMs;
  for (const name of readdirSync(path)) max = Math.max(max, newest(join(path, name)));
  return max;
}

function stale() {
  if (!existsSync(STAMP)) return true;
  const built = statSync(STAMP).mtimeMs;
  return INPUTS.some((input) => existsSync(join(ROOT, input)) && newest(join(ROOT, input)) > built);
}

/** The commit dist/build-info.json names, undefined when there is no such file. */
function stampedCommit() {
  try {
    return JSON.parse(readFileSync(BUILD_INFO, "utf8")).commit;
  } catch {
    return undefined;
  }
}

/** Writes dist/build-info.json whole (a command starting meanwhile reads the old file or the new one). */
function writeBuildInfo(commit) {
  const temporary = `${BUILD_INFO}.${process.pid}`;
  writeFileSync(temporary, `${JSON.stringify({ commit })}\n`);
  renameSync(temporary, BUILD_INFO);
}

let commit;
try {
  commit = buildCommit(ROOT);
} catch (err) {
  process.stderr.write(`platform-api: ${err.message}\n`);
  process.exit(2);
}

if (process.argv.includes("--if-stale") && !stale()) {
  // Unchanged sources compile to the same dist/, but a commit of them moves what it comes from. Without git
  // (an unpacked tarball) the commit shipped in dist/ stays.
  const stamped = stampedCommit();
  if (stamped === undefined || (commit !== null && commit !== stamped)) writeBuildInfo(commit);
  process.exit(0);
}

let tsc;
try {
  tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
} catch {
  // A production install (npm ci --omit=dev) has no compiler: it runs the dist/ that was shipped.
  if (existsSync(STAMP)) process.exit(0);
  process.stderr.write("platform-api: dist/ is missing and TypeScript is not installed; run `npm ci` (with dev dependencies)\n");
  process.exit(2);
}
const result = spawnSync(process.execPath, [tsc, "-p", join(ROOT, "tsconfig.build.json")], { stdio: "inherit" });
if (result.status !== 0) process.exit(result.status ?? 1);
writeBuildInfo(commit);
writeFileSync(STAMP, `${new Date().toISOString()}\n`);
