/**
 * The OSV import as users run it: `platform-api import-advisories` in a child
 * process over the data directory of a running server (both open the one
 * SQLite file in WAL mode), then what the server lists.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { advisoriesFromOsv, isInvalid, parseOsv, type OsvRecord } from "../../src/advisories/osv.js";
import { importCounts, platformCli } from "../support/platform-cli.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const DATA = fileURLToPath(new URL("../data/osv", import.meta.url));
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/** The test records, read independently of the importer: file path → parsed JSON. */
function osvRecords(dir = DATA): Map<string, Json> {
  const out = new Map<string, Json>();
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith(".json")) {
      const path = join(entry.parentPath, entry.name);
      out.set(path, JSON.parse(readFileSync(path, "utf8")));
    }
  }
  return out;
}

/** The uid an advisory for one package of one record must have in group. */
function expectedUid(group: string, id: string, ecosystem: string, name: string): string {
  return `${group}/${createHash("sha256").update(`${id}\u0000${ecosystem}\u0000${name}`).digest("hex").slice(0, 16)}`;
}

const RECORDS = osvRecords();
const EXPECTED = [...RECORDS.values()].flatMap((r) =>
  [...new Set(r.affected.map((a: Json) => `${a.package.ecosystem}\u0000${a.package.name}`))].map((key) => {
    const [ecosystem, name] = (key as string).split("\u0000") as [string, string];
    return { id: r.id as string, ecosystem, name };
  }),
);

let srv: TestServer;
let org: string;
const temps: string[] = [];
before(async () => {
  srv = await startTestServer();
  org = (await createGroup(srv.url, null, "advisory importers")).uid;
});
after(async () => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
  await srv.close();
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "osv-import-"));
  temps.push(dir);
  return dir;
}

const importInto = (group: string, ...paths: string[]) => platformCli(srv, ["import-advisories", "--group", group, ...paths]);

/** Every advisory of group, as the server lists them (uid order). */
async function listed(group: string): Promise<Json[]> {
  const body = await ok(rest(srv.url, "GET", `/vulnerabilities/v2beta1/advisories?uidp.children_of=${group}&page_size=200`));
  assert.equal(body.totalCount, String(body.advisories.length));
  return body.advisories;
}

