/**
 * Issue 25 §2: the catalogue follows Distribution's notifications. Bodies in
 * Distribution 2.8's exact format (a push sends the config blob's event and
 * the manifest's) are posted to POST /registry/notifications; the catalogue
 * is read back over REST and the events feed. Redeliveries change nothing, an
 * older event after a newer one never regresses a tag, a delete by digest
 * removes the tags at it, and the endpoint's secret and bounds hold. On the
 * suite's engine (PLATFORM_TEST_BACKEND).
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { UnavailableError } from "../../src/domain/errors.js";
import type { Store } from "../../src/store/store.js";
import { ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const SECRET = "notify-secret-0123456789";
const EVENTS_TYPE = "application/vnd.docker.distribution.events.v1+json";
const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const digest = (c: string) => `sha256:${c.repeat(64)}`;

/** One event as Distribution 2.8.2 sends it. */
function event(action: string, repository: string, target: Record<string, unknown>, timestamp: string) {
  return {
    id: randomUUID(),
    timestamp,
    action,
    target: { repository, url: `http://127.0.0.1:5000/v2/${repository}/manifests/${String(target.digest)}`, ...target },
    request: {
      id: randomUUID(),
      addr: "127.0.0.1:40000",
      host: "127.0.0.1:5000",
      method: action === "push" ? "PUT" : "DELETE",
      useragent: "skopeo/1.9.3",
    },
    actor: { name: "" },
    source: { addr: "127.0.0.1:5000", instanceID: randomUUID() },
  };
}

/** A push's events: the config blob, then the manifest by tag. */
function push(repository: string, tag: string, manifest: string, timestamp: string) {
  return [
    event("push", repository, { mediaType: "application/octet-stream", size: 2, digest: digest("c"), length: 2 }, timestamp),
    event("push", repository, { mediaType: OCI_MANIFEST, size: 300, digest: manifest, length: 300, tag }, timestamp),
  ];
}

