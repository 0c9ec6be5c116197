import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import Database from "better-sqlite3";
import { openSqliteStore } from "../src/store/sqlite/index.js";
import type { GroupRecord, IdentityRecord, RoleBindingRecord, RoleRecord, SigningKeyRecord } from "../src/store/store.js";
import { runStoreConformance } from "./support/store-conformance.js";

const tempDirs: string[] = [];
function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "platform-store-"));
  tempDirs.push(dir);
  return dir;
}
after(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

runStoreConformance("sqlite in memory", () => openSqliteStore({ dataDir: ":memory:" }));
runStoreConformance("sqlite file", () => openSqliteStore({ dataDir: freshDir() }));

const ROOT = "d".repeat(40);
const CHILD = `${ROOT}/${"e".repeat(16)}`;

const PERSON: IdentityRecord = {
  uid: "9".repeat(40),
  parentUid: null,
  name: "Ada",
  description: "",
  email: "ada@example.com",
  emailUnverified: "",
  company: "",
  relationship: {
    kind: "staticKeys",
    staticKeys: { issuer: "https://ci.example", subject: "ada", issuerKeys: '{"keys":[]}', expirationTime: 5, audiences: ["x"] },
  },
  lastSeenTime: 3,
  createTime: 1,
  updateTime: 2,
};
const ROLE: RoleRecord = { uid: `${CHILD}/${"d".repeat(16)}`, parentUid: CHILD, name: "ops", description: "", capabilities: [4, 8], createTime: 1, updateTime: 1 };
const BINDING: RoleBindingRecord = { uid: `${ROOT}/${"1".repeat(16)}`, groupUid: ROOT, identityUid: PERSON.uid, roleUid: ROLE.uid, createTime: 7 };
const SIGNING_KEY: SigningKeyRecord = { kid: "k1", privateJwk: '{"d":"x"}', publicJwk: '{"x":"y"}', createTime: 9 };

function record(uid: string, parentUid: string | null, name: string): GroupRecord {
  return {
    uid,
    parentUid,
    name,
    description: `about ${name}`,
    verified: false,
    resourceLimits: { clusters: 1 },
    createTime: 1_700_000_000_123,
    updateTime: 1_700_000_000_456,
  };
}

describe("sqlite store on disk", () => {
  test("the database file is in WAL mode", () => {
    const dir = freshDir();
    const store = openSqliteStore({ dataDir: dir });
    try {
      const other = new Database(join(dir, "platform.db"), { readonly: true });
      try {
        assert.equal(other.pragma("journal_mode", { simple: true }), "wal");
      } finally {
        other.close();
      }
    } finally {
      store.close();
    }
  });

  test("data written, closed and reopened is still there; reopening migrates idempotently", () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    first.groups.create(record(ROOT, null, "durable org"));
    first.groups.create(record(CHILD, ROOT, "durable team"));
    const key = first.keys.secret("page-token-key", () => Buffer.alloc(32, 7));
    first.identities.create(PERSON);
    first.roles.create(ROLE);
    first.roleBindings.create([BINDING]);
    first.keys.addSigningKey(SIGNING_KEY);
    first.close();

    const versionAfterFirst = userVersion(dir);
    assert.ok(versionAfterFirst >= 1);

    for (let reopen = 0; reopen < 2; reopen++) {
      const again = openSqliteStore({ dataDir: dir });
      try {
        assert.equal(again.ready(), true);
        assert.deepEqual(again.groups.get(ROOT), record(ROOT, null, "durable org"));
        assert.deepEqual(again.groups.get(CHILD), record(CHILD, ROOT, "durable team"));
        const listed = again.groups.list({
          hierarchy: { descendantsOf: ROOT },
          filter: {},
          order: { field: "uid", desc: false },
          after: null,
          offset: 0,
          limit: 10,
          visibleWithin: null,
        });
        assert.deepEqual(listed.items.map((g) => g.uid), [CHILD]);
        assert.equal(listed.totalCount, 1);
        // Secrets survive restarts, so page tokens issued before a restart still open.
        assert.deepEqual(
          again.keys.secret("page-token-key", () => Buffer.alloc(32, 9)),
          key,
        );
        assert.deepEqual(again.identities.get(PERSON.uid), PERSON);
        assert.deepEqual(again.roles.get(ROLE.uid), ROLE);
        assert.deepEqual(again.roleBindings.forIdentity(PERSON.uid), [BINDING]);
        assert.deepEqual(again.keys.signingKeys(), [SIGNING_KEY]);
      } finally {
        again.close();
      }
      assert.equal(userVersion(dir), versionAfterFirst);
    }
  });

  test("a database at schema version 1 is migrated in place, keeping its groups", () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    first.groups.create(record(ROOT, null, "old org"));
    first.close();
    // Turn the file back into what a version-1 server left: no IAM tables.
    const db = new Database(join(dir, "platform.db"));
    db.exec("DROP TABLE role_bindings; DROP TABLE roles; DROP TABLE identities; DROP TABLE signing_keys;");
    db.pragma("user_version = 1");
    db.close();

    const again = openSqliteStore({ dataDir: dir });
    try {
      assert.deepEqual(again.groups.get(ROOT), record(ROOT, null, "old org"));
      again.identities.create(PERSON);
      assert.deepEqual(again.identities.get(PERSON.uid), PERSON);
      assert.deepEqual(again.keys.signingKeys(), []);
    } finally {
      again.close();
    }
    assert.ok(userVersion(dir) >= 2);
  });

  test("a database from a newer server version is refused", () => {
    const dir = freshDir();
    openSqliteStore({ dataDir: dir }).close();
    const db = new Database(join(dir, "platform.db"));
    db.pragma("user_version = 999");
    db.close();
    assert.throws(() => openSqliteStore({ dataDir: dir }), /newer than this server/);
  });
});

function userVersion(dir: string): number {
  const db = new Database(join(dir, "platform.db"), { readonly: true });
  try {
    return db.pragma("user_version", { simple: true }) as number;
  } finally {
    db.close();
  }
}
