import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { describeListContract } from "../support/list-contract.js";
import { expectedOrder, walkPages } from "../support/paged-walk.js";
import { serveForSuite } from "../support/resource-suite.js";
import { assertViolations } from "../support/rest-errors.js";
import { createGroup, mintAdminToken, rest, setDefaultToken } from "../support/server.js";

/** Tokens expire with the clock: re-mint the administrator's after moving it by days. */
let refreshToken = async (): Promise<void> => {};

/** A group as the REST API returns it. */
interface GroupJson {
  uid: string;
  name: string;
  description: string;
  createTime: string;
  updateTime: string;
}

const LIST = "/iam/v2beta1/groups";
const DAY_MS = 24 * 3600 * 1000;
/** The uids of a page of groups, in the order received. */
const uidsOf = (body: { groups: GroupJson[] }) => body.groups.map((g) => g.uid);

describe("paging over REST: one organization with duplicated names and equal times", () => {
  let clock = Date.UTC(2025, 5, 1, 12, 0, 0);
  const srv = serveForSuite({ now: () => clock });

  describeListContract(
    {
      resource: "groups",
      srv,
      path: LIST,
      seed: async () => {
        // Clock steps of 0 make equal create times, so created_at needs the uid tie-break.
        const steps = [0, 1, 0, 0, 2];
        let i = 0;
        const tick = () => {
          clock += steps[i++ % steps.length]!;
        };
        const root = await createGroup(srv.url, null, "acme");
        // Another organization's "team" is outside the root, where name=team must not find it.
        const other = await createGroup(srv.url, null, "other org");
        await createGroup(srv.url, other.uid, "team");
        const created: GroupJson[] = [];
        const childNames = ["team", "ops", "team", "platform", "ops", "team"];
        const grandchildNames = ["svc", "dbs", "svc", "web app"];
        for (let c = 0; c < childNames.length; c++) {
          tick();
          const child = await createGroup(srv.url, root.uid, childNames[c]!);
          created.push(child);
          for (let g = 0; g < (c === 5 ? 3 : 4); g++) {
            tick();
            created.push(await createGroup(srv.url, child.uid, grandchildNames[g]!));
          }
        }
        // Some updates, partly at equal times, so updated_at differs from created_at.
        clock += 1_000;
        for (const idx of [0, 4, 9, 13, 20, 27]) {
          if (idx % 2 === 0) clock += 5;
          const res = await rest(srv.url, "PATCH", `${LIST}/${created[idx]!.uid}`, { description: `changed ${idx}` });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          assert.equal(res.body.description, `changed ${idx}`);
          created[idx] = res.body;
        }
        assert.equal(created.length, 29);
        return { root: root.uid, team: created[0]!.uid, items: created };
      },
      unsortable: ["description", "createTime"],
      lister: "viewer",
    },
    (listed) => {
      const scope = () => listed.scope;
      const N = () => listed.items.length;

      test("order_by with '+' for the space: created_at+desc walks newest first", async () => {
        const expected = expectedOrder(listed.items, "created_at", true);
        for (let k = 1; k <= N() + 1; k++) {
          assert.deepEqual(await walkPages(srv.url, LIST, "groups", `${scope()}&order_by=created_at+desc`, k, N()), expected);
        }
        const upper = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=200&order_by=name+desc`);
        assert.deepEqual(uidsOf(upper.body), expectedOrder(listed.items, "name", true));
      });

      test("a name filter pages too, totalCount counting only the matching groups", async () => {
        const svc = listed.items.filter((g) => g.name === "svc");
        assert.equal(svc.length, 12);
        const walked = await walkPages(srv.url, LIST, "groups", `${scope()}&name=svc&order_by=created_at%20desc`, 5, svc.length);
        assert.deepEqual(walked, expectedOrder(svc, "created_at", true));
      });

      test("skip on the first page only: following tokens continues without gaps and keeps skipped", async () => {
        const expected = expectedOrder(listed.items, "updated_at", true);
        const uids: string[] = [];
        let token = "";
        let first = true;
        for (;;) {
          const params = first ? "&skip=3" : `&page_token=${encodeURIComponent(token)}`;
          const res = await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=updated_at%20desc&page_size=4${params}`);
          assert.equal(res.status, 200);
          assert.equal(res.body.skipped, 3);
          assert.equal(res.body.totalCount, String(N()));
          uids.push(...uidsOf(res.body));
          if (!("nextPageToken" in res.body)) break;
          token = res.body.nextPageToken;
          first = false;
        }
        assert.deepEqual(uids, expected.slice(3));
      });

      test("repeating the same skip with every token (clients repeat every parameter) never loses results", async () => {
        const expected = expectedOrder(listed.items, "name", false);
        const uids: string[] = [];
        let token = "";
        for (;;) {
          const params = token === "" ? "" : `&page_token=${encodeURIComponent(token)}`;
          const res = await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=name&page_size=4&skip=3${params}`);
          assert.equal(res.status, 200);
          assert.equal(res.body.skipped, 3);
          uids.push(...uidsOf(res.body));
          if (!("nextPageToken" in res.body)) break;
          token = res.body.nextPageToken;
        }
        assert.deepEqual(uids, expected.slice(3));
      });

      test("skip with a page token skips from the token's position and accumulates skipped", async () => {
        const expected = expectedOrder(listed.items, "uid", false);
        const page1 = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=5&skip=3`);
        assert.deepEqual(uidsOf(page1.body), expected.slice(3, 8));
        assert.equal(page1.body.skipped, 3);
        const page2 = await rest(
          srv.url,
          "GET",
          `${LIST}?${scope()}&page_size=5&skip=2&page_token=${encodeURIComponent(page1.body.nextPageToken)}`,
        );
        assert.equal(page2.status, 200, JSON.stringify(page2.body));
        assert.deepEqual(uidsOf(page2.body), expected.slice(10, 15));
        assert.equal(page2.body.skipped, 5);
        assert.equal(page2.body.totalCount, String(N()));
      });

      test("skip=2147483647 returns an empty last page", async () => {
        const res = await rest(srv.url, "GET", `${LIST}?${scope()}&skip=2147483647`);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body.groups, []);
        assert.equal("nextPageToken" in res.body, false);
        assert.equal(res.body.skipped, 2147483647);
        assert.equal(res.body.totalCount, String(N()));
      });

      test("a page token reused with any other filter or order_by is an invalid argument", async () => {
        const first = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3&order_by=name`);
        const token = encodeURIComponent(first.body.nextPageToken as string);
        const child = listed.items[0].uid;
        const control = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3&order_by=name&page_token=${token}`);
        assert.equal(control.status, 200);
        assert.deepEqual(uidsOf(control.body), expectedOrder(listed.items, "name", false).slice(3, 6));
        for (const query of [
          `uidp.descendants_of=${child}&order_by=name`,
          `uidp.children_of=${listed.root}&order_by=name`,
          `${scope()}&name=svc&order_by=name`,
          `order_by=name`,
          `${scope()}&order_by=name%20desc`,
          `${scope()}&order_by=uid`,
          scope(),
        ]) {
          assertViolations(await rest(srv.url, "GET", `${LIST}?${query}&page_size=3&page_token=${token}`), ["page_token"]);
        }
      });
    },
  );
});

