/**
 * SQLite's table versions and group commit, from inside the engine.
 *
 * Versions are moved by the store (sqlite/table-versions.ts), not by
 * triggers, so what each part's writes may change must be declared in
 * STORE_PARTS: these tests read the engine's SQL and the schema's cascades
 * and fail on any versioned table a part writes without declaring it.
 *
 * The group commit runs its writes bare, without a savepoint each: a write
 * that fails having changed nothing is rejected alone; one that changed rows
 * before failing has the group rolled back and run again, a savepoint per
 * write; one after which SQLite ended the transaction fails the group.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import Database from "better-sqlite3";
import { PART_NAMES, type PartName } from "../../src/store/parts.js";
import { ConnectionGate } from "../../src/store/sqlite/async.js";
import { GroupCommitter } from "../../src/store/sqlite/group-commit.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";
import { tablesChangedBy } from "../../src/store/sqlite/table-versions.js";
import { VERSIONED_TABLES, type VersionedTable } from "../../src/store/versions.js";

/** The class implementing each part on SQLite, and its file: every part, or the compiler says which is missing. */
const IMPLEMENTED_BY: Record<PartName, [file: string, className: string]> = {
  groups: ["groups.ts", "SqliteGroupStore"],
  identities: ["identities.ts", "SqliteIdentityStore"],
  roles: ["roles.ts", "SqliteRoleStore"],
  roleBindings: ["role-bindings.ts", "SqliteRoleBindingStore"],
  identityProviders: ["identity-providers.ts", "SqliteIdentityProviderStore"],
  accountAssociations: ["account-associations.ts", "SqliteAccountAssociationStore"],
  groupInvites: ["group-invites.ts", "SqliteGroupInviteStore"],
  repos: ["repos.ts", "SqliteRepoStore"],
  tags: ["tags.ts", "SqliteTagStore"],
  advisories: ["advisories.ts", "SqliteAdvisoryStore"],
  keys: ["keys.ts", "SqliteKeyStore"],
  events: ["events.ts", "SqliteEventStore"],
  subscriptions: ["subscriptions.ts", "SqliteSubscriptionStore"],
  deliveries: ["subscriptions.ts", "SqliteDeliveryStore"],
  signInFlows: ["sign-in.ts", "SqliteSignInFlowStore"],
  refreshTokens: ["sign-in.ts", "SqliteRefreshTokenStore"],
};

const VERSIONED = new Set<string>(VERSIONED_TABLES);

/** The text of one class of a file of src/store/sqlite (with the module text before the file's first class). */
function classText(file: string, className: string): string {
  const text = readFileSync(join(import.meta.dirname, "..", "..", "src", "store", "sqlite", file), "utf8");
  const classes = [...text.matchAll(/^export class (\w+)/gm)];
  const at = classes.findIndex((m) => m[1] === className);
  assert.ok(at >= 0, `${file} defines ${className}`);
  const preamble = text.slice(0, classes[0]!.index);
  return preamble + text.slice(classes[at]!.index, classes[at + 1]?.index ?? text.length);
}

/** The tables the SQL in some text writes. */
function tablesWritten(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/\b(?:INSERT(?:\s+OR\s+[A-Z]+)?\s+INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM)\s+([a-z_]+)/g)) out.add(m[1]!);
  return out;
}

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("table versions: what each part's writes may change is declared", () => {
  test("every versioned table a part's SQL writes is among the tables its writes move", () => {
    const undeclared: string[] = [];
    for (const name of PART_NAMES) {
      const [file, className] = IMPLEMENTED_BY[name];
      const declared = new Set<string>(tablesChangedBy(name));
      for (const table of tablesWritten(classText(file, className)))
        if (VERSIONED.has(table) && !declared.has(table)) undeclared.push(`${name} writes ${table}`);
    }
    assert.deepEqual(undeclared, []);
  });

  test("every versioned table a cascade of the schema changes is moved with the table whose delete cascades", async () => {
    const dir = mkdtempSync(join(tmpdir(), "platform-versions-"));
    dirs.push(dir);
    await openSqliteStore({ dataDir: dir }).close();
    const db = new Database(join(dir, "platform.db"), { readonly: true });
    try {
      const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[];
      // parent -> children its deletes and updates change (ON DELETE/UPDATE CASCADE, SET NULL, SET DEFAULT).
      const cascades = new Map<string, Set<string>>();
      for (const child of tables) {
        const keys = db.pragma(`foreign_key_list(${child})`) as { table: string; on_delete: string; on_update: string }[];
        for (const k of keys)
          if (k.on_delete !== "RESTRICT" && k.on_delete !== "NO ACTION")
            cascades.set(k.table, (cascades.get(k.table) ?? new Set()).add(child));
      }
      const reach = (table: string, seen = new Set<string>()): Set<string> => {
        for (const child of cascades.get(table) ?? []) if (!seen.has(child)) reach(child, seen.add(child));
        return seen;
      };
      const undeclared: string[] = [];
      for (const name of PART_NAMES) {
        const declared = new Set<string>(tablesChangedBy(name));
        for (const table of declared)
          for (const child of reach(table))
            if (VERSIONED.has(child) && !declared.has(child)) undeclared.push(`${name}: ${table} cascades to ${child}`);
      }
      assert.deepEqual(undeclared, []);
      assert.ok(cascades.get("roles")?.has("group_invites"), "the check sees the schema's cascades");
    } finally {
      db.close();
    }
  });

  test("a write moves its tables' versions once per group commit, however many rows it wrote", async () => {
    const dir = mkdtempSync(join(tmpdir(), "platform-versions-"));
    dirs.push(dir);
    const store = openSqliteStore({ dataDir: dir });
    try {
      const root = "c".repeat(40);
      const before = await store.readVersions();
      const group = (uid: string, parentUid: string | null) => ({
        uid,
        parentUid,
        name: "g",
        description: "",
        verified: false,
        resourceLimits: {},
        createTime: 1,
        updateTime: 1,
      });
      await store.groups.create(group(root, null));
      const children = Array.from({ length: 20 }, (_, i) =>
        store.groups.create(group(`${root}/${i.toString(16).padStart(16, "0")}`, root)),
      );
      await Promise.all(children);
      const after = await store.readVersions();
      assert.ok(
        after.groups > before.groups && after.groups <= before.groups + 2,
        `groups moved by one per group commit (${before.groups} -> ${after.groups})`,
      );
      const others = VERSIONED_TABLES.filter((t): t is VersionedTable => t !== "groups" && after[t] !== before[t]);
      assert.deepEqual(others, [], "no other table moved");
    } finally {
      await store.close();
    }
  });
});

