import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * A throwaway copy of part of this checkout, committed in a git repository of its own, with a home directory and a
 * TMPDIR of its own beside it. An example run in it as a reader runs it in the checkout shows what it leaves
 * behind, whatever is edited in the real checkout meanwhile (other work, other tests).
 */
export interface ScratchCheckout {
  /** The copy: run the example from here. */
  root: string;
  /** HOME and TMPDIR for the example, and no other variable that points elsewhere (XDG_*, GO*, npm's cache). */
  env: Record<string, string>;
  /** `git status --porcelain` of the copy: empty when the example left nothing git would show. */
  status(): string;
  /** What appeared outside the copy and its TMPDIR: in its home directory, or beside the copy. */
  writtenOutside(): string[];
  remove(): void;
}

/** The files git would take under paths (tracked, and untracked but not ignored), as they are in the working tree. */
function workingFiles(paths: readonly string[]): string[] {
  const out = execFileSync("git", ["-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ...paths], {
    encoding: "utf8",
  });
  return out.split("\0").filter((f) => f !== "");
}

function git(dir: string, ...args: string[]): string {
  return execFileSync("git", ["-C", dir, "-c", "user.name=test", "-c", "user.email=test@example.com", ...args], { encoding: "utf8" });
}

/** Everything under dir, as paths relative to it. */
function entries(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).sort();
}

/** Copies paths of this checkout (and its .gitignore) into a fresh repository, committed. */
export function scratchCheckout(paths: readonly string[]): ScratchCheckout {
  const parent = mkdtempSync(join(tmpdir(), "scratch-checkout-"));
  const root = join(parent, "checkout");
  const home = join(parent, "home");
  const tmp = join(parent, "tmp");
  for (const dir of [root, home, tmp]) mkdirSync(dir);
  for (const file of [".gitignore", ...workingFiles(paths)]) {
    mkdirSync(join(root, dirname(file)), { recursive: true });
    copyFileSync(join(ROOT, file), join(root, file));
  }
  git(root, "init", "-q");
  git(root, "add", "-A");
  git(root, "commit", "-q", "-m", "the checkout");
  const inherited = Object.entries(process.env).filter(
    ([name]) => !/^(XDG_|GO|npm_config_|NPM_CONFIG_)/.test(name) && name !== "PLATFORM_TOKEN" && name !== "TOKEN",
  );
  const env = { ...(Object.fromEntries(inherited) as Record<string, string>), HOME: home, TMPDIR: tmp };
  return {
    root,
    env,
    status: () => git(root, "status", "--porcelain", "--untracked-files=all"),
    writtenOutside: () => [
      ...entries(home).map((p) => `~/${p}`),
      ...readdirSync(parent)
        .filter((name) => !["checkout", "home", "tmp"].includes(name))
        .map((name) => `../${name}`),
    ],
    remove: () => rmSync(parent, { recursive: true, force: true }),
  };
}