describe("paging over REST: page size limits", () => {
  let root: GroupJson;
  const COUNT = 205;
  const srv = serveForSuite({}, async () => {
    root = await createGroup(srv.url, null, "big org");
    for (let i = 0; i < COUNT; i += 25) {
      const batch = [];
      for (let j = i; j < Math.min(i + 25, COUNT); j++) batch.push(createGroup(srv.url, root.uid, `team ${j % 7}`));
      await Promise.all(batch);
    }
  });

  test("page_size 0 or absent means 50", async () => {
    for (const sizeParam of ["&page_size=0", ""]) {
      const res = await rest(srv.url, "GET", `${LIST}?uidp.descendants_of=${root.uid}${sizeParam}`);
      assert.equal(res.status, 200);
      assert.equal(res.body.groups.length, 50);
      assert.ok(res.body.nextPageToken);
      assert.equal(res.body.totalCount, String(COUNT));
    }
  });

  test("page_size above 200 is served as 200", async () => {
    const res = await rest(srv.url, "GET", `${LIST}?uidp.descendants_of=${root.uid}&page_size=1000`);
    assert.equal(res.status, 200);
    assert.equal(res.body.groups.length, 200);
    assert.equal(res.body.totalCount, String(COUNT));
    const rest2 = await rest(
      srv.url,
      "GET",
      `${LIST}?uidp.descendants_of=${root.uid}&page_size=1000&page_token=${encodeURIComponent(res.body.nextPageToken)}`,
    );
    assert.equal(rest2.body.groups.length, COUNT - 200);
    assert.equal("nextPageToken" in rest2.body, false);
    const all = [...res.body.groups, ...rest2.body.groups].map((g: GroupJson) => g.uid);
    assert.equal(new Set(all).size, COUNT);
  });
});

