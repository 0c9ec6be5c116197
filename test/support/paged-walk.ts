import assert from "node:assert/strict";
import { rest } from "./server.js";

/** What a List item exposes for ordering, as a user reads it from the JSON. */
export interface Sortable {
  uid: string;
  name?: string;
  createTime?: string;
  updateTime?: string;
  expirationTime?: string;
  advisoryId?: string;
}

/** The key an item sorts by for an order_by field. */
function sortKey(item: Sortable, field: string): string | number {
  if (field === "name") return item.name ?? "";
  if (field === "advisory_id") return item.advisoryId ?? "";
  if (field === "created_at") return Date.parse(item.createTime!);
  if (field === "updated_at") return Date.parse(item.updateTime!);
  if (field === "expiration_time") return Date.parse(item.expirationTime!);
  return item.uid;
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** The order the server must return: by the field, ties by uid; desc reverses the whole order. */
export function expectedOrder(items: readonly Sortable[], field: string, desc: boolean): string[] {
  const asc = [...items].sort((x, y) => {
    const kx = sortKey(x, field);
    const ky = sortKey(y, field);
    const byKey = typeof kx === "number" && typeof ky === "number" ? kx - ky : compareText(String(kx), String(ky));
    return byKey !== 0 ? byKey : compareText(x.uid, y.uid);
  });
  const uids = asc.map((i) => i.uid);
  return desc ? uids.reverse() : uids;
}

/**
 * Follows nextPageToken from the first page to the last of a List at one page
 * size, checking each page's envelope, and returns every uid in order.
 */
export async function walkPages(
  url: string,
  path: string,
  itemsKey: string,
  query: string,
  pageSize: number,
  totalCount: number,
): Promise<string[]> {
  const uids: string[] = [];
  let token = "";
  for (let page = 1; ; page++) {
    assert.ok(page <= totalCount + 2, `page size ${pageSize}: the walk does not end`);
    const tokenParam = token === "" ? "" : `&page_token=${encodeURIComponent(token)}`;
    const res = await rest(url, "GET", `${path}?${query}&page_size=${pageSize}${tokenParam}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.totalCount, String(totalCount), `page size ${pageSize}, page ${page}: totalCount`);
    assert.equal(res.body.skipped, 0);
    const items = res.body[itemsKey] as Sortable[];
    assert.ok(items.length <= pageSize, `page size ${pageSize}, page ${page}: too many items`);
    uids.push(...items.map((i) => i.uid));
    if (!("nextPageToken" in res.body)) break;
    assert.notEqual(res.body.nextPageToken, "");
    assert.equal(items.length, pageSize, `page size ${pageSize}, page ${page}: a page with a next token is full`);
    token = res.body.nextPageToken;
  }
  return uids;
}

/**
 * The paged walk every List must pass: for each order field, ascending and
 * descending, the full list is in the expected order on one page, and every
 * page size from 1 to N+1 walks exactly that list.
 */
export async function assertPagedWalks(
  url: string,
  path: string,
  itemsKey: string,
  query: string,
  items: readonly Sortable[],
  orderFields: readonly string[],
): Promise<void> {
  for (const field of orderFields) {
    for (const desc of [false, true]) {
      const want = expectedOrder(items, field, desc);
      const order = encodeURIComponent(desc ? `${field} desc` : field);
      const full = await rest(url, "GET", `${path}?${query}&order_by=${order}&page_size=200`);
      assert.equal(full.status, 200, JSON.stringify(full.body));
      assert.equal(full.body.totalCount, String(items.length));
      assert.equal("nextPageToken" in full.body, false, "one page of 200 holds them all");
      assert.deepEqual(
        (full.body[itemsKey] as Sortable[]).map((i) => i.uid),
        want,
        `full list by ${field}${desc ? " desc" : ""}`,
      );
      for (let size = 1; size <= items.length + 1; size++) {
        const got = await walkPages(url, path, itemsKey, `${query}&order_by=${order}`, size, items.length);
        assert.deepEqual(got, want, `order ${field}${desc ? " desc" : ""}, page size ${size}`);
      }
    }
  }
}
