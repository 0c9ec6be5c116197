/**
 * Opening a page in the person's browser, when this machine can show one:
 * the command in $BROWSER (the first of a list separated like PATH; "%s"
 * stands for the URL, else it is appended), else `open` on macOS, the URL
 * handler on Windows, `xdg-open` on a desktop elsewhere. Nothing is started
 * on a machine with no display (an SSH session): a text browser would take
 * over the terminal the command prints to. Never fails: the URL is printed
 * either way.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";

/** The command line that would open url here, or null when no browser can be started. */
export function browserCommand(
  url: string,
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
): string[] | null {
  const configured = env.BROWSER?.split(delimiter)[0]?.trim();
  if (configured) {
    const words = configured.split(/\s+/);
    return words.some((w) => w.includes("%s")) ? words.map((w) => w.replaceAll("%s", url)) : [...words, url];
  }
  if (platform === "darwin") return ["open", url];
  if (platform === "win32") return ["rundll32", "url.dll,FileProtocolHandler", url];
  if (!env.DISPLAY && !env.WAYLAND_DISPLAY) return null;
  const onPath = (env.PATH ?? "").split(delimiter).some((dir) => dir !== "" && existsSync(join(dir, "xdg-open")));
  return onPath ? ["xdg-open", url] : null;
}

/** Starts the browser on url, detached, its output discarded; whether one was started (not whether it showed the page). */
export function openBrowser(url: string): boolean {
  const command = browserCommand(url);
  if (command === null) return false;
  try {
    const child = spawn(command[0]!, command.slice(1), { stdio: "ignore", detached: true });
    // A browser that cannot start is the same as none: the printed URL is the way.
    child.on("error", () => {});
    child.unref();
    return true;
  } catch {
    return false;
  }
}