describe("the catalogue from registry notifications", () => {
  let srv: TestServer;
  let org = "";
  let cursor = "";
  before(async () => {
    srv = await startTestServer({ env: { PLATFORM_REGISTRY_NOTIFY_SECRET: SECRET } });
    org = (await createGroup(srv.url, null, "acme")).uid;
  });
  after(() => srv.close());

  function notify(events: unknown[], headers: Record<string, string> = {}, body?: string) {
    return fetch(`${srv.url}/registry/notifications`, {
      method: "POST",
      headers: { "content-type": EVENTS_TYPE, authorization: `Bearer ${SECRET}`, ...headers },
      body: body ?? JSON.stringify({ events }),
    });
  }
  async function notified(events: unknown[]) {
    const res = await notify(events);
    assert.equal(res.status, 200, await res.clone().text());
    return (await res.json()) as { applied: number; unchanged: number; ignored: number; unmapped: number };
  }
  async function repo(name: string): Promise<{ uid: string; name: string } | undefined> {
    return (await ok(rest(srv.url, "GET", `/registry/v2beta1/repos?uidp.children_of=${org}&name=${encodeURIComponent(name)}`))).repos[0];
  }
  async function tags(repoUid: string): Promise<Record<string, string>> {
    const page = await ok(rest(srv.url, "GET", `/registry/v2beta1/tags?uidp.children_of=${repoUid}&page_size=100`));
    return Object.fromEntries((page.tags as { name: string; digest: string }[]).map((t) => [t.name, t.digest]));
  }
  /** The [type, subject] and actor of the events committed since the last call. */
  async function newEvents(): Promise<{ type: string; subject: string; actor: string; digest?: string }[]> {
    const page = await ok(rest(srv.url, "GET", `/events/v1/events?page_size=200${cursor ? `&page_token=${cursor}` : ""}`));
    cursor = page.nextPageToken as string;
    return (page.events as { type: string; subject: string; data: { actor: { subject: string }; body: { digest?: string } } }[]).map(
      (e) => ({
        type: e.type,
        subject: e.subject,
        actor: e.data.actor.subject,
        ...(e.data.body.digest ? { digest: e.data.body.digest } : {}),
      }),
    );
  }

  test("a first push creates the repo and the tag at the manifest's digest, with their events", async () => {
    await newEvents();
    const answer = await notified(push(`${org}/app`, "v1", digest("a"), "2026-11-27T10:00:00.000000001Z"));
    assert.deepEqual(answer, { applied: 1, unchanged: 0, ignored: 1, unmapped: 0 }, "the config blob's event is ignored");
    const r = await repo("app");
    assert.ok(r, "the repo exists");
    assert.deepEqual(await tags(r.uid), { v1: digest("a") });
    const events = await newEvents();
    assert.deepEqual(
      events.map((e) => [e.type, e.actor]),
      [
        ["api.platform.registry.repo.created.v1", "registry"],
        ["api.platform.registry.tag.created.v1", "registry"],
      ],
    );
    assert.equal(events[0]!.subject, r.uid);
    assert.equal(events[1]!.digest, digest("a"));
  });

  test("a redelivery changes nothing and emits nothing", async () => {
    const again = push(`${org}/app`, "v1", digest("a"), "2026-11-27T10:00:00.000000001Z");
    assert.deepEqual(await notified(again), { applied: 0, unchanged: 1, ignored: 1, unmapped: 0 });
    assert.deepEqual(await notified(again), { applied: 0, unchanged: 1, ignored: 1, unmapped: 0 });
    assert.deepEqual(await tags((await repo("app"))!.uid), { v1: digest("a") });
    assert.deepEqual(await newEvents(), []);
  });

  test("a newer push moves the tag; an older event arriving after it does not move it back", async () => {
    const r = (await repo("app"))!;
    await notified(push(`${org}/app`, "v1", digest("b"), "2026-11-27T10:00:05.5Z"));
    assert.deepEqual(await tags(r.uid), { v1: digest("b") });
    // Redelivered late: an intermediate push, older than the one that set the tag.
    assert.deepEqual((await notified(push(`${org}/app`, "v1", digest("d"), "2026-11-27T10:00:03Z"))).applied, 0);
    assert.deepEqual(await tags(r.uid), { v1: digest("b") });
    const events = await newEvents();
    assert.deepEqual(
      events.map((e) => [e.type, e.digest]),
      [["api.platform.registry.tag.updated.v1", digest("b")]],
    );
    // Microseconds count: a push one microsecond later wins.
    await notified(push(`${org}/app`, "v1", digest("e"), "2026-11-27T10:00:05.500001Z"));
    assert.deepEqual(await tags(r.uid), { v1: digest("e") });
    await notified(push(`${org}/app`, "v1", digest("b"), "2026-11-27T10:00:05.5Z"));
    assert.deepEqual(await tags(r.uid), { v1: digest("e") });
    await newEvents();
  });

  test("a delete by digest removes every tag at it, not others; an older delete spares a tag set since", async () => {
    const r = (await repo("app"))!;
    await notified([
      ...push(`${org}/app`, "v2", digest("e"), "2026-11-27T10:01:00Z"),
      ...push(`${org}/app`, "keep", digest("f"), "2026-11-27T10:01:00Z"),
    ]);
    assert.deepEqual(await tags(r.uid), { keep: digest("f"), v1: digest("e"), v2: digest("e") });
    await newEvents();
    // Distribution's manifest delete names the repository and digest only.
    const del = event("delete", `${org}/app`, { digest: digest("e") }, "2026-11-27T10:02:00Z");
    assert.deepEqual(await notified([del]), { applied: 1, unchanged: 0, ignored: 0, unmapped: 0 });
    assert.deepEqual(await tags(r.uid), { keep: digest("f") });
    assert.deepEqual(
      (await newEvents()).map((e) => e.type),
      ["api.platform.registry.tag.deleted.v1", "api.platform.registry.tag.deleted.v1"],
    );
    assert.deepEqual(await notified([del]), { applied: 0, unchanged: 1, ignored: 0, unmapped: 0 }, "a redelivered delete");
    // The digest pushed again later, then the old delete redelivered: the new tag stays.
    await notified(push(`${org}/app`, "v3", digest("e"), "2026-11-27T10:03:00Z"));
    await notified([del]);
    assert.deepEqual(await tags(r.uid), { keep: digest("f"), v3: digest("e") });
    await newEvents();
  });

  test("a push delivered after the delete of its manifest does not bring the tag back; a later push does", async () => {
    const r = (await repo("app"))!;
    // The push's notification is delayed past the delete's (which then found no tag at the digest).
    assert.equal((await notified([event("delete", `${org}/app`, { digest: digest("7") }, "2026-11-27T10:03:30Z")])).applied, 0);
    assert.deepEqual(await notified(push(`${org}/app`, "late", digest("7"), "2026-11-27T10:03:20Z")), {
      applied: 0,
      unchanged: 1,
      ignored: 1,
      unmapped: 0,
    });
    assert.equal((await tags(r.uid)).late, undefined);
    // The same manifest pushed again after the delete is a new push.
    await notified(push(`${org}/app`, "late", digest("7"), "2026-11-27T10:03:40Z"));
    assert.equal((await tags(r.uid)).late, digest("7"));
    await newEvents();
  });

  test("a tag the API moved after the registry set it is not regressed by an older notification", async () => {
    const r = (await repo("app"))!;
    await ok(rest(srv.url, "POST", `/registry/v2beta1/tags/${r.uid}`, { name: "keep", digest: digest("1") }));
    await notified(push(`${org}/app`, "keep", digest("f"), "2026-11-27T10:04:00Z"));
    assert.equal((await tags(r.uid)).keep, digest("1"), "the API's change is newer than the notification");
    await newEvents();
  });

  test("repositories of no organization, and events that are not manifest changes, are ignored and counted", async () => {
    const unknownOrg = "0".repeat(40);
    const answer = await notified([
      ...push(`${unknownOrg}/app`, "v1", digest("a"), "2026-11-27T10:05:00Z"),
      ...push("library/app", "v1", digest("a"), "2026-11-27T10:05:00Z"),
      ...push(`${org}/Bad..Name`, "v1", digest("a"), "2026-11-27T10:05:00Z"),
      event("pull", `${org}/app`, { mediaType: OCI_MANIFEST, digest: digest("f"), tag: "keep" }, "2026-11-27T10:05:00Z"),
      event("push", `${org}/app`, { mediaType: OCI_MANIFEST, digest: digest("f") }, "2026-11-27T10:05:00Z"),
      event("push", `${org}/app`, { mediaType: OCI_MANIFEST, digest: digest("f"), tag: "x" }, "yesterday"),
      42,
    ]);
    assert.deepEqual(answer, { applied: 0, unchanged: 0, ignored: 3 + 4, unmapped: 3 });
    assert.equal(await repo("bad..name"), undefined);
    assert.deepEqual(await newEvents(), []);
  });

  test("the secret is required, compared whole, and checked before the body", async () => {
    const events = push(`${org}/app`, "nope", digest("a"), "2026-11-27T11:00:00Z");
    for (const authorization of ["", "Bearer wrong", `Bearer ${SECRET}x`, `Basic ${SECRET}`, SECRET]) {
      const res = await notify(events, { authorization });
      assert.equal(res.status, 401, authorization);
      const body = (await res.json()) as { code: number; details: { reason: string }[] };
      assert.equal(body.details[0]!.reason, "UNAUTHENTICATED");
      assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
    }
    assert.equal((await tags((await repo("app"))!.uid)).nope, undefined);
  });

  test("bounded: a body over 1 MiB, more than 100 events, or not JSON is refused", async () => {
    const big = await notify([], {}, JSON.stringify({ events: [], pad: "x".repeat(1024 * 1024) }));
    assert.equal(big.status, 413);
    const many = await notify(Array.from({ length: 101 }, () => ({})));
    assert.equal(many.status, 400);
    assert.match(((await many.json()) as { message: string }).message, /at most 100 events/);
    const bad = await notify([], {}, "{not json");
    assert.equal(bad.status, 400);
    const shape = await notify([], {}, JSON.stringify({ event: [] }));
    assert.equal(shape.status, 400);
  });
});