describe("paging over REST: page token lifetime", () => {
  let clock = Date.UTC(2025, 0, 1, 0, 0, 0);
  let root: GroupJson;
  let expected: string[];
  const srv = serveForSuite({ now: () => clock }, async () => {
    refreshToken = async () => setDefaultToken(srv.port, await mintAdminToken(srv.server));
    root = await createGroup(srv.url, null, "time org");
    const kids: GroupJson[] = [];
    for (let i = 0; i < 7; i++) kids.push(await createGroup(srv.url, root.uid, `kid ${i % 3}`));
    expected = expectedOrder(kids, "uid", false);
  });

  test("a token younger than 3 days continues; older than 3 days restarts from the beginning", async () => {
    const path = `${LIST}?uidp.descendants_of=${root.uid}&page_size=3`;
    const first = await rest(srv.url, "GET", path);
    assert.deepEqual(uidsOf(first.body), expected.slice(0, 3));
    const token = encodeURIComponent(first.body.nextPageToken as string);

    clock += 3 * DAY_MS - 1_000;

    await refreshToken();
    const fresh = await rest(srv.url, "GET", `${path}&page_token=${token}`);
    assert.equal(fresh.status, 200);
    assert.deepEqual(uidsOf(fresh.body), expected.slice(3, 6));

    clock += 2_000;
    const stale = await rest(srv.url, "GET", `${path}&page_token=${token}`);
    assert.equal(stale.status, 200, JSON.stringify(stale.body));
    assert.deepEqual(uidsOf(stale.body), expected.slice(0, 3));
    assert.equal(stale.body.totalCount, "7");
    assert.equal(stale.body.skipped, 0);

    // The restarted walk's own token is fresh and continues normally.
    const next = await rest(srv.url, "GET", `${path}&page_token=${encodeURIComponent(stale.body.nextPageToken)}`);
    assert.deepEqual(uidsOf(next.body), expected.slice(3, 6));
  });

  test("an expired token that carried a skip restarts with only this request's skip", async () => {
    const path = `${LIST}?uidp.descendants_of=${root.uid}&page_size=2`;
    const first = await rest(srv.url, "GET", `${path}&skip=2`);
    assert.equal(first.body.skipped, 2);
    clock += 3 * DAY_MS + 1_000;
    await refreshToken();
    const stale = await rest(srv.url, "GET", `${path}&page_token=${encodeURIComponent(first.body.nextPageToken)}`);
    assert.equal(stale.status, 200);
    assert.equal(stale.body.skipped, 0);
    assert.deepEqual(uidsOf(stale.body), expected.slice(0, 2));
  });
});
