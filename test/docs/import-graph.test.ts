/**
 * The import graph of src/: every relative import of every module (static, `import type`, `export … from` and
 * `import()`, since a circle through a lazy import is still a circle a reader must follow), read with the
 * TypeScript compiler's own pre-processor. src/cli/ has no circle at all (issue 33: eleven commands imported
 * `type Command` from the table that imported them), and src/ as a whole keeps no circle beyond the ones listed
 * in KNOWN_CIRCLES: a new one fails here with its files named; removing a known one needs only its line deleted.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const SRC = fileURLToPath(new URL("../../src", import.meta.url));

/**
 * Circles in src/ known when this test was written, each as its files (relative to src/, sorted); they may go,
 * none may grow or be added. tracing.ts imports the SDK's module lazily and the SDK its types back.
 */
const KNOWN_CIRCLES: string[][] = [];

/** Every .ts file under dir, relative to src/ with / as separator. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith(".ts") ? [relative(SRC, path).split("\\").join("/")] : [];
  });
}

/** Each module of src/ → the modules of src/ it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sources(SRC)) {
    const imports = ts.preProcessFile(readFileSync(join(SRC, file), "utf8"), true, true).importedFiles;
    const targets = imports
      .map((i) => i.fileName)
      .filter((specifier) => specifier.startsWith("./") || specifier.startsWith("../"))
      .map((specifier) =>
        relative(SRC, join(SRC, dirname(file), specifier.replace(/\.js$/, ".ts")))
          .split("\\")
          .join("/"),
      );
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** The graph's circles: its strongly connected components of two or more modules, or one importing itself (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (module: string): void => {
    index.set(module, index.size);
    low.set(module, index.get(module)!);
    stack.push(module);
    onStack.add(module);
    for (const target of graph.get(module) ?? []) {
      if (!graph.has(target)) continue;
      if (!index.has(target)) {
        visit(target);
        low.set(module, Math.min(low.get(module)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(module, Math.min(low.get(module)!, index.get(target)!));
      }
    }
    if (low.get(module) !== index.get(module)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== module);
    if (component.length > 1 || graph.get(module)!.includes(module)) found.push(component.sort());
  };
  for (const module of graph.keys()) if (!index.has(module)) visit(module);
  return found;
}

const graph = importGraph();

test("the import graph is read: lazy imports are edges, and every import inside src/ names a module of it", () => {
  assert.ok(graph.size > 200, `src/ has its modules (${graph.size})`);
  assert.ok(graph.get("main.ts")?.includes("cli/index.ts"), "main.ts imports the command table");
  assert.ok(graph.get("cli/index.ts")?.includes("cli/serve.ts"), "the table's lazy import() of a command is an edge");
  // Outside src/ (gen/) is not part of the graph; inside, an import the graph lacks would hide a circle.
  const unread = [...graph].flatMap(([file, targets]) =>
    targets.filter((target) => !target.startsWith("../") && !graph.has(target)).map((target) => `${file} → ${target}`),
  );
  assert.deepEqual(unread, []);
});

test("src/cli/ has no import circle", () => {
  const inCli = circles(graph).filter((circle) => circle.some((file) => file.startsWith("cli/")));
  assert.deepEqual(inCli, []);
});

test("src/ has no import circle but the known ones", () => {
  const contained = (circle: string[]) => KNOWN_CIRCLES.some((known) => circle.every((file) => known.includes(file)));
  assert.deepEqual(
    circles(graph).filter((circle) => !contained(circle)),
    [],
    "a new circle: break it (a type of its own file, as src/cli/command.ts) or, if it must stay, list it in KNOWN_CIRCLES",
  );
});

test("the top of src/ holds the process alone: the entry point, configuration, the worker supervisor and at most two more", () => {
  const top = [...graph.keys()].filter((file) => !file.includes("/")).sort();
  assert.ok(top.includes("main.ts") && top.includes("config.ts") && top.includes("workers.ts"), top.join(", "));
  assert.ok(top.length <= 5, `src/ holds ${top.length} files: ${top.join(", ")}`);
});
