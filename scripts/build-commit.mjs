// The commit a build of dist/ comes from, which scripts/build.mjs stamps into dist/build-info.json for
// `platform-api --version`. Plain JavaScript on purpose: it runs before anything is compiled.
import { spawnSync } from "node:child_process";
import { realpathSync } from "node:fs";

/** What the build compiles or ships next to dist/: a difference from the commit in any of them makes it "-dirty". */
export const BUILD_SOURCES = ["src", "gen", "bin", "proto", "package.json", "tsconfig.json", "tsconfig.build.json"];

/** A commit as PLATFORM_BUILD_COMMIT may give it: an abbreviated or full hash, "-dirty" or not. */
const COMMIT = /^[0-9a-f]{7,40}(-dirty)?$/;

/**
 * The commit of the checkout at root ("1339023", or "1339023-dirty" when a file of BUILD_SOURCES differs from it,
 * untracked ones too), PLATFORM_BUILD_COMMIT when set (a Docker build has no .git:
 * `--build-arg PLATFORM_BUILD_COMMIT=$(git rev-parse --short HEAD)`), null when neither tells (an unpacked
 * tarball, a copy without .git, no git installed). Throws on a PLATFORM_BUILD_COMMIT that is no commit.
 */
export function buildCommit(root, env = process.env) {
  const given = env.PLATFORM_BUILD_COMMIT;
  if (given !== undefined && given !== "") {
    if (!COMMIT.test(given)) throw new Error(`PLATFORM_BUILD_COMMIT=${given} is not a commit hash (7 to 40 hex digits, optionally -dirty)`);
    return given;
  }
  const git = (...args) => {
    const run = spawnSync("git", ["-C", root, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    return run.status === 0 ? run.stdout.trim() : null;
  };
  // A copy inside another project's checkout (node_modules/platform-api) must not take that project's commit.
  const top = git("rev-parse", "--show-toplevel");
  if (top === null || realpathSync(top) !== realpathSync(root)) return null;
  const commit = git("rev-parse", "--short", "HEAD");
  const changes = git("status", "--porcelain", "--", ...BUILD_SOURCES);
  if (commit === null || changes === null) return null;
  return changes === "" ? commit : `${commit}-dirty`;
}
