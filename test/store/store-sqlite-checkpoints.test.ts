/**
 * SQLite's WAL checkpointed off the event loop (src/store/sqlite/checkpointer.ts):
 * with backgroundCheckpoints, a thread of the store's own copies committed
 * pages into the database file while the connection that commits leaves
 * them (its own checkpoints start only past a WAL of 16,000 pages); close
 * stops the thread first. A thread that cannot start is reported and the
 * store goes on, checkpointing itself.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { BackgroundCheckpointer } from "../../src/store/sqlite/checkpointer.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";
import { until, within } from "../support/assertions.js";

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), "platform-checkpoints-"));
  dirs.push(d);
  return d;
}

const ROOT = "a".repeat(40);
function group(i: number) {
  const uid = i === 0 ? ROOT : `${ROOT}/${i.toString(16).padStart(16, "0")}`;
  return {
    uid,
    parentUid: i === 0 ? null : ROOT,
    name: `g${i}`,
    description: "x".repeat(500),
    verified: false,
    resourceLimits: {},
    createTime: i,
    updateTime: i,
  };
}

test("the thread copies committed pages into the database file; the committing connection does not", async () => {
  const dir = freshDir();
  const errors: Error[] = [];
  const store = openSqliteStore({ dataDir: dir, backgroundCheckpoints: { onError: (err) => errors.push(err) } });
  const file = join(dir, "platform.db");
  try {
    // Whatever the migrations left in the WAL is copied first; then the file's size is the baseline.
    const settle = async () => {
      for (let size = -1; size !== statSync(file).size; ) {
        size = statSync(file).size;
        await new Promise((r) => setTimeout(r, 600));
      }
    };
    await store.groups.create(group(0));
    await within(30_000, settle(), "the migrations' pages checkpointed");
    const before = statSync(file).size;
    await Promise.all(Array.from({ length: 300 }, (_, i) => store.groups.create(group(i + 1))));
    // ~300 rows of 500 bytes: far below the committing connection's own threshold, so only the thread copies them.
    await until(30_000, () => statSync(file).size > before, "the database file grew: the thread checkpointed the new rows", 50);
    assert.deepEqual(errors, []);
    assert.equal((await store.groups.get(group(300).uid))?.name, "g300");
  } finally {
    await store.close();
  }
  // Closed: the WAL was checkpointed and truncated, and a new store reads everything from the file.
  assert.equal(statSync(`${file}-wal`, { throwIfNoEntry: false })?.size ?? 0, 0);
  const again = openSqliteStore({ dataDir: dir });
  try {
    assert.equal((await again.groups.get(group(300).uid))?.name, "g300");
  } finally {
    await again.close();
  }
});

test("a thread that cannot start is reported, and stopping it still returns", async () => {
  const dir = freshDir();
  const bogus = join(dir, "not-a-driver.cjs");
  writeFileSync(bogus, "throw new Error('no driver here');\n");
  let failed!: (err: Error) => void;
  const reported = new Promise<Error>((resolve) => (failed = resolve));
  const checkpointer = new BackgroundCheckpointer(join(dir, "platform.db"), (err) => failed(err), bogus);
  checkpointer.committed();
  const err = await within(30_000, reported, "the failure reported");
  await within(30_000, checkpointer.stop(), "stop returns");
  assert.match(err.message, /no driver here/);
});
