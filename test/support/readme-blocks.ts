/** A shell example of a Markdown file: its fenced text, where it starts, and why it is not run, if it is not. */
export interface ShellBlock {
  /** 1-based line of the opening fence. */
  line: number;
  text: string;
  /** The reason of a `<!-- readme-test: skip (reason) -->` on the line before the fence, or null: the block runs. */
  skip: string | null;
}

/** Fence languages that are shell: every such block runs unless marked, so none can dodge the test by its tag. */
const SHELL_LANGUAGES = new Set(["sh", "bash", "shell"]);
const MARKER = /^<!-- readme-test: skip \((.+)\) -->$/;

/**
 * The shell blocks of markdown, in order. Throws on a skip marker that is
 * malformed (no reason) or not directly above a shell block, and on an
 * unterminated fence, so a skip is always deliberate and visible.
 */
export function shellBlocks(markdown: string): ShellBlock[] {
  const lines = markdown.split("\n");
  const blocks: ShellBlock[] = [];
  let open: { line: number; language: string; body: string[] } | null = null;
  for (const [i, line] of lines.entries()) {
    if (open) {
      if (/^```\s*$/.test(line)) {
        if (SHELL_LANGUAGES.has(open.language)) {
          const marker = MARKER.exec(lines[open.line - 2] ?? "");
          blocks.push({ line: open.line, text: open.body.join("\n"), skip: marker ? marker[1]! : null });
        }
        open = null;
      } else {
        open.body.push(line);
      }
      continue;
    }
    const fence = /^```(\S*)\s*$/.exec(line);
    if (fence) {
      open = { line: i + 1, language: fence[1]!, body: [] };
      continue;
    }
    if (line.startsWith("<!--") && line.includes("readme-test")) {
      if (!MARKER.test(line)) throw new Error(`line ${i + 1}: malformed marker, want <!-- readme-test: skip (reason) -->: ${line}`);
      const next = /^```(\S*)/.exec(lines[i + 1] ?? "");
      if (!next || !SHELL_LANGUAGES.has(next[1]!)) throw new Error(`line ${i + 1}: a skip marker must stand right above a shell block`);
    }
  }
  if (open) throw new Error(`line ${open.line}: the fence opened here is never closed`);
  return blocks;
}
