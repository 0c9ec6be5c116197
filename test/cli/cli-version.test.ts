/**
 * `platform-api --version` tells builds apart: the version, the commit the build comes from (scripts/build.mjs
 * stamps it into dist/build-info.json, "-dirty" when the sources differed from it) and the schema versions it
 * migrates to. The stamp is checked on throwaway git checkouts: a commit, a change to a source, a change elsewhere,
 * a copy inside another project's checkout, no git at all, PLATFORM_BUILD_COMMIT (a Docker build), and a build
 * that was not stale but whose sources were committed since.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { buildCommit } from "../../scripts/build-commit.mjs";
import { PACKAGE_ROOT, PACKAGE_VERSION } from "../../src/package-root.js";
import { POSTGRES_SCHEMA_VERSION } from "../../src/store/postgres/migrations.js";
import { SQLITE_SCHEMA_VERSION } from "../../src/store/sqlite/migrations.js";
import { platformCli } from "../support/platform-cli.js";

const scratch = mkdtempSync(join(tmpdir(), "cli-version-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** git in dir, with an identity of its own (the machine's config may have none); stdout, trimmed. */
function git(dir: string, ...args: string[]): string {
  return execFileSync("git", ["-C", dir, "-c", "user.name=test", "-c", "user.email=test@example.com", ...args], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  }).trim();
}

/** A fresh checkout with one commit: a source, a README and package.json. */
function checkout(name: string): string {
  const dir = join(scratch, name);
  mkdirSync(join(dir, "src"), { recursive: true });
  writeFileSync(join(dir, "src", "main.ts"), "export {};\n");
  writeFileSync(join(dir, "README.md"), "# a checkout\n");
  writeFileSync(join(dir, "package.json"), "{}\n");
  git(dir, "init", "-q");
  git(dir, "add", ".");
  git(dir, "commit", "-q", "-m", "first");
  return dir;
}

const head = (dir: string) => git(dir, "rev-parse", "--short", "HEAD");
const NO_OVERRIDE = {};

test("the built command prints the version, the commit this checkout was built from and the schema", async () => {
  const run = await platformCli(null, ["--version"]);
  assert.equal(run.code, 0, run.stderr);
  const m = /^platform-api (\S+) \(commit (\S+); schema SQLite (\d+), PostgreSQL (\d+)\)\n$/.exec(run.stdout);
  assert.ok(m, run.stdout);
  const [, version, commit, sqlite, postgres] = m as unknown as [string, string, string, string, string];
  assert.deepEqual([version, Number(sqlite), Number(postgres)], [PACKAGE_VERSION, SQLITE_SCHEMA_VERSION, POSTGRES_SCHEMA_VERSION]);
  const inGit = spawnSync("git", ["-C", PACKAGE_ROOT, "rev-parse", "--show-toplevel"], { encoding: "utf8" });
  if (inGit.status !== 0) {
    assert.equal(commit, "unknown", "no git: no commit is made up");
    return;
  }
  // The build stamped HEAD as it was then: HEAD or, after commits since, one of its ancestors.
  const hash = commit.replace(/-dirty$/, "");
  assert.match(hash, /^[0-9a-f]{7,40}$/);
  const ancestor = spawnSync("git", ["-C", PACKAGE_ROOT, "merge-base", "--is-ancestor", hash, "HEAD"]);
  assert.equal(ancestor.status, 0, `${hash} is a commit of this checkout's history`);
});

describe("the commit scripts/build.mjs stamps", () => {
  test("a clean checkout: its HEAD, abbreviated", () => {
    const dir = checkout("clean");
    assert.match(head(dir), /^[0-9a-f]{7,}$/);
    assert.equal(buildCommit(dir, NO_OVERRIDE), head(dir));
  });

  test("a changed or new source makes it -dirty; a change to a file the build neither reads nor ships does not", () => {
    const dir = checkout("dirty");
    writeFileSync(join(dir, "README.md"), "# changed\n");
    assert.equal(buildCommit(dir, NO_OVERRIDE), head(dir), "README.md is not in the build");
    writeFileSync(join(dir, "src", "extra.ts"), "export const x = 1;\n");
    assert.equal(buildCommit(dir, NO_OVERRIDE), `${head(dir)}-dirty`, "an untracked source");
    rmSync(join(dir, "src", "extra.ts"));
    writeFileSync(join(dir, "src", "main.ts"), "export const y = 2;\n");
    assert.equal(buildCommit(dir, NO_OVERRIDE), `${head(dir)}-dirty`, "a changed source");
    git(dir, "commit", "-q", "-am", "second");
    assert.equal(buildCommit(dir, NO_OVERRIDE), head(dir), "committed");
  });

  test("no git, or a copy inside another project's checkout: unknown (null), never that project's commit", () => {
    const plain = join(scratch, "plain");
    mkdirSync(plain);
    assert.equal(buildCommit(plain, NO_OVERRIDE), null);
    const outer = checkout("outer");
    const nested = join(outer, "node_modules", "platform-api");
    mkdirSync(nested, { recursive: true });
    assert.equal(buildCommit(nested, NO_OVERRIDE), null);
  });

  test("PLATFORM_BUILD_COMMIT (a build without .git) is taken as given, and refused when it is no commit", () => {
    const plain = join(scratch, "given");
    mkdirSync(plain);
    assert.equal(buildCommit(plain, { PLATFORM_BUILD_COMMIT: "1339023" }), "1339023");
    assert.equal(buildCommit(checkout("given-checkout"), { PLATFORM_BUILD_COMMIT: "abcdef0-dirty" }), "abcdef0-dirty");
    assert.throws(() => buildCommit(plain, { PLATFORM_BUILD_COMMIT: "v0.3.0; rm -rf /" }), /PLATFORM_BUILD_COMMIT=.* is not a commit hash/);
  });

  test("build.mjs --if-stale with nothing to compile: stamps a commit made since, keeps the stamp where git cannot tell", () => {
    const dir = checkout("restamp");
    mkdirSync(join(dir, "scripts"));
    for (const file of ["build.mjs", "build-commit.mjs"]) copyFileSync(join(PACKAGE_ROOT, "scripts", file), join(dir, "scripts", file));
    mkdirSync(join(dir, "dist"));
    writeFileSync(join(dir, "dist", ".built"), "built\n");
    // Built after every source was written: nothing is stale, so nothing is compiled.
    const later = new Date(Date.now() + 3_600_000);
    utimesSync(join(dir, "dist", ".built"), later, later);
    const build = () => {
      const run = spawnSync(process.execPath, [join(dir, "scripts", "build.mjs"), "--if-stale"], {
        encoding: "utf8",
        env: { ...process.env, PLATFORM_BUILD_COMMIT: "" },
      });
      assert.equal(run.status, 0, run.stderr);
      return (JSON.parse(readFileSync(join(dir, "dist", "build-info.json"), "utf8")) as { commit: string | null }).commit;
    };
    git(dir, "add", "scripts");
    git(dir, "commit", "-q", "-m", "scripts");
    assert.equal(build(), head(dir), "the first run writes the stamp");
    const before = head(dir);
    git(dir, "commit", "-q", "--allow-empty", "-m", "another");
    assert.notEqual(head(dir), before);
    const last = head(dir);
    assert.equal(build(), last, "a commit since the build: the stamp follows it");
    rmSync(join(dir, ".git"), { recursive: true });
    assert.equal(build(), last, "without git (an unpacked tarball) the shipped stamp stays");
  });
});
