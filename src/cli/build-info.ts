import { readFileSync } from "node:fs";

/**
 * The commit the running code was compiled from ("1339023", "1339023-dirty" when the working tree differed from
 * it), as scripts/build.mjs stamped it into dist/build-info.json (two folders up from dist/src/cli/); null when
 * unknown: the sources run by tsx (no build-info.json sits beside src/), or a build without git or
 * PLATFORM_BUILD_COMMIT.
 */
export const BUILD_COMMIT: string | null = ((): string | null => {
  try {
    const info = JSON.parse(readFileSync(new URL("../../build-info.json", import.meta.url), "utf8")) as { commit?: unknown };
    return typeof info.commit === "string" ? info.commit : null;
  } catch {
    return null;
  }
})();
