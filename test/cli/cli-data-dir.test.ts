/**
 * Where the data is when PLATFORM_DATA_DIR is not set (issue 24: `npm exec platform-api` from a subdirectory
 * looked for ./data there while `npm start` used the checkout's): data/ at the top of the checkout, whatever
 * the working directory, for `npm exec`, the command run by its path and `npm start` alike; a package
 * installed under node_modules keeps ./data of the working directory, since an upgrade replaces its own.
 * Each case runs a copy of the compiled package in a temporary directory (never the real checkout's data/),
 * with `list-keys`, which names the directory it looked in when no server has made a database there.
 */
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { defaultDataDir } from "../../src/config.js";
import { cleanEnv, runChild } from "../support/child-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const dir = realpathSync(mkdtempSync(join(tmpdir(), "platform-data-dir-")));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of the built package at root: what `npm link` or a checkout holds, its dependencies linked. */
function packageAt(root: string): string {
  mkdirSync(root, { recursive: true });
  // Times kept: npm exec runs the package's prepare (scripts/build.mjs --if-stale), which must find dist/ fresh.
  for (const part of ["package.json", "package-lock.json", "scripts", "bin", "dist"])
    cpSync(join(ROOT, part), join(root, part), { recursive: true, preserveTimestamps: true });
  symlinkSync(join(ROOT, "proto"), join(root, "proto"));
  symlinkSync(join(ROOT, "node_modules"), join(root, "node_modules"));
  mkdirSync(join(root, "docs", "guide"), { recursive: true });
  return root;
}

/**
 * Runs file from cwd: the command of a copied package, by npm exec or by its path (not platformCli, which runs
 * this checkout's command from its root: where the data is depends on exactly those).
 */
async function run(file: string, args: string[], cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // Without npm's own settings (npm test exports npm_config_local_prefix and the like); npm exec installs a link
  // to the package in its cache: a temporary cache, not the user's.
  const env = Object.fromEntries(Object.entries(cleanEnv({ LOG_LEVEL: "silent" })).filter(([k]) => !/^npm_/i.test(k)));
  env.npm_config_cache = join(dir, "npm-cache");
  return runChild([file, ...args], { cwd, env, timeoutMs: 120_000 });
}

/** The directory a refused list-keys says it looked in. */
function lookedIn(res: { code: number | null; stderr: string }): string {
  assert.equal(res.code, 2, res.stderr);
  const m = /^platform-api: no database in (\S+?);/.exec(res.stderr);
  assert.ok(m, res.stderr);
  return m[1]!;
}

test("a checkout: npm exec from a subdirectory and the command run by its path use <checkout>/data", async () => {
  const checkout = packageAt(join(dir, "checkout"));
  const sub = join(checkout, "docs", "guide");
  assert.equal(lookedIn(await run("npm", ["exec", "--offline", "--", "platform-api", "list-keys"], sub)), join(checkout, "data"));
  assert.equal(lookedIn(await run(process.execPath, [join(checkout, "bin", "platform-api.js"), "list-keys"], dir)), join(checkout, "data"));
  assert.equal(existsSync(join(checkout, "data")), false, "nothing created");
});

test("a package installed under node_modules: ./data of the working directory", async () => {
  const installed = packageAt(join(dir, "prefix", "lib", "node_modules", "platform-api"));
  const work = join(dir, "work");
  mkdirSync(work);
  assert.equal(lookedIn(await run(process.execPath, [join(installed, "bin", "platform-api.js"), "list-keys"], work)), join(work, "data"));
});

test("defaultDataDir: the checkout's data/, or the working directory's for an installed package", () => {
  assert.equal(defaultDataDir("/home/ann/platform-api"), "/home/ann/platform-api/data");
  assert.equal(defaultDataDir("/usr/lib/node_modules/platform-api"), join(process.cwd(), "data"));
});
