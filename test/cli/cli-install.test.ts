/**
 * `npm link` and `npm install -g .` from the checkout, as the README says,
 * into a temporary global prefix (never the real one, and offline): the
 * `platform-api` they put in <prefix>/bin runs from any directory, and file
 * arguments resolve against the caller's directory. Needs the compiled
 * server (npm run build; npm test does it).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { PACKAGE_VERSION } from "../../src/package-root.js";
import { runChild } from "../support/child-process.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const VERSION = PACKAGE_VERSION;

/** Our environment without npm's own settings (npm test exports npm_config_*), with npm's global prefix at prefix. */
function npmEnv(prefix: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(npm_.*|NODE_TEST_CONTEXT|NODE_OPTIONS|PORT|HOST|LOG_LEVEL|PLATFORM_.*)$/i.test(k)) env[k] = v;
  }
  return {
    ...env,
    npm_config_prefix: prefix,
    npm_config_cache: join(prefix, "cache"),
    PATH: `${join(prefix, "bin")}${delimiter}${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ""}`,
  };
}

/** Runs file from cwd with env: npm, and the platform-api it put on PATH (not platformCli: that is this checkout's command). */
const run = (file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv) =>
  runChild([file, ...args], { cwd, env, timeoutMs: 120_000 });

const lockHash = () =>
  createHash("sha256")
    .update(readFileSync(join(ROOT, "package-lock.json")))
    .digest("hex");

for (const how of [["link"], ["install", "-g", "."]]) {
  test(`npm ${how.join(" ")} puts a platform-api on PATH that runs from any directory`, async (t) => {
    const prefix = mkdtempSync(join(tmpdir(), "platform-prefix-"));
    t.after(() => rmSync(prefix, { recursive: true, force: true })); // rm removes the links, never what they point at
    // npm wants <prefix>/lib to exist (the README says so for a fresh prefix).
    mkdirSync(join(prefix, "lib"));
    const elsewhere = join(prefix, "work");
    mkdirSync(elsewhere);
    const env = npmEnv(prefix);
    assert.equal((await run("npm", ["prefix", "-g"], ROOT, env)).stdout.trim(), prefix, "npm's global prefix is the temporary one");

    const before = lockHash();
    // --ignore-scripts: prepare would rebuild dist/ under the other tests that run it; npm test built it already.
    const linked = await run("npm", [...how, "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], ROOT, env);
    assert.equal(linked.code, 0, linked.stderr);
    assert.equal(lockHash(), before, "the checkout's package-lock.json is left alone");
    const bin = join(prefix, "bin", "platform-api");
    assert.ok(lstatSync(bin).isSymbolicLink());
    assert.equal(statSync(join(prefix, "lib", "node_modules", "platform-api", "package.json")).isFile(), true);

    const version = await run("platform-api", ["--version"], elsewhere, env);
    assert.equal(version.code, 0, version.stderr);
    assert.match(version.stdout, new RegExp(`^platform-api ${VERSION.replaceAll(".", "\\.")} \\(commit `));
    const help = await run("platform-api", ["--help"], elsewhere, env);
    assert.equal(help.code, 0, help.stderr);
    for (const command of ["serve", "admin-token", "keygen", "sign-jwt"]) assert.match(help.stdout, new RegExp(`^  ${command} `, "m"));

    // Relative paths are the caller's: the key lands in (and is read from) the directory it runs in.
    const keygen = await run("platform-api", ["keygen", "--out", "robot.jwk"], elsewhere, env);
    assert.equal(keygen.code, 0, keygen.stderr);
    assert.equal(statSync(join(elsewhere, "robot.jwk")).mode & 0o777, 0o600);
    const signed = await run(
      "platform-api",
      ["sign-jwt", "--key", "robot.jwk", "--issuer", "https://ci.example", "--subject", "robot", "--audience", "http://localhost:8080"],
      elsewhere,
      env,
    );
    assert.equal(signed.code, 0, signed.stderr);
    assert.match(signed.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
  });
}