describe("import-advisories", () => {
  let first: Json[];

  test("creates one advisory per record and affected package, at uids derived from them", async () => {
    assert.deepEqual(await listed(org), [], "nothing before the import (and the server has counted it)");
    assert.equal(RECORDS.size, 10);
    assert.equal(EXPECTED.length, 12);
    const run = await importInto(org, DATA);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stderr, "");
    assert.deepEqual(importCounts(run), { created: 12, updated: 0, unchanged: 0, skipped: 0 });
    assert.match(run.stdout, /imported 10 of 10 OSV records/);

    first = await listed(org);
    assert.equal(first.length, 12);
    const want = EXPECTED.map((e) => expectedUid(org, e.id, e.ecosystem, e.name)).sort();
    assert.deepEqual(
      first.map((a) => a.uid),
      want,
    );
    for (const e of EXPECTED) {
      const a = first.find((x) => x.uid === expectedUid(org, e.id, e.ecosystem, e.name));
      assert.equal(a.advisoryId, e.id);
      assert.equal(a.artifactName, e.name);
      assert.equal(a.componentName, e.name);
      assert.equal(a.componentType, e.ecosystem.toLowerCase());
      assert.equal(a.author, "osv-import");
    }
  });

  test("a re-import creates nothing, updates nothing and changes nothing", async () => {
    const run = await importInto(org, DATA);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(importCounts(run), { created: 0, updated: 0, unchanged: 12, skipped: 0 });
    assert.deepEqual(await listed(org), first, "the same advisories, times included");
    // A file given directly, next to the directory holding it, is a repeat: skipped, never duplicated.
    const again = await importInto(org, `${DATA}/ghsa/GHSA-2cjh-75gp-34gc.json`, DATA);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(importCounts(again), { created: 0, updated: 0, unchanged: 12, skipped: 1 });
    assert.match(again.stderr, /GHSA-2cjh-75gp-34gc\.json: GHSA-2cjh-75gp-34gc: the same id as /);
    assert.deepEqual(await listed(org), first);
  });

  test("a modified record updates exactly its advisory, keeping its create time", async () => {
    const dir = tempDir();
    cpSync(DATA, dir, { recursive: true });
    const file = join(dir, "ghsa", "GHSA-2cjh-75gp-34gc.json");
    const record = JSON.parse(readFileSync(file, "utf8"));
    record.aliases.push("CVE-2099-0001");
    record.modified = "2025-03-04T05:06:07Z";
    writeFileSync(file, JSON.stringify(record, null, 2));

    const run = await importInto(org, dir);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(importCounts(run), { created: 0, updated: 1, unchanged: 11, skipped: 0 });
    const now = await listed(org);
    const uid = expectedUid(org, "GHSA-2cjh-75gp-34gc", "Packagist", "livewire/livewire");
    const before = first.find((a) => a.uid === uid);
    const changed = now.find((a) => a.uid === uid);
    assert.deepEqual(changed.aliases, ["CVE-2024-22859", "CVE-2099-0001"]);
    assert.equal(changed.createTime, before.createTime);
    assert.equal(changed.updateTime, "2025-03-04T05:06:07.000Z");
    assert.deepEqual(changed.events.at(-1).fixed.fixedVersion, "3.0.4");
    assert.deepEqual(
      now.filter((a) => a.uid !== uid),
      first.filter((a) => a.uid !== uid),
      "every other advisory is as it was",
    );
    first = now;
  });

  test("a withdrawn record sets the delete time of its advisories, which stay listed", async () => {
    const dir = tempDir();
    const record = JSON.parse(readFileSync(`${DATA}/go/GO-2023-1737.json`, "utf8"));
    record.withdrawn = "2025-06-07T08:09:10Z";
    writeFileSync(join(dir, "GO-2023-1737.json"), JSON.stringify(record));
    const run = await importInto(org, dir);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(importCounts(run), { created: 0, updated: 1, unchanged: 0, skipped: 0 });
    const uid = expectedUid(org, "GO-2023-1737", "Go", "github.com/gin-gonic/gin");
    const got = await ok(rest(srv.url, "GET", `/vulnerabilities/v2beta1/advisories/${uid}`));
    assert.equal(got.deleteTime, "2025-06-07T08:09:10.000Z");
    assert.equal((await listed(org)).length, 12);
    assert.equal(first.find((a) => a.uid === uid).deleteTime, undefined, "it had no delete time before");
  });

  test("malformed records are reported by file and id, skipped, and do not stop the rest", async () => {
    const group = (await createGroup(srv.url, org, "malformed input")).uid;
    const dir = tempDir();
    const good = JSON.parse(readFileSync(`${DATA}/go/GO-2021-0113.json`, "utf8"));
    const write = (name: string, content: unknown) =>
      writeFileSync(join(dir, name), typeof content === "string" ? content : JSON.stringify(content));
    write("bad-json.json", '{"id": "GO-BROKEN", "affected": [');
    write("missing-id.json", { ...good, id: undefined });
    write("no-affected.json", { ...good, id: "TEST-NO-AFFECTED", affected: [] });
    write("wrong-types.json", {
      ...good,
      id: "TEST-WRONG-TYPES",
      aliases: "CVE-2021-38561",
      affected: [{ package: { ecosystem: "Go", name: 42 } }],
    });
    write("numeric-id.json", { ...good, id: 42 });
    write("not-an-object.json", "[1, 2, 3]");
    write("notes.txt", "not a record");
    mkdirSync(join(dir, "nested", "deeper"), { recursive: true });
    writeFileSync(join(dir, "nested", "deeper", "good.json"), JSON.stringify({ ...good, id: "TEST-GOOD-0001" }));

    const run = await importInto(group, dir);
    assert.equal(run.code, 0, `skipped records do not fail the import: ${run.stderr}`);
    assert.deepEqual(importCounts(run), { created: 1, updated: 0, unchanged: 0, skipped: 6 });
    const lines = run.stderr.trim().split("\n");
    const expected: RegExp[] = [
      new RegExp(`^${dir}/bad-json\\.json: \\?: invalid JSON: `),
      new RegExp(`^${dir}/missing-id\\.json: \\?: missing id$`),
      new RegExp(`^${dir}/no-affected\\.json: TEST-NO-AFFECTED: no affected packages$`),
      new RegExp(`^${dir}/not-an-object\\.json: \\?: not an OSV record: expected a JSON object$`),
      new RegExp(`^${dir}/numeric-id\\.json: \\?: id must be a non-empty string$`),
      new RegExp(`^${dir}/wrong-types\\.json: TEST-WRONG-TYPES: aliases must be an array of strings$`),
      new RegExp(
        `^${dir}/wrong-types\\.json: TEST-WRONG-TYPES: affected\\[0\\]\\.package must be an object with a non-empty string ecosystem and name$`,
      ),
    ];
    assert.equal(lines.length, expected.length, run.stderr);
    for (const [i, pattern] of expected.entries()) assert.match(lines[i]!, pattern);

    const advisories = await listed(group);
    assert.deepEqual(
      advisories.map((a) => [a.uid, a.advisoryId]),
      [[expectedUid(group, "TEST-GOOD-0001", "Go", "golang.org/x/text"), "TEST-GOOD-0001"]],
    );
  });

  test("an unknown group exits 1 and writes nothing", async () => {
    const missing = "f".repeat(40);
    const run = await importInto(missing, DATA);
    assert.equal(run.code, 1);
    assert.match(run.stderr, new RegExp(`group ${missing} does not exist`));
    assert.equal(run.stdout, "");
    const all = await ok(rest(srv.url, "GET", `/vulnerabilities/v2beta1/advisories?uidp.descendants_of=${missing}`));
    assert.equal(all.totalCount, "0");
  });

  test("usage errors exit 2; --help explains the command", async () => {
    const cases: [string[], RegExp][] = [
      [["import-advisories", DATA], /--group <uid> is required/],
      [["import-advisories", "--group", org], /at least one OSV file or directory/],
      [["import-advisories", "--group", "not-a-uid", DATA], /not a group uid/],
      [["import-advisories", "--group", org, "--force", DATA], /unknown option --force/],
      [["import-advisories", "--group", org, join(DATA, "no-such-dir")], /no-such-dir: no such file or directory/],
    ];
    for (const [args, message] of cases) {
      const run = await platformCli(srv, args);
      assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
      assert.match(run.stderr, message);
    }
    const help = await platformCli(srv, ["import-advisories", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /usage: platform-api import-advisories --group <uid> <file-or-dir>\.\.\./);
    assert.match((await platformCli(srv, ["--help"])).stdout, /import-advisories +import OSV vulnerability records/);
    assert.equal((await listed(org)).length, 12);
  });
});

