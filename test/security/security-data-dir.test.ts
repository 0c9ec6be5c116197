import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { DataDirPermissionError } from "../../src/store/sqlite/data-dir.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";
import { platformCli } from "../support/platform-cli.js";
import { seedDataDir } from "../support/seed-data-dir.js";
import { createGroup, startTestServer } from "../support/server.js";

// The data directory holds the private signing key and the administrator
// subject: any local account that can read it can mint an administrator token.

const modeOf = (path: string) => statSync(path).mode & 0o777;
let root: string;

before(() => {
  root = mkdtempSync(join(tmpdir(), "platform-perms-"));
  // The directory holding the test directories is the test's, not the server's.
  chmodSync(root, 0o755);
});
after(() => rmSync(root, { recursive: true, force: true }));

test("a fresh data directory is created 0700 and every database file 0600, WAL and SHM included", async () => {
  const dir = join(root, "fresh", "data");
  await seedDataDir(dir);
  const minted = await platformCli(dir, ["admin-token"]);
  assert.equal(minted.code, 0, minted.stderr);
  assert.equal(modeOf(dir), 0o700);
  assert.equal(modeOf(join(dir, "platform.db")), 0o600);

  const srv = await startTestServer({ dataDir: dir, backend: "sqlite" });
  try {
    await createGroup(srv.url, null, "perm-check");
    for (const suffix of ["", "-wal", "-shm"]) {
      const file = join(dir, `platform.db${suffix}`);
      assert.ok(existsSync(file), `${file} exists while the server runs`);
      assert.equal(modeOf(file), 0o600, `platform.db${suffix} is owner-only`);
    }
  } finally {
    await srv.close();
  }
});

test("a group- or world-accessible directory or database is refused with one line, exit 2, nothing changed", async (t) => {
  const dir = join(root, "loosened");
  await seedDataDir(dir);
  const first = await platformCli(dir, ["admin-token"]);
  assert.equal(first.code, 0, first.stderr);
  const db = join(dir, "platform.db");

  for (const [path, mode] of [
    [dir, 0o755],
    [dir, 0o710],
    [db, 0o644],
    [db, 0o660],
  ] as const) {
    await t.test(`${path === dir ? "directory" : "database"} ${mode.toString(8)}`, async () => {
      chmodSync(dir, 0o700);
      chmodSync(db, 0o600);
      chmodSync(path, mode);
      const before = readFileSync(db);
      for (const command of ["serve", "admin-token", "rotate-key"]) {
        const run = await platformCli(dir, [command], { PORT: "0", HOST: "127.0.0.1" });
        assert.equal(run.code, 2, `${command}: ${run.stdout}${run.stderr}`);
        assert.equal(run.stdout, "", `${command} printed no token`);
        const lines = run.stderr.trimEnd().split("\n");
        assert.equal(lines.length, 1, `one line, no stack trace: ${run.stderr}`);
        assert.match(
          lines[0]!,
          new RegExp(`${path.replace(/[/.]/g, "\\$&")} is accessible by other users \\(mode 0${mode.toString(8)}\\)`),
        );
        assert.match(lines[0]!, /chmod/);
        assert.match(lines[0]!, /PLATFORM_SKIP_PERMISSION_CHECK=true/);
      }
      assert.deepEqual(readFileSync(db), before, "the database is untouched");
      assert.equal(modeOf(path), mode, "the refusal does not fix permissions behind the operator's back");
    });
  }
});

test("PLATFORM_SKIP_PERMISSION_CHECK=true lets operators who manage permissions themselves start", async () => {
  const dir = join(root, "managed");
  await seedDataDir(dir);
  assert.equal((await platformCli(dir, ["admin-token"])).code, 0);
  chmodSync(dir, 0o750);
  chmodSync(join(dir, "platform.db"), 0o640);
  const refused = await platformCli(dir, ["admin-token"]);
  assert.equal(refused.code, 2);
  const allowed = await platformCli(dir, ["admin-token"], { PLATFORM_SKIP_PERMISSION_CHECK: "true" });
  assert.equal(allowed.code, 0, allowed.stderr);
  assert.match(allowed.stdout, /^ey[\w-]+\.[\w-]+\.[\w-]+\n$/);
});

test("the store refuses a shared directory before opening the database", async () => {
  const dir = join(root, "library");
  await openSqliteStore({ dataDir: dir }).close();
  chmodSync(dir, 0o777);
  assert.throws(() => openSqliteStore({ dataDir: dir }), DataDirPermissionError);
  await openSqliteStore({ dataDir: dir, checkPermissions: false }).close();
  assert.equal(modeOf(dir), 0o777);
});

test("a data directory that is a file is refused with one line", async () => {
  const file = join(root, "a-file");
  writeFileSync(file, "not a directory\n");
  const run = await platformCli(file, ["admin-token"]);
  assert.equal(run.code, 2, run.stderr);
  assert.equal(run.stderr.trimEnd().split("\n").length, 1, run.stderr);
  assert.match(run.stderr, /is not a directory/);
});
