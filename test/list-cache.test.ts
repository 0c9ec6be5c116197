/**
 * The SQLite read caches: a page or a record asked again is served without a
 * query until its table is written (here, or by another connection to the same
 * file), and what is cached is frozen and bounded.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import Database from "better-sqlite3";
import { ListRunner, type ListableTable } from "../src/store/sqlite/list.js";
import { QueryCache } from "../src/store/query-cache.js";
import type { ListQuery } from "../src/store/store.js";

const dir = mkdtempSync(join(tmpdir(), "platform-list-cache-"));
after(() => rmSync(dir, { recursive: true, force: true }));

type Order = "uid";
const TABLE: ListableTable<Order> = { table: "things", select: "uid, parent_uid, label", orderColumns: { uid: "uid" } };
const query = (limit: number): ListQuery<unknown, Order> => ({
  hierarchy: {},
  filter: {},
  order: { field: "uid", desc: false },
  after: null,
  offset: 0,
  limit,
  visibleWithin: null,
});
const toRecord = (row: { uid: string; label: string }) => ({ uid: row.uid, label: row.label });

test("a page is queried once until its table is written; results are frozen", async () => {
  const db = new Database(join(dir, "runner.db"));
  db.exec("CREATE TABLE things (uid TEXT PRIMARY KEY, parent_uid TEXT, label TEXT NOT NULL)");
  const insert = db.prepare("INSERT INTO things VALUES (?, NULL, ?)");
  for (const uid of ["a", "b", "c"]) insert.run(uid, `thing ${uid}`);
  const lists = new ListRunner(db);

  const first = lists.records(TABLE, query(2), [], toRecord);
  assert.deepEqual(first.items, [{ uid: "a", label: "thing a" }, { uid: "b", label: "thing b" }]);
  assert.equal(first.totalCount, 3);
  assert.equal(first.hasMore, true);
  const again = lists.records(TABLE, query(2), [], toRecord);
  assert.equal(again, first, "the same page object, from the cache");
  assert.equal(lists.pages.hits, 1);
  assert.ok(Object.isFrozen(again.items) && Object.isFrozen(again.items[0]));
  assert.throws(() => (again.items[0] as { label: string }).label = "changed", TypeError);

  insert.run("0", "thing 0");
  assert.equal(lists.records(TABLE, query(2), [], toRecord), first, "a write not announced is not seen: every store write calls touched()");
  lists.touched("things");
  const after = lists.records(TABLE, query(2), [], toRecord);
  assert.deepEqual(after.items.map((t) => t.uid), ["0", "a"]);
  assert.equal(after.totalCount, 4);

  db.transaction(() => {
    lists.records(TABLE, query(3), [], toRecord);
    lists.records(TABLE, query(3), [], toRecord);
  })();
  assert.equal(lists.pages.hits, 2, "nothing read inside a transaction is cached");
  db.close();
});

test("a commit by another connection to the file is seen by the next list of a table written elsewhere", async () => {
  const file = join(dir, "shared.db");
  const db = new Database(file);
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE things (uid TEXT PRIMARY KEY, parent_uid TEXT, label TEXT NOT NULL)");
  db.prepare("INSERT INTO things VALUES ('a', NULL, 'thing a')").run();
  const lists = new ListRunner(db);
  const shared = { ...TABLE, writtenElsewhere: true };
  assert.equal(lists.records(shared, query(10), [], toRecord).totalCount, 1);
  assert.equal(lists.records(shared, query(10), [], toRecord).totalCount, 1);

  const other = new Database(file);
  other.prepare("INSERT INTO things VALUES ('b', NULL, 'thing b')").run();
  other.close();
  const seen = lists.records(shared, query(10), [], toRecord);
  assert.equal(seen.totalCount, 2);
  assert.deepEqual(seen.items.map((t) => t.uid), ["a", "b"]);
  db.close();
});

test("a record by uid is read once until its table is written, and frozen; misses are remembered too", async () => {
  const db = new Database(join(dir, "one.db"));
  db.exec("CREATE TABLE things (uid TEXT PRIMARY KEY, parent_uid TEXT, label TEXT NOT NULL)");
  db.prepare("INSERT INTO things VALUES ('a', NULL, 'thing a')").run();
  const lists = new ListRunner(db);
  const byUid = db.prepare("SELECT uid, parent_uid, label FROM things WHERE uid = ?");
  const first = lists.one(TABLE, byUid, "a", toRecord);
  assert.deepEqual(first, { uid: "a", label: "thing a" });
  assert.equal(lists.one(TABLE, byUid, "a", toRecord), first);
  assert.ok(Object.isFrozen(first));
  assert.equal(lists.one(TABLE, byUid, "b", toRecord), null);
  db.prepare("INSERT INTO things VALUES ('b', NULL, 'thing b')").run();
  lists.touched("things");
  assert.deepEqual(lists.one(TABLE, byUid, "b", toRecord), { uid: "b", label: "thing b" });
  db.prepare("UPDATE things SET label = 'renamed' WHERE uid = 'a'").run();
  lists.touched("things");
  assert.equal(lists.one(TABLE, byUid, "a", toRecord)?.label, "renamed");
  assert.equal(lists.byUid.hits, 1);
  db.close();
});

test("the cache keeps within its budget, dropping the least recently used", async () => {
  const cache = new QueryCache<string>(10);
  cache.set("a", "A", 4);
  cache.set("b", "B", 4);
  assert.equal(cache.get("a"), "A"); // a is now the most recent
  cache.set("c", "C", 4); // over budget: b goes
  assert.equal(cache.get("b"), undefined);
  assert.equal(cache.get("a"), "A");
  assert.equal(cache.get("c"), "C");
  assert.deepEqual(cache.size, { entries: 2, weight: 8 });
  cache.set("huge", "H", 11);
  assert.equal(cache.get("huge"), undefined, "an entry over the whole budget is not kept");
  cache.set("a", "A2", 2);
  assert.deepEqual(cache.size, { entries: 2, weight: 6 });
  assert.equal(cache.get("a"), "A2");
});