describe("OSV conversion (pure)", () => {
  const G = "c".repeat(40);
  const parsed = (doc: unknown): OsvRecord => {
    const r = parseOsv(doc);
    assert.ok(!isInvalid(r), JSON.stringify(r));
    return r;
  };

  test("times: published creates, modified updates, the zero time counts as unknown", () => {
    const [crypto] = advisoriesFromOsv(parsed(RECORDS.get(`${DATA}/ghsa/GHSA-3ww4-gg4f-jr7f.json`)), G, 5);
    assert.equal(crypto!.createTime, Date.parse("2024-02-05T21:30:31Z"));
    assert.equal(crypto!.updateTime, Date.parse("2024-07-29T14:44:04Z"));
    assert.deepEqual(
      crypto!.events.map((e) => [e.type, e.createTime]),
      [
        ["detection", crypto!.createTime],
        ["fixed", crypto!.updateTime],
      ],
    );
    const [gin] = advisoriesFromOsv(parsed(RECORDS.get(`${DATA}/go/GO-2023-1737.json`)), G, 5);
    assert.equal(gin!.createTime, 5, "no known time: the import time");
    assert.equal(gin!.updateTime, 5);
    const [text] = advisoriesFromOsv(parsed(RECORDS.get(`${DATA}/go/GO-2021-0113.json`)), G, 5);
    assert.equal(text!.createTime, Date.parse("2021-10-06T17:51:21Z"), "published known, modified the zero time");
    assert.equal(text!.updateTime, text!.createTime);
  });

  test("one advisory per package: repeated entries merge, fix versions in order without repeats", () => {
    const doc = {
      id: "TEST-MERGE",
      modified: "2024-01-01T00:00:00Z",
      severity: [
        { type: "CVSS_V2", score: "AV:N/AC:L/Au:N/C:P/I:N/A:N" },
        { type: "Ubuntu", score: "high" },
      ],
      affected: [
        {
          package: { ecosystem: "Go", name: "example.com/m" },
          ranges: [{ type: "SEMVER", events: [{ introduced: "0" }, { fixed: "1.2.0" }] }],
        },
        { package: { ecosystem: "PyPI", name: "example.com/m" } },
        {
          package: { ecosystem: "Go", name: "example.com/m" },
          ranges: [{ type: "SEMVER", events: [{ introduced: "1.3.0" }, { fixed: "1.3.1" }, { fixed: "1.2.0" }] }],
        },
      ],
    };
    const out = advisoriesFromOsv(parsed(doc), G, 5);
    assert.deepEqual(
      out.map((a) => [a.componentType, a.artifactName]),
      [
        ["go", "example.com/m"],
        ["pypi", "example.com/m"],
      ],
    );
    assert.notEqual(out[0]!.uid, out[1]!.uid, "the ecosystem is part of the uid");
    assert.deepEqual(
      out[0]!.events.map((e) => (e.type === "fixed" ? e.data.fixedVersion : e.type)),
      ["detection", "1.2.0", "1.3.1"],
    );
    assert.deepEqual(
      out[1]!.events.map((e) => e.type),
      ["detection"],
    );
    assert.deepEqual(
      out[0]!.severities,
      [{ type: 1, score: "AV:N/AC:L/Au:N/C:P/I:N/A:N" }],
      "CVSS only; other severity types are left out",
    );
    assert.equal(new Set(out.flatMap((a) => a.events.map((e) => e.uid))).size, 4, "event uids are distinct");
    assert.deepEqual(
      advisoriesFromOsv(parsed(doc), G, 99).map((a) => a.events.map((e) => e.uid)),
      out.map((a) => a.events.map((e) => e.uid)),
      "and stable",
    );
  });

  test("malformed times, severities and ranges are problems", () => {
    const r = parseOsv({
      id: "TEST-BAD",
      published: "yesterday",
      severity: [{ type: "CVSS_V3" }],
      affected: [{ package: { ecosystem: "Go", name: "m" }, ranges: [{ events: [{ fixed: 3 }] }, { events: "x" }] }],
    });
    assert.ok(isInvalid(r));
    assert.deepEqual(r, {
      id: "TEST-BAD",
      problems: [
        "published must be an RFC 3339 time",
        "severity must be an array of objects with a string type and score",
        "affected[0].ranges[0].events[0].fixed must be a non-empty string",
        "affected[0].ranges[1].events must be an array of objects",
      ],
    });
  });
});
