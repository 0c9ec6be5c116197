import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import http from "node:http";

/**
 * The metrics token of the suites' servers that read /metrics on the public
 * port: /metrics is private by default (test/operations/metrics-access.test.ts), so
 * they are started with METRICS_ENV and scrape with METRICS_AUTH, as a
 * Prometheus server is set up.
 */
export const METRICS_TOKEN = "suite-metrics-token-7c41d9e2";
/** The server setting that lets a suite scrape the public port's /metrics. */
export const METRICS_ENV: Record<string, string> = { PLATFORM_METRICS_TOKEN: METRICS_TOKEN };
/** The header of a scrape with that token. */
export const METRICS_AUTH: Record<string, string> = { authorization: `Bearer ${METRICS_TOKEN}` };

/** GET <baseUrl>/metrics with METRICS_AUTH: the exposition text; fails unless 200. */
export async function scrapeMetrics(baseUrl: string): Promise<string> {
  const res = await fetch(`${baseUrl}/metrics`, { headers: METRICS_AUTH });
  const text = await res.text();
  assert.equal(res.status, 200, `GET /metrics: ${text}`);
  return text;
}

/** One sample of the exposition format: name, labels and value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A parsed scrape: its samples and each family's declared type. */
export interface Exposition {
  samples: Sample[];
  types: Map<string, string>;
}

/** Parses Prometheus text exposition (version 0.0.4); fails on a malformed line. */
export function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("# HELP ")) continue;
    if (line.startsWith("# TYPE ")) {
      const [, , name, type] = line.split(" ");
      types.set(name!, type!);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `well-formed sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    const raw = m[3]!.toLowerCase();
    const value = raw === "+inf" || raw === "inf" ? Infinity : raw === "-inf" ? -Infinity : raw === "nan" ? NaN : Number(raw);
    assert.ok(!Number.isNaN(value) || raw === "nan", `numeric value: ${line}`);
    samples.push({ name: m[1]!, labels, value });
  }
  return { samples, types };
}

/** The samples named `name` whose labels include every given label. */
export function find(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** The one value of a sample; fails unless exactly one matches. */
export function valueOf(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = find(samples, name, labels);
  assert.equal(found.length, 1, `exactly one ${name}${JSON.stringify(labels)}; got ${JSON.stringify(found)}`);
  return found[0]!.value;
}

/** A sample's value, 0 when there is none yet (a counter not yet counted). */
export function valueOr0(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = find(samples, name, labels);
  assert.ok(found.length <= 1, `at most one ${name}${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}

/** A raw answer: status, headers and body text. */
export interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
}

/** GET on a connection of its own (so node:cluster hands each to the next worker); a 30 s liveness bound, not a timing claim. */
export function getFresh(url: string, headers: Record<string, string> = {}, method = "GET"): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent: false, headers: { connection: "close", ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${url}: no answer within 30 s`)));
    req.end();
  });
}

/**
 * Every series of every counter (and histogram bucket, sum and count) in
 * `before` is at most its value in `after`: nothing went backwards.
 */
export function assertNothingWentBack(before: Exposition, after: Exposition): void {
  const monotone = (name: string, types: Map<string, string>) => {
    if (types.get(name) === "counter") return true;
    const family = name.replace(/_(bucket|sum|count)$/, "");
    return family !== name && types.get(family) === "histogram";
  };
  const key = (s: Sample) => `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`;
  const later = new Map(after.samples.map((s) => [key(s), s.value]));
  for (const s of before.samples) {
    if (!monotone(s.name, before.types)) continue;
    const now = later.get(key(s));
    assert.ok(now !== undefined, `${key(s)} is still reported`);
    assert.ok(now >= s.value, `${key(s)} went back from ${s.value} to ${now}`);
  }
}

/** Whether Debian's promtool is installed; in CI it must be (the check may not be skipped there). */
export function promtoolAvailable(): boolean {
  const found = spawnSync("promtool", ["--version"], { encoding: "utf8" }).status === 0;
  if (!found && process.env.CI) assert.fail("promtool is not installed, and CI must run the check (.ci/run installs Debian's prometheus)");
  return found;
}

/** `promtool check metrics` over the text: its exit code and what it printed (its problems). */
export function promtoolCheck(text: string): { code: number | null; output: string } {
  const run = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  return { code: run.status, output: `${run.stdout}${run.stderr}` };
}
