import { fencedLines, fences } from "./markdown.js";

/**
 * How a shell example runs in test/docs/docs-examples.test.ts, by the marker on the line above its fence:
 * none: in the page's session against a server on SQLite; `<!-- doc-test: postgres -->`: in the page's
 * PostgreSQL session (a server on a throwaway cluster, PLATFORM_DATABASE_URL set); `<!-- doc-test: skip (why) -->`:
 * not at all, for a reason the reader can see.
 */
export type BlockMode = { run: "sqlite" } | { run: "postgres" } | { skip: string };

/** A shell example of a page: where its fence opens, its text and how it runs. */
export interface ShellBlock {
  line: number;
  text: string;
  mode: BlockMode;
}

/** Fence languages that are shell: every such block runs unless marked, so none can dodge the test by its tag. */
const SHELL_LANGUAGES = new Set(["sh", "bash", "shell", "console", "shell-session", "zsh"]);
const MARKER = /^\s*<!-- doc-test: (?:skip \((.{10,})\)|(postgres)) -->$/;

/**
 * The shell blocks of markdown, in order, each with its mode. Throws on a marker that is malformed (a skip
 * without a reason of ten characters or more), not right above a shell block, or of the old
 * `readme-test` kind, so a skip is always deliberate and visible.
 */
export function shellBlocks(markdown: string): ShellBlock[] {
  const lines = markdown.split("\n");
  const opening = new Map(fences(markdown).map((f) => [f.line, f]));
  const fenced = fencedLines(markdown);
  for (const [i, line] of lines.entries()) {
    if (!line.includes("doc-test") && !line.includes("readme-test")) continue;
    if (!/^\s*<!--/.test(line) || fenced.has(i + 1)) continue; // prose or code that names the markers
    if (!MARKER.test(line))
      throw new Error(`line ${i + 1}: want <!-- doc-test: skip (a reason) --> or <!-- doc-test: postgres -->: ${line}`);
    const next = opening.get(i + 2);
    if (!next || !SHELL_LANGUAGES.has(next.language))
      throw new Error(`line ${i + 1}: a doc-test marker must stand right above a shell block`);
  }
  return [...opening.values()]
    .filter((f) => SHELL_LANGUAGES.has(f.language))
    .map((f) => {
      const marker = MARKER.exec(lines[f.line - 2] ?? "");
      const mode: BlockMode = !marker ? { run: "sqlite" } : marker[2] ? { run: "postgres" } : { skip: marker[1]! };
      return { line: f.line, text: f.text, mode };
    });
}
