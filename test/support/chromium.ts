import { existsSync } from "node:fs";

/** Debian's Chromium, driven through playwright-core (no browser download). */
export const CHROMIUM = "/usr/bin/chromium";

/** Why a browser test skips here, or false when Chromium is installed. */
export const CHROMIUM_SKIP = existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium; .ci/run does)`;

/**
 * How this machine runs Chromium: headless, no sandbox (root), no GPU, no background traffic to Google, and only
 * the names hostRules resolves (a Chromium --host-resolver-rules value): nothing can leave the machine.
 */
export function chromiumArgs(hostRules: string): string[] {
  return [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    `--host-resolver-rules=${hostRules}`,
  ];
}
