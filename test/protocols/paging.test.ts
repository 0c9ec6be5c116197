import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { createGroup, mintAdminToken, rest, setDefaultToken, startTestServer, type RestResult, type TestServer } from "../support/server.js";

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
const ORDER_FIELDS = ["uid", "name", "created_at", "updated_at"] as const;
type OrderField = (typeof ORDER_FIELDS)[number];
const DAY_MS = 24 * 3600 * 1000;

/** The key a group sorts by for an order_by field, as a user reads it from the JSON. */
function sortKey(g: GroupJson, field: OrderField): string | number {
  if (field === "name") return g.name;
  if (field === "created_at") return Date.parse(g.createTime);
  if (field === "updated_at") return Date.parse(g.updateTime);
  return g.uid;
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** What the server must return: by the field, ties by uid; desc reverses the whole order. */
function expectedOrder(groups: GroupJson[], field: OrderField, desc: boolean): string[] {
  const asc = [...groups].sort((x, y) => {
    const kx = sortKey(x, field);
    const ky = sortKey(y, field);
    const byKey = typeof kx === "number" && typeof ky === "number" ? kx - ky : compareText(String(kx), String(ky));
    return byKey !== 0 ? byKey : compareText(x.uid, y.uid);
  });
  const uids = asc.map((g) => g.uid);
  return desc ? uids.reverse() : uids;
}

/** Asserts the spec's error body for an invalid argument on one field. */
function assertInvalidArgument(res: RestResult, field: string): void {
  assert.equal(res.status, 400, JSON.stringify(res.body));
  assert.deepEqual(Object.keys(res.body).sort(), ["code", "details", "message"]);
  assert.equal(res.body.code, 3);
  assert.equal(typeof res.body.message, "string");
  assert.ok(res.body.message.startsWith(`Invalid argument: ${field}: `), res.body.message);
  const details = res.body.details as { "@type": string; reason?: string; fieldViolations?: { field: string }[] }[];
  const infos = details.filter((d) => d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo");
  assert.equal(infos.length, 1, "exactly one ErrorInfo");
  assert.equal(infos[0]!.reason, "INVALID_ARGUMENT");
  const badRequests = details.filter((d) => d["@type"] === "type.googleapis.com/google.rpc.BadRequest");
  assert.equal(badRequests.length, 1, "one BadRequest");
  assert.deepEqual(
    badRequests[0]!.fieldViolations!.map((v) => v.field),
    [field],
  );
}

/** Flips one character in the middle of a token (every middle base64url character carries 6 full bits). */
function tamper(token: string): string {
  const i = Math.floor(token.length / 2);
  return token.slice(0, i) + (token[i] === "A" ? "B" : "A") + token.slice(i + 1);
}

/**
 * Follows nextPageToken from the first page to the last, checking each page's
 * envelope, and returns every uid in the order received.
 */
async function walk(url: string, query: string, pageSize: number, want: { totalCount: number; skipped?: number }): Promise<string[]> {
  const uids: string[] = [];
  let token = "";
  for (let page = 1; ; page++) {
    assert.ok(page <= want.totalCount + 2, `page size ${pageSize}: the walk does not end`);
    const tokenParam = token === "" ? "" : `&page_token=${encodeURIComponent(token)}`;
    const res = await rest(url, "GET", `${LIST}?${query}&page_size=${pageSize}${tokenParam}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.totalCount, String(want.totalCount), `page size ${pageSize}, page ${page}: totalCount`);
    assert.equal(res.body.skipped, want.skipped ?? 0, `page size ${pageSize}, page ${page}: skipped`);
    const groups = res.body.groups as GroupJson[];
    assert.ok(groups.length <= pageSize, `page size ${pageSize}, page ${page}: too many groups`);
    uids.push(...groups.map((g) => g.uid));
    if (!("nextPageToken" in res.body)) break;
    assert.equal(typeof res.body.nextPageToken, "string");
    assert.notEqual(res.body.nextPageToken, "");
    assert.equal(groups.length, pageSize, `page size ${pageSize}, page ${page}: a page with a next token is full`);
    token = res.body.nextPageToken;
  }
  return uids;
}

describe("paging over REST: one organization with duplicated names and equal times", () => {
  let srv: TestServer;
  let clock = Date.UTC(2025, 5, 1, 12, 0, 0);
  let root: GroupJson;
  let descendants: GroupJson[];
  let N: number;

  before(async () => {
    srv = await startTestServer({ now: () => clock });
    // Clock steps of 0 make equal create times, so created_at needs the uid tie-break.
    const steps = [0, 1, 0, 0, 2];
    let i = 0;
    const tick = () => {
      clock += steps[i++ % steps.length]!;
    };
    root = await createGroup(srv.url, null, "acme");
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
    descendants = created;
    N = descendants.length;
    assert.equal(N, 29);
  });
  after(async () => {
    await srv.close();
  });

  const scope = () => `uidp.descendants_of=${root.uid}`;

  for (const field of ORDER_FIELDS) {
    for (const desc of [false, true]) {
      const orderBy = desc ? `${field}%20desc` : field;
      test(`order_by=${orderBy}: every page size from 1 to N+1 walks the full list`, async () => {
        const full = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=200&order_by=${orderBy}`);
        assert.equal(full.status, 200, JSON.stringify(full.body));
        assert.equal(full.body.totalCount, String(N));
        assert.equal("nextPageToken" in full.body, false);
        const fullUids = (full.body.groups as GroupJson[]).map((g) => g.uid);
        assert.deepEqual(fullUids, expectedOrder(descendants, field, desc));
        for (let k = 1; k <= N + 1; k++) {
          const walked = await walk(srv.url, `${scope()}&order_by=${orderBy}`, k, { totalCount: N });
          assert.deepEqual(walked, fullUids, `page size ${k}: no gaps, no duplicates`);
          assert.equal(new Set(walked).size, N);
        }
      });
    }
  }

  test("order_by with '+' for the space: created_at+desc walks newest first", async () => {
    const expected = expectedOrder(descendants, "created_at", true);
    for (let k = 1; k <= N + 1; k++) {
      assert.deepEqual(await walk(srv.url, `${scope()}&order_by=created_at+desc`, k, { totalCount: N }), expected);
    }
    const upper = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=200&order_by=name+desc`);
    assert.deepEqual(
      (upper.body.groups as GroupJson[]).map((g) => g.uid),
      expectedOrder(descendants, "name", true),
    );
  });

  test("the default order is uid", async () => {
    const res = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=200`);
    assert.deepEqual(
      (res.body.groups as GroupJson[]).map((g) => g.uid),
      expectedOrder(descendants, "uid", false),
    );
    assert.deepEqual(await walk(srv.url, scope(), 4, { totalCount: N }), expectedOrder(descendants, "uid", false));
  });

  test("totalCount counts only the groups matching the name filter", async () => {
    const svc = descendants.filter((g) => g.name === "svc");
    assert.equal(svc.length, 12);
    const walked = await walk(srv.url, `${scope()}&name=svc&order_by=created_at%20desc`, 5, { totalCount: svc.length });
    assert.deepEqual(walked, expectedOrder(svc, "created_at", true));
    // The other organization's "team" is outside descendants_of.
    const team = await rest(srv.url, "GET", `${LIST}?${scope()}&name=team&page_size=200`);
    assert.equal(team.body.totalCount, "3");
    assert.deepEqual(
      (team.body.groups as GroupJson[]).map((g) => g.name),
      ["team", "team", "team"],
    );
    const none = await rest(srv.url, "GET", `${LIST}?${scope()}&name=tea`);
    assert.equal(none.status, 200);
    assert.deepEqual(none.body.groups, []);
    assert.equal(none.body.totalCount, "0");
    assert.equal("nextPageToken" in none.body, false);
  });

  test("skip=3 omits the first three results and reports skipped", async () => {
    const expected = expectedOrder(descendants, "name", false);
    const res = await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=name&skip=3&page_size=5`);
    assert.equal(res.status, 200);
    assert.deepEqual(
      (res.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(3, 8),
    );
    assert.equal(res.body.skipped, 3);
    assert.equal(res.body.totalCount, String(N));
  });

  test("skip on the first page only: following tokens continues without gaps and keeps skipped", async () => {
    const expected = expectedOrder(descendants, "updated_at", true);
    const uids: string[] = [];
    let token = "";
    let first = true;
    for (;;) {
      const params = first ? "&skip=3" : `&page_token=${encodeURIComponent(token)}`;
      const res = await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=updated_at%20desc&page_size=4${params}`);
      assert.equal(res.status, 200);
      assert.equal(res.body.skipped, 3);
      assert.equal(res.body.totalCount, String(N));
      uids.push(...(res.body.groups as GroupJson[]).map((g) => g.uid));
      if (!("nextPageToken" in res.body)) break;
      token = res.body.nextPageToken;
      first = false;
    }
    assert.deepEqual(uids, expected.slice(3));
  });

  test("repeating the same skip with every token (clients repeat every parameter) never loses results", async () => {
    const expected = expectedOrder(descendants, "name", false);
    const uids: string[] = [];
    let token = "";
    for (;;) {
      const params = token === "" ? "" : `&page_token=${encodeURIComponent(token)}`;
      const res = await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=name&page_size=4&skip=3${params}`);
      assert.equal(res.status, 200);
      assert.equal(res.body.skipped, 3);
      uids.push(...(res.body.groups as GroupJson[]).map((g) => g.uid));
      if (!("nextPageToken" in res.body)) break;
      token = res.body.nextPageToken;
    }
    assert.deepEqual(uids, expected.slice(3));
  });

  test("skip with a page token skips from the token's position and accumulates skipped", async () => {
    const expected = expectedOrder(descendants, "uid", false);
    const page1 = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=5&skip=3`);
    assert.deepEqual(
      (page1.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(3, 8),
    );
    assert.equal(page1.body.skipped, 3);
    const page2 = await rest(
      srv.url,
      "GET",
      `${LIST}?${scope()}&page_size=5&skip=2&page_token=${encodeURIComponent(page1.body.nextPageToken)}`,
    );
    assert.equal(page2.status, 200, JSON.stringify(page2.body));
    assert.deepEqual(
      (page2.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(10, 15),
    );
    assert.equal(page2.body.skipped, 5);
    assert.equal(page2.body.totalCount, String(N));
  });

  test("skip=2147483647 returns an empty last page", async () => {
    const res = await rest(srv.url, "GET", `${LIST}?${scope()}&skip=2147483647`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.groups, []);
    assert.equal("nextPageToken" in res.body, false);
    assert.equal(res.body.skipped, 2147483647);
    assert.equal(res.body.totalCount, String(N));
  });

  test("negative page_size and skip are invalid arguments", async () => {
    assertInvalidArgument(await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=-1`), "page_size");
    assertInvalidArgument(await rest(srv.url, "GET", `${LIST}?${scope()}&skip=-1`), "skip");
  });

  test("an order_by that is not a sortable field and direction is an invalid argument", async () => {
    for (const orderBy of ["description", "name%20sideways", "createTime", "name%20desc%20asc", "uid,name"]) {
      assertInvalidArgument(await rest(srv.url, "GET", `${LIST}?${scope()}&order_by=${orderBy}`), "order_by");
    }
  });

  test("a tampered page token is an invalid argument", async () => {
    const first = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3`);
    const token = first.body.nextPageToken as string;
    assert.ok(token);
    const res = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3&page_token=${encodeURIComponent(tamper(token))}`);
    assertInvalidArgument(res, "page_token");
    assertInvalidArgument(await rest(srv.url, "GET", `${LIST}?${scope()}&page_token=not-a-token`), "page_token");
  });

  test("a page token reused with another filter or another order_by is an invalid argument", async () => {
    const first = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3&order_by=name`);
    const token = encodeURIComponent(first.body.nextPageToken as string);
    const child = descendants[0]!.uid;
    const control = await rest(srv.url, "GET", `${LIST}?${scope()}&page_size=3&order_by=name&page_token=${token}`);
    assert.equal(control.status, 200);
    assert.deepEqual(
      (control.body.groups as GroupJson[]).map((g) => g.uid),
      expectedOrder(descendants, "name", false).slice(3, 6),
    );
    for (const query of [
      `uidp.descendants_of=${child}&order_by=name`,
      `uidp.children_of=${root.uid}&order_by=name`,
      `${scope()}&name=svc&order_by=name`,
      `order_by=name`,
      `${scope()}&order_by=name%20desc`,
      `${scope()}&order_by=uid`,
      scope(),
    ]) {
      assertInvalidArgument(await rest(srv.url, "GET", `${LIST}?${query}&page_size=3&page_token=${token}`), "page_token");
    }
  });
});

