import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The pages whose examples, links and references the doc tests check: README.md, then docs/*.md (not docs/deploy/). */
export function docPages(): string[] {
  const docs = readdirSync(join(ROOT, "docs"), { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".md"))
    .map((e) => `docs/${e.name}`)
    .sort();
  return ["README.md", ...docs];
}

/** A page's text, by its path from the repository root. */
export function readPage(page: string): string {
  return readFileSync(join(ROOT, page), "utf8");
}

/** A fenced code block: where it opens (1-based), its language, its lines with the fence's indentation removed. */
export interface Fence {
  line: number;
  language: string;
  text: string;
}

/** One line of a page with whether it lies inside a fenced block (fence lines included). */
interface Line {
  n: number;
  text: string;
  fenced: boolean;
}

/**
 * Walks markdown's lines and fenced blocks, indented ones (in list items) included. Throws on an unterminated
 * fence and on `~~~` fences, which the doc tests would otherwise have to understand too.
 */
function walk(markdown: string): { lines: Line[]; fences: Fence[] } {
  const lines: Line[] = [];
  const fences: Fence[] = [];
  let open: { line: number; indent: number; ticks: string; language: string; body: string[] } | null = null;
  for (const [i, text] of markdown.split("\n").entries()) {
    if (open) {
      lines.push({ n: i + 1, text, fenced: true });
      if (new RegExp(`^\\s*${open.ticks}\`*\\s*$`).test(text)) {
        fences.push({ line: open.line, language: open.language, text: open.body.join("\n") });
        open = null;
      } else {
        open.body.push(text.slice(Math.min(open.indent, text.length - text.trimStart().length)));
      }
      continue;
    }
    if (/^\s*~~~/.test(text)) throw new Error(`line ${i + 1}: write fences with backticks`);
    const fence = /^(\s*)(```+)\s*([^\s`]*)/.exec(text);
    if (fence) {
      open = { line: i + 1, indent: fence[1]!.length, ticks: fence[2]!, language: fence[3]!, body: [] };
      lines.push({ n: i + 1, text, fenced: true });
      continue;
    }
    lines.push({ n: i + 1, text, fenced: false });
  }
  if (open) throw new Error(`line ${open.line}: the fence opened here is never closed`);
  return { lines, fences };
}

/** Every fenced block of markdown, in order. */
export function fences(markdown: string): Fence[] {
  return walk(markdown).fences;
}

/** The 1-based numbers of the lines inside fenced blocks, fence lines included. */
export function fencedLines(markdown: string): Set<number> {
  return new Set(
    walk(markdown)
      .lines.filter((l) => l.fenced)
      .map((l) => l.n),
  );
}

/**
 * The anchors of markdown's headings as GitHub makes them: the heading's text without markup, lower case,
 * punctuation dropped (but `-` and `_`), spaces as `-`; a repeated anchor gets `-1`, `-2`…
 */
export function headingAnchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of walk(markdown).lines) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line.text);
    if (line.fenced || !heading) continue;
    const text = heading[1]!.replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/<[^>]+>/g, "");
    const base = text
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
      .replace(/ /g, "-");
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** A link of a page: its line and its target as written. */
export interface Link {
  line: number;
  target: string;
}

/** The inline links and images of markdown outside code (fenced blocks and code spans). */
export function links(markdown: string): Link[] {
  const out: Link[] = [];
  for (const line of walk(markdown).lines) {
    if (line.fenced) continue;
    const prose = line.text.replace(/(`+)[^`]*?\1/g, "");
    for (const m of prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ line: line.n, target: m[1]! });
  }
  return out;
}
