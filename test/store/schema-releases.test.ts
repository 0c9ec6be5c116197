/**
 * Releases an operator can tell apart: every schema change moves the version, so two builds that say the same
 * version migrate to the same schema, and a rollback refusal names versions that exist. The table of which version
 * brought each schema (src/store/schema-releases.ts) is held to the migrations, to package.json's version and to
 * CHANGELOG.md's "Schema:" lines: a migration added without a new version and its section fails here.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { PACKAGE_ROOT, PACKAGE_VERSION } from "../../src/package-root.js";
import { newerSchemaError } from "../../src/store/migration-log.js";
import { POSTGRES_SCHEMA_VERSION } from "../../src/store/postgres/migrations.js";
import { CURRENT_SCHEMA, nextSchemaVersion, SCHEMA_RELEASES, type SchemaRelease } from "../../src/store/schema-releases.js";
import { SQLITE_SCHEMA_VERSION } from "../../src/store/sqlite/migrations.js";

const CHANGELOG = readFileSync(join(PACKAGE_ROOT, "CHANGELOG.md"), "utf8");

/** [major, minor, patch] of a release version (no pre-release part: the project has none). */
function parts(version: string): [number, number, number] {
  assert.match(version, /^\d+\.\d+\.\d+$/, `${version} is a release version`);
  return version.split(".").map(Number) as [number, number, number];
}

/** Negative, zero or positive as a is older than, the same as or newer than b. */
function compare(a: string, b: string): number {
  const [x, y] = [parts(a), parts(b)];
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}

/** CHANGELOG.md's sections: the heading's name ("Unreleased", "0.3.0") and the text up to the next heading. */
function sections(): { name: string; text: string }[] {
  return CHANGELOG.split(/^## /m)
    .slice(1)
    .map((chunk) => ({ name: /^\[([^\]]+)\]/.exec(chunk)?.[1] ?? chunk.split("\n")[0]!, text: chunk }));
}

/** The schema a section names ("Schema: SQLite 13, PostgreSQL 8", or 0.1.0's "Schema at its end: …"), every one it names. */
function schemasNamed(text: string): { sqlite: number; postgres: number }[] {
  return [...text.matchAll(/Schema(?: at its end)?: SQLite (\d+), PostgreSQL (\d+)/g)].map((m) => ({
    sqlite: Number(m[1]),
    postgres: Number(m[2]),
  }));
}

/** The row in force at a version: the last one at or before it. */
function releaseAt(version: string): SchemaRelease | undefined {
  return SCHEMA_RELEASES.filter((r) => compare(r.version, version) <= 0).at(-1);
}

test("the last row is the schema the migrations make: a migration needs a new version", () => {
  assert.deepEqual(
    { sqlite: CURRENT_SCHEMA.sqlite, postgres: CURRENT_SCHEMA.postgres },
    { sqlite: SQLITE_SCHEMA_VERSION, postgres: POSTGRES_SCHEMA_VERSION },
    "a schema change adds a row to SCHEMA_RELEASES (src/store/schema-releases.ts) with the next minor version, " +
      "moves package.json's version to it and opens its section in CHANGELOG.md",
  );
});

test("each row is a new minor version that moves a schema forward", () => {
  for (const [i, row] of SCHEMA_RELEASES.entries()) {
    assert.equal(parts(row.version)[2], 0, `${row.version}: a schema change comes with a minor (or major) version, never a patch`);
    const before = SCHEMA_RELEASES[i - 1];
    if (!before) continue;
    assert.ok(compare(nextSchemaVersion(before.version), row.version) <= 0, `${row.version} comes after ${before.version}'s minor`);
    assert.ok(row.sqlite >= before.sqlite && row.postgres >= before.postgres, `${row.version} moves no schema back`);
    assert.ok(row.sqlite > before.sqlite || row.postgres > before.postgres, `${row.version} changes a schema`);
  }
});

test("package.json's version is the last schema's version or a patch of it", () => {
  const [major, minor] = parts(CURRENT_SCHEMA.version);
  assert.ok(
    compare(PACKAGE_VERSION, CURRENT_SCHEMA.version) >= 0,
    `package.json says ${PACKAGE_VERSION}, older than ${CURRENT_SCHEMA.version}`,
  );
  assert.deepEqual(parts(PACKAGE_VERSION).slice(0, 2), [major, minor], `${PACKAGE_VERSION} has no schema change of its own`);
});

test("CHANGELOG.md: each version's section names its schema, the one the table has for it", () => {
  const versions = sections().filter((s) => s.name !== "Unreleased");
  assert.ok(versions.length >= SCHEMA_RELEASES.length);
  for (const { name, text } of versions) {
    const named = schemasNamed(text);
    assert.equal(named.length, 1, `## [${name}] names its schema once ("Schema: SQLite n, PostgreSQL m")`);
    const row = releaseAt(name);
    assert.ok(row, `${name} is in SCHEMA_RELEASES or after a version that is`);
    assert.deepEqual(named[0], { sqlite: row.sqlite, postgres: row.postgres }, `## [${name}]`);
  }
  const listed = versions.map((s) => s.name);
  for (const row of SCHEMA_RELEASES) assert.ok(listed.includes(row.version), `CHANGELOG.md has a section for ${row.version}`);
  assert.ok(listed.includes(PACKAGE_VERSION), `CHANGELOG.md has a section for package.json's ${PACKAGE_VERSION} (what --version says)`);
  assert.deepEqual(
    listed,
    [...listed].sort((a, b) => compare(b, a)),
    "newest first",
  );
});

test("CHANGELOG.md: Unreleased names no schema (a schema change opens a version)", () => {
  const unreleased = sections().filter((s) => s.name === "Unreleased");
  assert.equal(unreleased.length, 1);
  assert.deepEqual(schemasNamed(unreleased[0]!.text), []);
  assert.doesNotMatch(unreleased[0]!.text, /Schema:/);
});

test("a rollback refusal names this version, its schema and the first version that can have migrated the database", () => {
  assert.equal(nextSchemaVersion("0.3.0"), "0.4.0");
  assert.equal(nextSchemaVersion("1.4.2"), "1.5.0");
  const next = nextSchemaVersion(PACKAGE_VERSION);
  assert.ok(
    SCHEMA_RELEASES.every((r) => compare(r.version, next) < 0),
    `${next} is newer than every version this binary knows`,
  );
  assert.equal(
    newerSchemaError("sqlite", SQLITE_SCHEMA_VERSION + 1, SQLITE_SCHEMA_VERSION).message,
    `the SQLite database's schema version ${SQLITE_SCHEMA_VERSION + 1} is newer than this server's ${SQLITE_SCHEMA_VERSION} ` +
      `(platform-api ${PACKAGE_VERSION}): platform-api ${next} or later migrated it (CHANGELOG.md names each version's schema); ` +
      "run that version again, or restore the backup taken before the upgrade (docs/operations.md: Upgrading and rolling back)",
  );
});
