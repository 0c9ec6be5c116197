import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { NotFoundError } from "../domain/errors.js";
import { nulFieldOf } from "../domain/text-rules.js";
import type { AdvisoryRecord, Store } from "../store/store.js";
import { advisoriesFromOsv, isInvalid, parseOsv } from "./osv.js";

/** One record that was not imported, and why. */
export interface ImportProblem {
  file: string;
  /** The OSV id, when the record has a readable one. */
  id: string | null;
  problem: string;
}

/** What an import did. created, updated and unchanged count advisories; records and skipped count OSV records. */
export interface ImportResult {
  /** OSV records imported. */
  records: number;
  created: number;
  updated: number;
  unchanged: number;
  /** OSV records not imported (malformed, or a repeat of an id already read). */
  skipped: number;
  problems: ImportProblem[];
}

/** A path given to the import that cannot be read. */
export class ImportInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ImportInputError";
  }
}

/** Advisories written per transaction. */
const BATCH_SIZE = 500;

/** The files to read: each file given, and every *.json below each directory given, in path order. */
function osvFiles(paths: readonly string[]): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() && entry.name.endsWith(".json")) out.push(path);
    }
  };
  for (const path of paths) {
    let isDirectory: boolean;
    try {
      isDirectory = statSync(path).isDirectory();
    } catch {
      throw new ImportInputError(`${path}: no such file or directory`);
    }
    if (isDirectory) walk(path);
    else out.push(path);
  }
  return out;
}

/**
 * Imports OSV records from files and directories into group: validates each
 * record, skips (and reports) malformed ones, and upserts the rest in
 * batches, so a re-import of the same records changes nothing. Throws
 * NotFoundError when the group does not exist and ImportInputError when a
 * path cannot be read.
 */
export async function importAdvisories(store: Store, group: string, paths: readonly string[], importTime: number): Promise<ImportResult> {
  if (!(await store.groups.get(group))) throw new NotFoundError("group", group);
  const result: ImportResult = { records: 0, created: 0, updated: 0, unchanged: 0, skipped: 0, problems: [] };
  const fileOf = new Map<string, string>();
  let batch: AdvisoryRecord[] = [];
  const flush = async () => {
    if (batch.length === 0) return;
    for (const outcome of await store.advisories.upsert(batch)) result[outcome]++;
    batch = [];
  };
  const skip = (file: string, id: string | null, problems: string[]) => {
    result.skipped++;
    for (const problem of problems) result.problems.push({ file, id, problem });
  };

  for (const file of osvFiles(paths)) {
    let doc: unknown;
    try {
      doc = JSON.parse(readFileSync(file, "utf8"));
    } catch (err) {
      skip(file, null, [err instanceof SyntaxError ? `invalid JSON: ${err.message}` : `cannot read: ${(err as Error).message}`]);
      continue;
    }
    // A NUL cannot be stored (PostgreSQL refuses it; SQLite would keep it and fail the migration later).
    const nul = nulFieldOf(doc);
    if (nul !== null) {
      skip(file, null, [`${nul} holds a NUL character (U+0000), which cannot be stored`]);
      continue;
    }
    const record = parseOsv(doc);
    if (isInvalid(record)) {
      skip(file, record.id, record.problems);
      continue;
    }
    const earlier = fileOf.get(record.id);
    if (earlier !== undefined) {
      skip(file, record.id, [`the same id as ${earlier}; only the first is imported`]);
      continue;
    }
    fileOf.set(record.id, file);
    result.records++;
    batch.push(...advisoriesFromOsv(record, group, importTime));
    if (batch.length >= BATCH_SIZE) await flush();
  }
  await flush();
  return result;
}
