/**
 * npm 11 asks every project to decide which dependencies may run install scripts (package.json's allowScripts)
 * and warns on `npm ci` about each one not decided, which read as if SQLite's build had been skipped. Every
 * package of the lockfile with an install script is decided, better-sqlite3 allowed (its
 * implicit node-gyp rebuild does nothing where it ships a binary, and compiles SQLite elsewhere);
 * and npm itself, where it knows allowScripts, finds none pending.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { PACKAGE_ROOT } from "../../src/package-root.js";

const manifest = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { allowScripts?: Record<string, unknown> };
const lock = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, { hasInstallScript?: boolean; resolved?: string }>;
};

/** The names of the lockfile's packages that have install scripts (preinstall, install, postinstall). */
const withScripts = [
  ...new Set(
    Object.entries(lock.packages)
      .filter(([, entry]) => entry.hasInstallScript)
      .map(([path]) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length)),
  ),
].sort();

test("allowScripts decides exactly the lockfile's packages with install scripts, and lets better-sqlite3 build SQLite where it ships no binary", () => {
  const policy = manifest.allowScripts ?? {};
  assert.ok(withScripts.includes("better-sqlite3"));
  assert.deepEqual(Object.keys(policy).sort(), withScripts, "a new dependency with an install script needs a decision here");
  assert.ok(
    Object.values(policy).every((v) => typeof v === "boolean"),
    "true runs its scripts, false skips them",
  );
  assert.equal(policy["better-sqlite3"], true);
});

test("entries name packages, not versions: the lockfile has no resolved URLs, and npm verifies a pinned version only by one", () => {
  // omit-lockfile-registry-resolved: npm cannot tell a package's version without the URL, so it never matches
  // `pkg@1.2.3` (npm help approve-scripts). The lockfile's integrity hashes pin the versions instead.
  const unresolved = Object.entries(lock.packages).some(([path, entry]) => path !== "" && entry.resolved === undefined);
  for (const key of Object.keys(manifest.allowScripts ?? {})) {
    if (unresolved) assert.doesNotMatch(key, /.@/, `${key}: a name alone`);
  }
});

test("npm finds no package with install scripts left to decide (npm 11's approve-scripts, where npm has it)", (t) => {
  const run = spawnSync("npm", ["approve-scripts", "--allow-scripts-pending", "--offline"], { cwd: PACKAGE_ROOT, encoding: "utf8" });
  if (run.status !== 0 && /Unknown command|unknown command/i.test(`${run.stdout}${run.stderr}`)) {
    t.skip(`npm ${spawnSync("npm", ["--version"], { encoding: "utf8" }).stdout.trim()} has no allowScripts`);
    return;
  }
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), "No packages with unreviewed install scripts.");
});