/** A committer over a fresh in-memory table t(x) with a UNIQUE x, and what its hooks saw. */
function committer() {
  const db = new Database(":memory:");
  db.exec("CREATE TABLE t (x INTEGER NOT NULL UNIQUE)");
  const seen = { beforeCommit: 0, settled: 0 };
  const c = new GroupCommitter(db, new ConnectionGate(), {
    save: () => 0,
    restore: () => {},
    beforeCommit: () => seen.beforeCommit++,
    settled: () => seen.settled++,
  });
  const insert = db.prepare("INSERT INTO t (x) VALUES (?)");
  const rows = () => db.prepare("SELECT x FROM t ORDER BY x").pluck().all() as number[];
  return { db, c, seen, insert, rows };
}

describe("group commit: writes run bare, a failure is isolated", () => {
  test("a write refused before it changed anything is rejected alone: the others commit, nothing runs twice", async () => {
    const { c, seen, insert, rows } = committer();
    let runs = 0;
    const results = await Promise.allSettled([
      c.write(() => (runs++, insert.run(1))),
      c.write(() => insert.run(1)), // the UNIQUE constraint refuses its one statement: nothing changed
      c.write(() => {
        throw new Error("refused by a check");
      }),
      c.write(() => (runs++, insert.run(2))),
    ]);
    assert.deepEqual(
      results.map((r) => r.status),
      ["fulfilled", "rejected", "rejected", "fulfilled"],
    );
    assert.match(String((results[1] as PromiseRejectedResult).reason), /UNIQUE/);
    assert.deepEqual(rows(), [1, 2]);
    assert.equal(runs, 2, "no write ran twice");
    assert.equal(c.reruns, 0);
    assert.deepEqual(seen, { beforeCommit: 1, settled: 1 });
  });

  test("a write that changed rows and then failed is undone alone: the group runs again with a savepoint per write", async () => {
    const { c, seen, insert, rows } = committer();
    let firstRuns = 0;
    const results = await Promise.allSettled([
      c.write(() => (firstRuns++, insert.run(1))),
      c.write(async () => {
        insert.run(2);
        await Promise.resolve();
        insert.run(3);
        throw new Error("refused after writing");
      }),
      c.write(() => insert.run(4)),
    ]);
    assert.deepEqual(
      results.map((r) => r.status),
      ["fulfilled", "rejected", "fulfilled"],
    );
    assert.match(String((results[1] as PromiseRejectedResult).reason), /refused after writing/);
    assert.deepEqual(rows(), [1, 4], "the failed write's rows are gone, the others' kept once");
    assert.equal(firstRuns, 2, "the group ran again (a write may run twice, as on PostgreSQL)");
    assert.equal(c.reruns, 1);
    assert.deepEqual(seen, { beforeCommit: 1, settled: 1 });
    // The next group runs bare again.
    await c.write(() => insert.run(5));
    assert.equal(c.reruns, 1);
    assert.deepEqual(rows(), [1, 4, 5]);
  });

  test("a write after which SQLite ended the transaction fails the whole group: nothing is kept", async () => {
    const { db, c, seen, insert, rows } = committer();
    const results = await Promise.allSettled([
      c.write(() => insert.run(1)),
      c.write(() => {
        db.exec("ROLLBACK"); // what SQLite does itself on some I/O errors
        throw new Error("disk I/O error");
      }),
      c.write(() => insert.run(2)),
    ]);
    assert.deepEqual(
      results.map((r) => r.status),
      ["rejected", "rejected", "rejected"],
    );
    assert.deepEqual(rows(), []);
    assert.deepEqual(seen, { beforeCommit: 0, settled: 1 });
    // The connection is usable again.
    await c.write(() => insert.run(3));
    assert.deepEqual(rows(), [3]);
  });
});