describe("paging over REST: page size limits", () => {
  let srv: TestServer;
  let root: GroupJson;
  const COUNT = 205;

  before(async () => {
    srv = await startTestServer();
    root = await createGroup(srv.url, null, "big org");
    for (let i = 0; i < COUNT; i += 25) {
      const batch = [];
      for (let j = i; j < Math.min(i + 25, COUNT); j++) batch.push(createGroup(srv.url, root.uid, `team ${j % 7}`));
      await Promise.all(batch);
    }
  });
  after(async () => {
    await srv.close();
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
  let srv: TestServer;
  let clock = Date.UTC(2025, 0, 1, 0, 0, 0);
  let root: GroupJson;
  let expected: string[];

  before(async () => {
    srv = await startTestServer({ now: () => clock });
    refreshToken = async () => setDefaultToken(srv.port, await mintAdminToken(srv.server));
    root = await createGroup(srv.url, null, "time org");
    const kids: GroupJson[] = [];
    for (let i = 0; i < 7; i++) kids.push(await createGroup(srv.url, root.uid, `kid ${i % 3}`));
    expected = expectedOrder(kids, "uid", false);
  });
  after(async () => {
    await srv.close();
  });

  test("a token younger than 3 days continues; older than 3 days restarts from the beginning", async () => {
    const path = `${LIST}?uidp.descendants_of=${root.uid}&page_size=3`;
    const first = await rest(srv.url, "GET", path);
    assert.deepEqual(
      (first.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(0, 3),
    );
    const token = encodeURIComponent(first.body.nextPageToken as string);

    clock += 3 * DAY_MS - 1_000;

    await refreshToken();
    const fresh = await rest(srv.url, "GET", `${path}&page_token=${token}`);
    assert.equal(fresh.status, 200);
    assert.deepEqual(
      (fresh.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(3, 6),
    );

    clock += 2_000;
    const stale = await rest(srv.url, "GET", `${path}&page_token=${token}`);
    assert.equal(stale.status, 200, JSON.stringify(stale.body));
    assert.deepEqual(
      (stale.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(0, 3),
    );
    assert.equal(stale.body.totalCount, "7");
    assert.equal(stale.body.skipped, 0);

    // The restarted walk's own token is fresh and continues normally.
    const next = await rest(srv.url, "GET", `${path}&page_token=${encodeURIComponent(stale.body.nextPageToken)}`);
    assert.deepEqual(
      (next.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(3, 6),
    );
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
    assert.deepEqual(
      (stale.body.groups as GroupJson[]).map((g) => g.uid),
      expected.slice(0, 2),
    );
  });
});
