import type { FeedPosition } from "../domain/events.js";
import { EVERYWHERE } from "./event-store.js";
import type { ListQuery, ListResult, Store, StoreParts } from "./store.js";

/**
 * What migrate-to-postgres (copy.ts) needs of each part: the `copy` of its
 * STORE_PARTS row (parts.ts) is a CopyStep, and the steps too long to sit in
 * a row are here. Nothing here knows an engine.
 */

/** Copies every record of one kind, counted under `kind`: listed from the source, written by write (SKIPPED when it left one alone). */
export type CopyAll = <T extends { uid: string }, TFilter>(
  kind: string,
  list: (q: ListQuery<TFilter, "uid">) => Promise<ListResult<T>>,
  filter: TFilter,
  write: (record: T) => Promise<unknown>,
) => Promise<void>;

/** How one part's records are copied from a store into another's transaction, through copyAll (which counts them). */
export type CopyStep = (from: Store, tx: StoreParts, copyAll: CopyAll) => Promise<void>;

/** The parts copy.ts copies itself, after every other part's step: the signing keys and the server's secrets. */
export type CopiedByHand = "keys";

/** A part whose records are written to the target as they are listed from the source, one create each. */
interface CreatedAsListed<R> {
  list(query: ListQuery<object, "uid">): Promise<ListResult<R>>;
  create(record: R): Promise<unknown>;
}

/** The step of most parts: every record listed from the source's part (of) and created as it is in the target's, counted under kind. */
export function createEach<R extends { uid: string }>(kind: string, of: (parts: StoreParts) => CreatedAsListed<R>): CopyStep {
  return (from, tx, copyAll) =>
    copyAll(
      kind,
      (q) => of(from).list(q),
      {},
      (record) => of(tx).create(record),
    );
}

/** What a copy function returns for a record it left alone. */
export const SKIPPED = Symbol("skipped");

/** A list's answer for records read a page at a time by a key (limit of them: maybe more). */
function page<T>(items: T[], limit: number): ListResult<T> {
  return { items, hasMore: items.length === limit, totalCount: 0 };
}

/**
 * The tags, then what the registry's notifications left: the time each tag was set at in the registry, and the
 * digests deleted from each repo, so a late notification is decided in the copy as it would have been in the source.
 */
export const copyTags: CopyStep = async (from, tx, copyAll) => {
  await copyAll(
    "tags",
    (q) => from.tags.list(q),
    { includeReferrers: true, includeDates: true, includeEpochs: true },
    (t) => tx.tags.put(t),
  );
  await copyAll(
    "tag registry times",
    async (q) =>
      page(
        (await from.tags.registrySourceTimes(q.after?.uid ?? "", q.limit)).map((t) => ({ ...t, uid: t.tagUid })),
        q.limit,
      ),
    {},
    ({ tagUid, timeUs }) => tx.tags.restoreRegistryMemory({ sourceTimes: [{ tagUid, timeUs }], deletedDigests: [] }),
  );
  await copyAll(
    "deleted digests",
    async (q) => {
      const [repoUid = "", digest = ""] = q.after?.uid.split(" ") ?? [];
      const rows = await from.tags.deletedDigests(q.after && { repoUid, digest }, q.limit);
      return page(
        rows.map((d) => ({ ...d, uid: `${d.repoUid} ${d.digest}` })),
        q.limit,
      );
    },
    {},
    ({ repoUid, digest, timeUs }) => tx.tags.restoreRegistryMemory({ sourceTimes: [], deletedDigests: [{ repoUid, digest, timeUs }] }),
  );
};

/** The feed, in feed order, in the one transaction: the copies keep their order (one txid, rising seqs) and their ids. */
export const copyEvents: CopyStep = (from, tx, copyAll) => {
  const positions = new Map<string, FeedPosition>();
  return copyAll(
    "events",
    async (q) => {
      const after = q.after === null ? null : (positions.get(q.after.uid) ?? null);
      const read = await from.events.read({ after, typePrefix: "", hierarchy: {}, visible: EVERYWHERE, limit: q.limit });
      positions.clear();
      for (const e of read.events) positions.set(e.id, e.position);
      return page(
        read.events.map((e) => ({ ...e, uid: e.id })),
        q.limit,
      );
    },
    {},
    ({ id, kind, type, subject, groupUid, time, data }) => tx.events.append([{ id, kind, type, subject, groupUid, time, data }]),
  );
};
