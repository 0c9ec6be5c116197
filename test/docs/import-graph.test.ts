/**
 * The import graph of src/: every relative import of every module (static, `import type`, `export … from` and
 * `import()`, since a circle through a lazy import is still a circle a reader must follow), read with the
 * TypeScript compiler's own pre-processor. It holds the shape issue 33 gave the house: no import circle anywhere
 * (src/cli/'s commands once imported `type Command` from the table that imported them), every room on its floor
 * with no import running up (LAYERS), no room over 30% of the lines, and the top of src/ holding the process alone.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const SRC = fileURLToPath(new URL("../../src", import.meta.url));

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

test("src/ has no import circle", () => {
  assert.deepEqual(
    circles(graph),
    [],
    "a new circle: break it, as src/cli/command.ts (a type in a file of its own) and tracing-start.ts did",
  );
});

/**
 * The rooms of src/, from the ground up: a module may import its own room and any room below it. The composition
 * root (app/) builds the services' dependencies and hands the transports (server/) the wrapped services, so no
 * transport reaches up into what composes it; config.ts sits low, since every room reads its settings.
 */
const LAYERS: readonly (readonly string[])[] = [
  ["package-root.ts", "startup-error.ts"],
  ["domain"],
  ["codec"],
  ["config.ts"],
  ["store"],
  ["advisories", "auth"],
  ["delivery"],
  ["services"],
  ["server"],
  ["registry"],
  ["app"],
  ["workers.ts"],
  ["cli"],
  ["main.ts"],
];

/** The room of a module of src/: its top folder, or the file itself at the top. */
const roomOf = (file: string): string => file.split("/")[0]!;
const floorOf = (file: string): number => LAYERS.findIndex((rooms) => rooms.includes(roomOf(file)));

test("every room of src/ has its floor, and no import runs up a floor", () => {
  const unplaced = [...new Set([...graph.keys()].map(roomOf))].filter((room) => floorOf(room) < 0);
  assert.deepEqual(unplaced, [], "a new room: give it its floor in LAYERS");
  const upward = [...graph].flatMap(([file, targets]) =>
    targets.filter((target) => graph.has(target) && floorOf(target) > floorOf(file)).map((target) => `${file} → ${target}`),
  );
  assert.deepEqual(upward, []);
});

test("no room of src/ holds more than 30% of its lines", () => {
  const lines = new Map<string, number>();
  for (const file of graph.keys()) {
    const count = readFileSync(join(SRC, file), "utf8").split("\n").length;
    lines.set(roomOf(file), (lines.get(roomOf(file)) ?? 0) + count);
  }
  const total = [...lines.values()].reduce((a, b) => a + b, 0);
  const heavy = [...lines]
    .filter(([, count]) => count > total * 0.3)
    .map(([room, count]) => `${room}: ${Math.round((100 * count) / total)}%`);
  assert.deepEqual(heavy, []);
});

test("the top of src/ holds the process alone: the entry point, configuration, the worker supervisor and at most two more", () => {
  const top = [...graph.keys()].filter((file) => !file.includes("/")).sort();
  assert.ok(top.includes("main.ts") && top.includes("config.ts") && top.includes("workers.ts"), top.join(", "));
  assert.ok(top.length <= 5, `src/ holds ${top.length} files: ${top.join(", ")}`);
});
