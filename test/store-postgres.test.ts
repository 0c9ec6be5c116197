/**
 * The store conformance suite on PostgreSQL (a throwaway cluster, a fresh
 * database per test), and what only several processes can show: races
 * between two pools on one database.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { openPostgresStore } from "../src/store/postgres/index.js";
import type { Store } from "../src/store/store.js";
import { freshPgDatabase, pgAvailable } from "./support/pg-cluster.js";
import { group, invite, role } from "./support/store-fixtures.js";
import { runStoreConformance } from "./support/store-conformance.js";

if (!pgAvailable()) {
  test("PostgreSQL conformance", { skip: "PostgreSQL is not installed (apt-get install postgresql)" }, () => {});
} else {
  runStoreConformance("postgresql", async () => openPostgresStore({ url: await freshPgDatabase(), maxConnections: 4 }));

  describe("postgresql: two processes on one database", () => {
    let a: Store;
    let b: Store;
    before(async () => {
      const url = await freshPgDatabase();
      a = await openPostgresStore({ url });
      b = await openPostgresStore({ url });
    });
    after(async () => {
      await a.close();
      await b.close();
    });

    test("40 concurrent redemptions of one single-use invite over two pools: exactly one succeeds", async () => {
      const org = "1".repeat(40);
      await a.groups.create(group(org, null, "race org"));
      const viewer = "2".repeat(40);
      await a.roles.create(role(viewer, null, "viewer"));
      const uid = `${org}/${"3".repeat(16)}`;
      await a.groupInvites.create(invite(uid, org, viewer, "race-key"));
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).groupInvites.consume(uid)));
      assert.equal(results.filter(Boolean).length, 1);
    });

    test("30 rounds of delete-parent against create-child on the other pool: never an orphan", async () => {
      let orphans = 0;
      for (let i = 0; i < 30; i++) {
        const parent = i.toString(16).padStart(40, "a");
        const child = `${parent}/${"4".repeat(16)}`;
        await a.groups.create(group(parent, null, `parent ${i}`));
        await Promise.allSettled([a.groups.delete(parent), b.groups.create(group(child, parent, `child ${i}`))]);
        const [p, c] = [await a.groups.get(parent), await a.groups.get(child)];
        if (c !== null && p === null) orphans++;
      }
      assert.equal(orphans, 0);
    });

    test("an authorization change committed by one process is seen by the other's next refresh", async () => {
      const before = b.authzVersion();
      await a.roles.create(role("5".repeat(40), null, "another"));
      await b.refresh();
      assert.notEqual(b.authzVersion(), before);
    });
  });
}
