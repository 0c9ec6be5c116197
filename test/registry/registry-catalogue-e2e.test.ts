/**
 * Issue 25 §2 and §3 with the real registry (Debian's docker-registry,
 * Distribution 2.8, configured by docs/registry/registry.yml) and client
 * (skopeo): a push shows the repo and the tag at the pushed digest, a delete
 * removes the tag, and `platform-api registry-reconcile` repairs a catalogue
 * whose notifications were lost. On the suite's engine (PLATFORM_TEST_BACKEND).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { platformCli } from "../support/platform-cli.js";
import { ok } from "../support/principals.js";
import {
  deleteImage,
  manifestDigest,
  pushImage,
  REGISTRY_SERVER_ENV,
  startRegistryWorld,
  type Credentials,
  type RegistryWorld,
} from "../support/registry.js";
import { createGroup, rest, type TestServer } from "../support/server.js";

/** A liveness bound, not a latency target: the catalogue normally follows within a fraction of a second. */
const CATALOGUE_BOUND_MS = 60_000;

describe("the catalogue follows the real registry", () => {
  let world: RegistryWorld;
  let srv: TestServer;
  let org = "";
  let creds: Credentials;
  before(async () => {
    world = await startRegistryWorld();
    srv = world.srv;
    org = (await createGroup(srv.url, null, "catalogue org")).uid;
    // The administrator: every registry action at every repository.
    creds = { user: "_token", password: srv.adminToken };
  });
  after(() => world?.close());

  async function repoUid(name: string): Promise<string | undefined> {
    return (await ok(rest(srv.url, "GET", `/registry/v2beta1/repos?uidp.children_of=${org}&name=${encodeURIComponent(name)}`))).repos[0]
      ?.uid;
  }
  async function tags(name: string): Promise<Record<string, { uid: string; digest: string }>> {
    const repo = await repoUid(name);
    if (repo === undefined) return {};
    const page = await ok(rest(srv.url, "GET", `/registry/v2beta1/tags?uidp.children_of=${repo}&page_size=100`));
    return Object.fromEntries((page.tags as { uid: string; name: string; digest: string }[]).map((t) => [t.name, t]));
  }
  /** Polls until check holds; returns how long it took (ms). */
  async function until(what: string, check: () => Promise<boolean>): Promise<number> {
    const started = performance.now();
    while (!(await check())) {
      if (performance.now() - started > CATALOGUE_BOUND_MS)
        assert.fail(`${what}: not within ${CATALOGUE_BOUND_MS} ms\n${world.registry.logs().slice(-3000)}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return performance.now() - started;
  }

  test("a push shows the repo and the tag at the pushed digest; a delete removes the tag", async (t) => {
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/app:v1`, creds);
    assert.equal(pushed.code, 0, pushed.stderr);
    const ms = await until("the pushed tag", async () => (await tags("app")).v1 !== undefined);
    const digest = await manifestDigest(world.registry, `${org}/app:v1`, creds);
    assert.equal((await tags("app")).v1!.digest, digest);
    t.diagnostic(`catalogue delay after the push returned: ${ms.toFixed(0)} ms`);

    const removed = await deleteImage(world.registry, `${org}/app:v1`, creds);
    assert.equal(removed.code, 0, removed.stderr);
    const deleteMs = await until("the deleted tag gone", async () => (await tags("app")).v1 === undefined);
    t.diagnostic(`catalogue delay after the delete returned: ${deleteMs.toFixed(0)} ms`);
    assert.ok((await repoUid("app")) !== undefined, "the repo stays");
  });

  test("registry-reconcile repairs what notifications missed", async () => {
    const pushed = await pushImage(world.registry, world.image.ref, `${org}/web:v2`, creds);
    assert.equal(pushed.code, 0, pushed.stderr);
    await until("the pushed tag", async () => (await tags("web")).v2 !== undefined);
    const digest = (await tags("web")).v2!.digest;
    // Lost notifications: the tag row gone from the catalogue, and a tag the registry never had.
    await ok(rest(srv.url, "DELETE", `/registry/v2beta1/tags/${(await tags("web")).v2!.uid}`));
    const web = (await repoUid("web"))!;
    await ok(rest(srv.url, "POST", `/registry/v2beta1/tags/${web}`, { name: "ghost", digest: `sha256:${"9".repeat(64)}` }));
    assert.deepEqual(Object.keys(await tags("web")), ["ghost"]);

    const run = await platformCli(
      srv,
      ["registry-reconcile", "--registry", `http://${world.registry.addr}`, "--page-size", "1"],
      REGISTRY_SERVER_ENV,
    );
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^repositories: 2$/m, "app (no tags left) and web, walked one per page");
    assert.match(run.stdout, /^tags created or moved: 1$/m);
    assert.match(run.stdout, /^tags removed: 1$/m);
    const repaired = await tags("web");
    assert.deepEqual(Object.keys(repaired), ["v2"]);
    assert.equal(repaired.v2!.digest, digest);

    const again = await platformCli(srv, ["registry-reconcile", "--registry", `http://${world.registry.addr}`], REGISTRY_SERVER_ENV);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^tags created or moved: 0$/m, "a second run finds nothing to repair");
    assert.match(again.stdout, /^tags unchanged: 1$/m);

    // The events feed shows the repairs, attributed to the reconcile.
    const feed = await ok(rest(srv.url, "GET", "/events/v1/events?page_size=500"));
    const reconciled = (feed.events as { type: string; data: { actor: { subject: string } } }[])
      .filter((e) => e.data.actor.subject === "registry-reconcile")
      .map((e) => e.type);
    assert.deepEqual(reconciled, ["api.platform.registry.tag.created.v1", "api.platform.registry.tag.deleted.v1"]);
  });

  test("registry-reconcile: an unreachable registry exits 1 and repairs nothing; bad arguments exit 2", async () => {
    const down = await platformCli(
      srv,
      ["registry-reconcile", "--registry", "http://127.0.0.1:1", "--timeout-ms", "2000"],
      REGISTRY_SERVER_ENV,
    );
    assert.equal(down.code, 1);
    assert.match(down.stderr, /^registry-reconcile: GET \/v2\/_catalog: /);
    const usage = await platformCli(srv, ["registry-reconcile"], REGISTRY_SERVER_ENV);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /--registry <url> is required/);
  });
});