describe("without PLATFORM_REGISTRY_NOTIFY_SECRET", () => {
  test("POST /registry/notifications does not exist (404)", async () => {
    const srv = await startTestServer();
    try {
      const res = await fetch(`${srv.url}/registry/notifications`, {
        method: "POST",
        headers: { "content-type": EVENTS_TYPE },
        body: JSON.stringify({ events: [] }),
      });
      assert.equal(res.status, 404);
      assert.equal(((await res.json()) as { details: { reason: string }[] }).details[0]!.reason, "NOT_FOUND");
    } finally {
      await srv.close();
    }
  });
});

describe("a store outage", () => {
  test("answers 503 so the registry delivers again, and the redelivery is applied", async () => {
    let down = false;
    // Every transaction fails while down, as when the database cannot be reached.
    const outage = (store: Store): Store =>
      new Proxy(store, {
        get(target, prop) {
          if (prop === "transaction" && down) return () => Promise.reject(new UnavailableError());
          const value = Reflect.get(target, prop, target) as unknown;
          return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
    const srv = await startTestServer({ env: { PLATFORM_REGISTRY_NOTIFY_SECRET: SECRET }, decorateStore: outage });
    try {
      const org = (await createGroup(srv.url, null, "outage")).uid;
      const post = () =>
        fetch(`${srv.url}/registry/notifications`, {
          method: "POST",
          headers: { "content-type": EVENTS_TYPE, authorization: `Bearer ${SECRET}` },
          body: JSON.stringify({ events: push(`${org}/app`, "v1", digest("a"), "2026-11-27T12:00:00Z") }),
        });
      down = true;
      const refused = await post();
      assert.equal(refused.status, 503);
      assert.equal(((await refused.json()) as { details: { reason: string }[] }).details[0]!.reason, "UNAVAILABLE");
      down = false;
      const redelivered = await post();
      assert.equal(redelivered.status, 200);
      assert.equal(((await redelivered.json()) as { applied: number }).applied, 1);
      const repos = (await ok(rest(srv.url, "GET", `/registry/v2beta1/repos?uidp.children_of=${org}`))).repos as { name: string }[];
      assert.deepEqual(
        repos.map((r) => r.name),
        ["app"],
      );
    } finally {
      await srv.close();
    }
  });
});
