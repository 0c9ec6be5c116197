/**
 * The table and the budget lines of `npm run bench`, from the rows of every
 * round: each figure is a median over rounds, each ratio the median of the
 * ratios taken within one round (a slow spell of a shared machine hits both
 * sides of a ratio alike).
 */
import type { Row } from "./load.js";

/** What the report knows of a scenario besides its rows. */
export interface ScenarioInfo {
  key: string;
  /** "HTTP/1.1" or "h2c". */
  transport: string;
  /** The key of the ceiling this row is compared with. */
  ceiling: string;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The rows of every round by scenario key, and the ratios between them. */
export class Samples {
  readonly rows = new Map<string, Row[]>();

  add(key: string, row: Row): void {
    this.rows.set(key, [...(this.rows.get(key) ?? []), row]);
  }

  has(...keys: string[]): boolean {
    return keys.every((k) => (this.rows.get(k)?.length ?? 0) > 0);
  }

  /** Median over rounds of a's figure / b's, as a percentage; `of` picks the figure (req/s by default). */
  ratio(a: string, b: string, of: (r: Row) => number | undefined = (r) => r.rps): number {
    const bs = this.rows.get(b)!;
    const within = this.rows.get(a)!.flatMap((r, i) => {
      const x = of(r);
      const y = bs[i] && of(bs[i]);
      return x === undefined || y === undefined ? [] : [x / y];
    });
    return within.length === 0 ? NaN : median(within) * 100;
  }

  /** The median row of a scenario. */
  figure(key: string): Row {
    const runs = this.rows.get(key)!;
    const cpu = runs.map((r) => r.cpuPerRequest).filter((c): c is number => c !== undefined);
    return {
      name: runs[0]!.name,
      rps: median(runs.map((r) => r.rps)),
      p50: median(runs.map((r) => r.p50)),
      p99: median(runs.map((r) => r.p99)),
      cpuPerRequest: cpu.length === runs.length ? median(cpu) : undefined,
    };
  }
}

/** Prints the table: one line per scenario, in the order given. */
export function printTable(samples: Samples, scenarios: readonly ScenarioInfo[]): void {
  console.log("| scenario | transport | req/s | p50 ms | p99 ms | server CPU µs/req | vs its ceiling |");
  console.log("|---|---|---:|---:|---:|---:|---:|");
  for (const s of scenarios) {
    if (!samples.has(s.key)) continue;
    const r = samples.figure(s.key);
    const cpu = r.cpuPerRequest === undefined ? "–" : Math.round(r.cpuPerRequest);
    const vs = samples.has(s.ceiling) ? `${samples.ratio(s.key, s.ceiling).toFixed(1)}%` : "–";
    console.log(`| ${r.name} | ${s.transport} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} | ${cpu} | ${vs} |`);
  }
}

/** Prints one budget line when every key it needs was measured: "meets" or "MISSES", the figure and the bound. */
export function printBudget(
  samples: Samples,
  label: string,
  keys: string[],
  value: () => number,
  bound: { atLeast?: number; atMost?: number },
  unit = "%",
): void {
  if (!samples.has(...keys)) return;
  const v = value();
  const ok = (bound.atLeast === undefined || v >= bound.atLeast) && (bound.atMost === undefined || v <= bound.atMost);
  const limit = bound.atLeast !== undefined ? `≥ ${bound.atLeast}` : `≤ ${bound.atMost}`;
  console.log(`${ok ? "meets " : "MISSES"}  ${label}: ${v.toFixed(1)}${unit} (budget ${limit}${unit})`);
}

/** The CPU per call of the GetGroup rows, by protocol and transport, against REST over HTTP/1.1. */
export function printCpuPerCall(samples: Samples, rows: { key: string; label: string }[], reference: string): void {
  if (!samples.has(reference)) return;
  console.log("\nServer CPU per GetGroup call, by protocol and transport (median µs; ratio to REST over HTTP/1.1 within each round):");
  for (const { key, label } of rows) {
    if (!samples.has(key)) continue;
    const cpu = samples.figure(key).cpuPerRequest;
    if (cpu === undefined) continue;
    console.log(
      `  ${label.padEnd(28)} ${String(Math.round(cpu)).padStart(5)} µs  ${samples.ratio(key, reference, (r) => r.cpuPerRequest).toFixed(0)}%`,
    );
  }
}
