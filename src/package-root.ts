import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The directory holding the server's package.json and proto/, found from this module's own location, so it
 * is the same whether the sources run (src/) or the compiled code (dist/src/), from a checkout, `npm link` or
 * a global install.
 */
export const PACKAGE_ROOT = ((): string => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "proto"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error(`platform-api: no package root above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
})();

/** The server's version, from its package.json. */
export const PACKAGE_VERSION = (JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version: string }).version;
