import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** What a run of the command line printed and how it exited. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the real `platform-api` command (bin/platform-api.js) in a child
 * process from the repository root, over a data directory or a test
 * server's storage (its PostgreSQL database too), as a user would.
 */
export function platformCli(
  storage: string | { dataDir: string; databaseUrl: string },
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<CliRun> {
  const where =
    typeof storage === "string"
      ? { PLATFORM_DATA_DIR: storage }
      : { PLATFORM_DATA_DIR: storage.dataDir, PLATFORM_DATABASE_URL: storage.databaseUrl };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["bin/platform-api.js", ...args], {
      cwd: ROOT,
      env: { ...process.env, ...where, LOG_LEVEL: "silent", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** The counts an import-advisories run printed ("created: N" lines). */
export function importCounts(run: CliRun): { created: number; updated: number; unchanged: number; skipped: number } {
  const count = (label: string) => {
    const m = new RegExp(`^${label}: (\\d+)$`, "m").exec(run.stdout);
    if (!m) throw new Error(`no "${label}:" line in the output:\n${run.stdout}\n${run.stderr}`);
    return Number(m[1]);
  };
  return { created: count("created"), updated: count("updated"), unchanged: count("unchanged"), skipped: count("skipped") };
}
