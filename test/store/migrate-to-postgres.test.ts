/**
 * `platform-api migrate-to-postgres`: a SQLite deployment's data, copied into
 * a fresh PostgreSQL database, reads back the same over the API, and the
 * tokens issued before keep working (the keys and the administrator moved).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { freshPgDatabase, PG_SKIP } from "../support/pg-cluster.js";
import { platformCli } from "../support/platform-cli.js";
import { builtinRole, createCaller, customRole, ok } from "../support/principals.js";
import { createGroup, rest, startTestServer } from "../support/server.js";

const OSV = fileURLToPath(new URL("../data/osv", import.meta.url));

/** Every collection as the administrator lists it, for comparing two servers. */
const COLLECTIONS = [
  "/iam/v2beta1/groups?page_size=200",
  "/iam/v2beta1/identities?page_size=200",
  "/iam/v2beta1/roles?page_size=200",
  "/iam/v2beta1/roleBindings?page_size=200",
  "/iam/v2beta1/identityProviders?page_size=200",
  "/iam/v2beta1/accountAssociations?page_size=200",
  "/iam/v2beta1/groupInvites?page_size=200",
  "/registry/v2beta1/repos?page_size=200",
  "/registry/v2beta1/tags?page_size=200&include_referrers=true&include_dates=true&include_epochs=true",
  "/vulnerabilities/v2beta1/advisories?page_size=200",
];

test(
  "migrate-to-postgres copies every record, key and secret; the API reads back the same; tokens keep working",
  { skip: PG_SKIP },
  async (t) => {
    const before = await startTestServer({ backend: "sqlite" });
    // Closed below before the copy; closed here too when an assertion fails first (idempotent), so the run ends.
    t.after(() => before.server.close());
    const org = await createGroup(before.url, null, "migrated org");
    const folder = await createGroup(before.url, org.uid, "migrated folder");
    const viewer = await builtinRole(before, "viewer");
    const custom = await customRole(before, org.uid, "migrated role", ["CAP_REPO_LIST", "CAP_IAM_GROUPS_LIST"]);
    const caller = await createCaller(before, folder.uid, "migrated caller", custom);
    await ok(
      rest(before.url, "POST", `/iam/v2beta1/identityProviders/${org.uid}`, {
        name: "migrated sso",
        defaultRole: viewer,
        oidc: { issuer: "https://login.example", clientId: "c", clientSecret: "s" },
      }),
    );
    await ok(
      rest(before.url, "POST", `/iam/v2beta1/accountAssociations/${org.uid}`, {
        name: "migrated association",
        amazon: { account: "123456789012" },
      }),
    );
    const invite = await ok(rest(before.url, "POST", `/iam/v2beta1/groupInvites/${org.uid}`, { roleUid: viewer, ttl: "86400s" }));
    const repo = await ok(rest(before.url, "POST", `/registry/v2beta1/repos/${folder.uid}`, { name: "migrated/app" }));
    for (const name of ["latest", "sha256-abc.sig", "1.0-20240131"]) {
      await ok(rest(before.url, "POST", `/registry/v2beta1/tags/${repo.uid}`, { name, digest: `sha256:${"a".repeat(64)}` }));
    }
    const imported = await platformCli(before, ["import-advisories", "--group", org.uid, OSV]);
    assert.equal(imported.code, 0, imported.stderr);
    const listings = await Promise.all(
      COLLECTIONS.map(async (path) => (await ok(rest(before.url, "GET", path))) as Record<string, unknown>),
    );
    const adminToken = before.adminToken;
    await before.server.close();

    const url = await freshPgDatabase();
    const run = await platformCli({ dataDir: before.dataDir, databaseUrl: url }, ["migrate-to-postgres"]);
    assert.equal(run.code, 0, run.stderr);
    t.diagnostic(run.stdout.trim().replace(/\n/g, ", "));
    assert.match(run.stdout, /^groups: 2$/m);
    assert.match(run.stdout, /^tags: 3$/m);

    const after = await startTestServer({ dataDir: before.dataDir, databaseUrl: url });
    try {
      const auth = { authorization: `Bearer ${adminToken}` };
      for (const [i, path] of COLLECTIONS.entries()) {
        const res = await rest(after.url, "GET", path, undefined, auth);
        assert.equal(res.status, 200, `${path}: ${JSON.stringify(res.body)}`);
        assert.deepEqual(res.body, listings[i], path);
      }
      // The caller's token from before still works, with its grants.
      assert.equal(
        (await rest(after.url, "GET", `/iam/v2beta1/groups/${folder.uid}`, undefined, { authorization: `Bearer ${caller.token}` })).status,
        200,
      );
      // The invite code still redeems: its hash moved with it.
      const redeemer = await ok(
        rest(
          after.url,
          "POST",
          `/iam/v2beta1/identities/${org.uid}`,
          { name: "late redeemer", claimMatch: { issuer: "https://ci.example", subject: "late" } },
          auth,
        ),
      );
      const token = (await after.server.tokens.mint(redeemer.uid)).token;
      assert.equal(
        (await rest(after.url, "POST", "/auth/v1/register", { code: invite.code }, { authorization: `Bearer ${token}` })).status,
        200,
      );
    } finally {
      await after.close();
    }

    const again = await platformCli({ dataDir: before.dataDir, databaseUrl: url }, ["migrate-to-postgres"]);
    assert.equal(again.code, 1, again.stdout);
    assert.match(again.stderr, /already holds groups or identities; nothing was copied/);
  },
);
