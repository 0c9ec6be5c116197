import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import Database from "better-sqlite3";
import { createCachingStore } from "../../src/store/decorators/caching.js";
import { PART_NAMES, STORE_PARTS } from "../../src/store/parts.js";
import { openSqliteStore } from "../../src/store/sqlite/index.js";
import type {
  AccountAssociationRecord,
  GroupInviteRecord,
  GroupRecord,
  IdentityProviderRecord,
  IdentityRecord,
  RoleBindingRecord,
  RoleRecord,
  SigningKeyRecord,
} from "../../src/store/store.js";
import { FIRST_VERSIONED_TABLES, VERSIONED_TABLES } from "../../src/store/versions.js";
import { runStoreConformance } from "../support/store-conformance.js";

const tempDirs: string[] = [];
function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "platform-store-"));
  tempDirs.push(dir);
  return dir;
}
after(async () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

runStoreConformance("sqlite in memory", () => openSqliteStore({ dataDir: ":memory:" }));
runStoreConformance("sqlite file behind its caches", () => createCachingStore(openSqliteStore({ dataDir: freshDir() })));

/** Drops the tables of migrations after 3, so a file looks like what an older server left. */
const LATER_THAN_13 = "DROP TABLE refresh_tokens; DROP TABLE sign_in_flows;";
const LATER_THAN_3 =
  `${LATER_THAN_13} ` +
  "DROP TABLE delivery_attempts; DROP TABLE subscription_deliveries; DROP TABLE subscriptions; " +
  FIRST_VERSIONED_TABLES.flatMap((t) => ["insert", "update", "delete"].map((op) => `DROP TRIGGER IF EXISTS ${t}_version_${op};`)).join(
    " ",
  ) +
  " DROP TABLE table_versions; DROP TABLE IF EXISTS advisories; DROP TABLE tags; DROP TABLE repos;" +
  " ALTER TABLE signing_keys DROP COLUMN retire_time;" +
  " DROP INDEX groups_creator; ALTER TABLE groups DROP COLUMN creator_uid;" +
  " DROP TABLE events; DROP TABLE event_feed;";

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
const ROLE: RoleRecord = {
  uid: `${CHILD}/${"d".repeat(16)}`,
  parentUid: CHILD,
  name: "ops",
  description: "",
  capabilities: [4, 8],
  createTime: 1,
  updateTime: 1,
};
const BINDING: RoleBindingRecord = {
  uid: `${ROOT}/${"1".repeat(16)}`,
  groupUid: ROOT,
  identityUid: PERSON.uid,
  roleUid: ROLE.uid,
  createTime: 7,
};
const SIGNING_KEY: SigningKeyRecord = { kid: "k1", privateJwk: '{"d":"x"}', publicJwk: '{"x":"y"}', createTime: 9 };
const PROVIDER: IdentityProviderRecord = {
  uid: `${ROOT}/${"6".repeat(16)}`,
  parentUid: ROOT,
  name: "okta",
  description: "",
  defaultRole: ROLE.uid,
  oidc: {
    issuer: "https://id.example",
    clientId: "c1",
    clientSecret: "kept across restarts",
    additionalScopes: ["email"],
    groupsClaim: "groups",
    correlationRule: 1,
    pkceEnabled: false,
  },
  createTime: 4,
  updateTime: 5,
};
const ASSOCIATION: AccountAssociationRecord = {
  uid: CHILD,
  name: "aws",
  description: "",
  providers: { amazon: { account: "123456789012" } },
  createTime: 6,
  updateTime: 6,
};
const INVITE: GroupInviteRecord = {
  uid: `${CHILD}/${"7".repeat(16)}`,
  groupUid: CHILD,
  roleUid: ROLE.uid,
  email: "",
  expirationTime: 99,
  singleUse: true,
  keyId: "key-1",
  codeHash: "f".repeat(64),
  createTime: 8,
};

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
  test("the database file is in WAL mode", async () => {
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
      await store.close();
    }
  });

  test("data written, closed and reopened is still there; reopening migrates idempotently", async () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    await first.groups.create(record(ROOT, null, "durable org"));
    await first.groups.create(record(CHILD, ROOT, "durable team"));
    const key = await first.keys.secret("page-token-key", () => Buffer.alloc(32, 7));
    await first.identities.create(PERSON);
    await first.roles.create(ROLE);
    await first.roleBindings.create([BINDING]);
    await first.keys.addSigningKey(SIGNING_KEY);
    await first.identityProviders.create(PROVIDER);
    await first.accountAssociations.create(ASSOCIATION);
    await first.groupInvites.create(INVITE);
    await first.close();

    const versionAfterFirst = userVersion(dir);
    assert.ok(versionAfterFirst >= 1);

    for (let reopen = 0; reopen < 2; reopen++) {
      const again = openSqliteStore({ dataDir: dir });
      try {
        assert.equal(again.ready(), true);
        assert.deepEqual(await again.groups.get(ROOT), record(ROOT, null, "durable org"));
        assert.deepEqual(await again.groups.get(CHILD), record(CHILD, ROOT, "durable team"));
        const listed = await again.groups.list({
          hierarchy: { descendantsOf: ROOT },
          filter: {},
          order: { field: "uid", desc: false },
          after: null,
          offset: 0,
          limit: 10,
          visibleWithin: null,
        });
        assert.deepEqual(
          listed.items.map((g) => g.uid),
          [CHILD],
        );
        assert.equal(listed.totalCount, 1);
        // Secrets survive restarts, so page tokens issued before a restart still open.
        assert.deepEqual(await again.keys.secret("page-token-key", () => Buffer.alloc(32, 9)), key);
        assert.deepEqual(await again.identities.get(PERSON.uid), PERSON);
        assert.deepEqual(await again.roles.get(ROLE.uid), ROLE);
        assert.deepEqual(await again.roleBindings.forIdentity(PERSON.uid), [BINDING]);
        assert.deepEqual(await again.keys.signingKeys(), [SIGNING_KEY]);
        assert.deepEqual(await again.identityProviders.get(PROVIDER.uid), PROVIDER);
        assert.deepEqual(await again.accountAssociations.get(CHILD), ASSOCIATION);
        assert.deepEqual(await again.groupInvites.findByKeyId("key-1"), INVITE);
      } finally {
        await again.close();
      }
      assert.equal(userVersion(dir), versionAfterFirst);
    }
  });

  test("a database at schema version 1 is migrated in place, keeping its groups", async () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    await first.groups.create(record(ROOT, null, "old org"));
    await first.close();
    // Turn the file back into what a version-1 server left: no IAM tables.
    const db = new Database(join(dir, "platform.db"));
    db.exec(
      `${LATER_THAN_3} DROP TABLE group_invites; DROP TABLE account_associations; DROP TABLE identity_providers;
       DROP TABLE role_bindings; DROP TABLE roles; DROP TABLE identities; DROP TABLE signing_keys;`,
    );
    db.pragma("user_version = 1");
    db.close();

    const again = openSqliteStore({ dataDir: dir });
    try {
      assert.deepEqual(await again.groups.get(ROOT), record(ROOT, null, "old org"));
      await again.identities.create(PERSON);
      assert.deepEqual(await again.identities.get(PERSON.uid), PERSON);
      assert.deepEqual(await again.keys.signingKeys(), []);
    } finally {
      await again.close();
    }
    assert.ok(userVersion(dir) >= 2);
  });

  test("a database at schema version 2 is migrated in place, keeping its IAM records", async () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    await first.groups.create(record(ROOT, null, "old org"));
    await first.groups.create(record(CHILD, ROOT, "old team"));
    await first.identities.create(PERSON);
    await first.roles.create(ROLE);
    await first.roleBindings.create([BINDING]);
    await first.close();
    // Turn the file back into what a version-2 server left: no providers, associations or invites.
    const db = new Database(join(dir, "platform.db"));
    db.exec(`${LATER_THAN_3} DROP TABLE group_invites; DROP TABLE account_associations; DROP TABLE identity_providers;`);
    db.pragma("user_version = 2");
    db.close();

    const again = openSqliteStore({ dataDir: dir });
    try {
      assert.deepEqual(await again.roleBindings.forIdentity(PERSON.uid), [BINDING]);
      await again.identityProviders.create(PROVIDER);
      await again.accountAssociations.create(ASSOCIATION);
      await again.groupInvites.create(INVITE);
      assert.deepEqual(await again.identityProviders.get(PROVIDER.uid), PROVIDER);
      assert.deepEqual(await again.accountAssociations.get(CHILD), ASSOCIATION);
      assert.deepEqual(await again.groupInvites.get(INVITE.uid), INVITE);
    } finally {
      await again.close();
    }
    assert.ok(userVersion(dir) >= 3);
  });

  test("a database at schema version 3 is migrated in place, gaining repos and tags", async () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    await first.groups.create(record(ROOT, null, "old org"));
    await first.close();
    const db = new Database(join(dir, "platform.db"));
    db.exec(LATER_THAN_3);
    db.pragma("user_version = 3");
    db.close();

    const again = openSqliteStore({ dataDir: dir });
    try {
      const repo = {
        uid: `${ROOT}/${"5".repeat(16)}`,
        parentUid: ROOT,
        name: "nginx",
        description: "",
        catalogTier: 1,
        bundles: ["base"],
        aliases: [],
        activeTags: ["latest"],
        createTime: 1,
        updateTime: 2,
      };
      await again.repos.create(repo);
      assert.deepEqual(await again.repos.get(repo.uid), repo);
      const tag = {
        uid: `${repo.uid}/${"7".repeat(16)}`,
        repoUid: repo.uid,
        name: "latest",
        digest: `sha256:${"a".repeat(64)}`,
        deprecated: false,
        bundles: [],
        updateTime: 3,
      };
      assert.deepEqual(await again.tags.put(tag), { tag, created: true });
    } finally {
      await again.close();
    }
    assert.ok(userVersion(dir) >= 4);
  });

  test("a database at schema version 13 is migrated in place, keeping its people, gaining sign-in flows and refresh tokens", async () => {
    const dir = freshDir();
    const first = openSqliteStore({ dataDir: dir });
    await first.identities.create(PERSON);
    await first.close();
    const db = new Database(join(dir, "platform.db"));
    db.exec(LATER_THAN_13);
    db.pragma("user_version = 13");
    db.close();

    const again = openSqliteStore({ dataDir: dir });
    try {
      assert.deepEqual(await again.identities.get(PERSON.uid), PERSON);
      const token = {
        hash: "h",
        familyId: "f",
        identityUid: PERSON.uid,
        clientId: "platform-cli",
        keyId: "k",
        familyStartTime: 1,
        issueTime: 1,
        usedTime: 0,
      };
      await again.refreshTokens.start(token, 50);
      assert.deepEqual(await again.refreshTokens.get("h"), token);
      assert.equal(await again.signInFlows.get("absent", 0), null);
    } finally {
      await again.close();
    }
    assert.equal(userVersion(dir), 14);
  });

  test("every versioned table, each part's among them, has its row in table_versions, and no trigger (the store moves them)", async () => {
    const dir = freshDir();
    await openSqliteStore({ dataDir: dir }).close();
    const db = new Database(join(dir, "platform.db"), { readonly: true });
    try {
      const rows = db.prepare("SELECT name FROM table_versions ORDER BY name").pluck().all() as string[];
      assert.deepEqual(rows, [...VERSIONED_TABLES].sort());
      assert.deepEqual(db.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'").pluck().all(), []);
      for (const name of PART_NAMES) {
        const { table, cached } = STORE_PARTS[name];
        assert.ok(table === null ? !cached : rows.includes(table), `${name}'s table ${table} is versioned, or the part is not cached`);
      }
    } finally {
      db.close();
    }
  });

  test("a database from a newer server version is refused", async () => {
    const dir = freshDir();
    await openSqliteStore({ dataDir: dir }).close();
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
