import { readFileSync } from "node:fs";

/** package.json's engines.node: the Node versions the server supports. */
export const ENGINES = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { engines: { node: string } })
  .engines.node;

/** Whether version (x.y.z) is in range: comparator sets joined by `||`, each of `^x.y.z`, `>=x.y.z` and `<x.y.z`. */
export function admits(range: string, version: string): boolean {
  const parse = (v: string) => v.split(".").map(Number) as [number, number, number];
  const cmp = (a: number[], b: number[]) => a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!;
  const v = parse(version);
  return range.split("||").some((set) =>
    set
      .trim()
      .split(/\s+/)
      .every((c) => {
        const m = /^(\^|>=|<)(\d+\.\d+\.\d+)$/.exec(c);
        if (!m) throw new Error(`engines: cannot read ${c}`);
        const bound = parse(m[2]!);
        if (m[1] === ">=") return cmp(v, bound) >= 0;
        if (m[1] === "<") return cmp(v, bound) < 0;
        return cmp(v, bound) >= 0 && v[0] === bound[0];
      }),
  );
}
