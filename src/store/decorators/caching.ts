import { ownParts, STORE_PARTS } from "../parts.js";
import { splitSignal } from "../signal.js";
import type { ListQuery, ListResult, Store, StoreParts } from "../store.js";
import { VERSIONED_TABLES, zeroVersions, type TableVersions, type VersionedTable } from "../versions.js";
import { decorateParts, type PartMethod } from "./decorate.js";
import { QueryCache } from "./query-cache.js";

/** Budgets of the caches: answers by bytes of their JSON text, counts by number. */
export interface CacheLimits {
  answerBytes: number;
  counts: number;
}

export const DEFAULT_CACHE_LIMITS: CacheLimits = { answerBytes: 16 * 1024 * 1024, counts: 4096 };

/** A CachingStore's view of its caches, for tests and metrics. */
export interface CacheStats {
  answers: QueryCache<unknown>;
  counts: QueryCache<number>;
}

/** The caches of store when it is a CachingStore (undefined for any other store), for metrics. */
export function cacheStatsOf(store: Store): CacheStats | undefined {
  return (store as Store & { cacheStats?: CacheStats }).cacheStats;
}

/**
 * Reads answered from memory while their table is unchanged, on any engine
 * and in any number of processes. Every entry is keyed by the version of the
 * table it was read from, as known before the read (so newer data may sit
 * under an older version, never older data under a newer one). The versions
 * are read from the database by refresh(), once per request (one read serves
 * the requests of one event-loop turn), and again after
 * each of this process's own writes: a write acknowledged by any process is
 * seen by the next request to every process, with no time-based staleness.
 * A list's total count is kept on its own, so walking the pages of a large
 * list counts once. Answers are frozen: every caller shares them.
 */
export function createCachingStore(inner: Store, limits: CacheLimits = DEFAULT_CACHE_LIMITS): Store & { cacheStats: CacheStats } {
  const known: Record<VersionedTable, number> = zeroVersions();
  // Moves when this process could not learn what its own write changed (the
  // database went away right after it): every entry becomes unreachable.
  let epoch = 0;
  const answers = new QueryCache<unknown>(limits.answerBytes);
  const counts = new QueryCache<number>(limits.counts);

  // The store's connection losses as last seen: when they move, the database answering may be another one.
  const losses = () => inner.connectionLosses?.() ?? 0;
  let seenLosses = losses();
  /**
   * Forgets every entry and the versions known, and keeps keys moving forward:
   * a database met after a lost connection (a standby promoted by a failover,
   * a restored backup) may count its versions from below what this process
   * knew, and a key reused with older numbers could find an entry read
   * before the switch. The epoch jumps past every key handed out so far.
   */
  const startOver = () => {
    for (const t of VERSIONED_TABLES) {
      epoch += known[t];
      known[t] = 0;
    }
    epoch++;
  };
  /** Takes in versions read by a read begun at lossesBefore: not when a connection was lost since. */
  const absorb = (versions: TableVersions, lossesBefore: number) => {
    const now = losses();
    if (now !== seenLosses) {
      seenLosses = now;
      startOver();
    }
    // Read over a connection that may have gone to the database before the switch: not to be trusted.
    if (lossesBefore !== now) return;
    for (const t of VERSIONED_TABLES) if (versions[t] > known[t]) known[t] = versions[t];
  };
  /** The versions as read now, with the losses before the read (for absorb). */
  const readVersions = async (): Promise<[TableVersions, number]> => {
    const before = losses();
    return [await inner.readVersions(), before];
  };
  const version = (tables: readonly VersionedTable[]) => {
    let sum = epoch;
    for (const t of tables) sum += known[t];
    return sum;
  };
  /**
   * The versions after a write of this process (cascades included); when they
   * cannot be read (the database went away right after it), every entry is
   * forgotten instead.
   */
  const versionsAfterWrite = (): Promise<[TableVersions, number]> =>
    readVersions().catch(() => {
      epoch++;
      return [zeroVersions(), losses()];
    });
  const afterWrite = async () => absorb(...(await versionsAfterWrite()));
  const refreshNow = async () => {
    await inner.refresh();
    absorb(...(await readVersions()));
  };
  /**
   * The refresh every call that asked since the last one started will share:
   * it starts in the check phase of the event loop, after every request read
   * in this turn has asked for it, so it reads the versions after each of
   * those requests arrived, and a write acknowledged (by any process) before
   * a request was sent is seen by it, as with one read per request. A burst
   * of requests costs one read (PRAGMA data_version, or a round trip) instead
   * of one each.
   */
  let nextRefresh: Promise<void> | null = null;
  // A transaction and the versions after it: in the COMMIT's round trip where the engine can, else read after.
  const transactionThenVersions = async <T>(
    fn: (tx: StoreParts) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<[T, TableVersions, number]> => {
    const before = losses();
    if (inner.transactionThenVersions) return [...(await inner.transactionThenVersions(fn, signal)), before];
    const result = await inner.transaction(fn, signal);
    return [result, ...(await versionsAfterWrite())];
  };

  const cachedRead = (part: string, method: string, table: VersionedTable, original: PartMethod): PartMethod => {
    const prefix = `${part}.${method}\u0000`;
    const tables = [table];
    return async (...args) => {
      const at = `${prefix}${version(tables)}\u0000`;
      // The call's signal is not part of the question.
      const key = at + JSON.stringify(splitSignal(args).args);
      const hit = answers.get(key);
      if (hit !== undefined) return hit;
      let answer: unknown;
      if (method === "list") {
        const query = args[0] as ListQuery<unknown, string>;
        const countKey = at + JSON.stringify([query.hierarchy, query.filter, query.visibleWithin]);
        const knownTotal = counts.get(countKey);
        const result = (await original(
          knownTotal === undefined ? query : { ...query, knownTotal },
          ...args.slice(1),
        )) as ListResult<object>;
        if (knownTotal === undefined) counts.set(countKey, result.totalCount);
        answer = Object.freeze({ ...result, items: Object.freeze(result.items.map((item) => Object.freeze(item))) });
      } else {
        answer = freeze(await original(...args));
      }
      answers.set(key, answer, key.length + weightOf(answer));
      return answer;
    };
  };

  const written =
    (original: PartMethod): PartMethod =>
    async (...args) => {
      try {
        return await original(...args);
      } finally {
        await afterWrite();
      }
    };

  // Each part's reads are cached against its table (STORE_PARTS), unless it is declared uncached.
  const parts = decorateParts(inner, (part, method, original, kind) => {
    if (kind === "write") return written(original);
    const { table, cached } = STORE_PARTS[part];
    return cached && table !== null ? cachedRead(part, method, table, original) : original;
  });

  return {
    ...ownParts(parts),
    readVersions: () => inner.readVersions(),
    version,
    refresh() {
      nextRefresh ??= new Promise<void>((resolve, reject) =>
        setImmediate(() => {
          // Callers from now on wait for the next read: this one may have started before their request arrived.
          nextRefresh = null;
          refreshNow().then(resolve, reject);
        }),
      );
      return nextRefresh;
    },
    // Reads inside a transaction go to the engine: what they see may roll back.
    async transaction(fn, signal) {
      try {
        const [result, versions, lossesBefore] = await transactionThenVersions(fn, signal);
        absorb(versions, lossesBefore);
        return result;
      } catch (err) {
        // A failed transaction wrote nothing, unless the failure came after its COMMIT.
        await afterWrite();
        throw err;
      }
    },
    // A write like any other: the versions are read after it.
    ...(inner.insertWithEvents && {
      async insertWithEvents(write, events, signal) {
        try {
          return await inner.insertWithEvents!(write, events, signal);
        } finally {
          await afterWrite();
        }
      },
    }),
    ...(inner.poolStats && { poolStats: () => inner.poolStats!() }),
    ...(inner.connectionLosses && { connectionLosses: () => inner.connectionLosses!() }),
    ready: () => inner.ready(),
    describe: () => inner.describe(),
    close: () => inner.close(),
    cacheStats: { answers, counts },
  } satisfies Store & { cacheStats: CacheStats };
}

/**
 * About the bytes of an answer's JSON text, without writing it (a tenth of
 * the time JSON.stringify takes on a 50-record page).
 */
function weightOf(value: unknown): number {
  if (typeof value === "string") return value.length + 2;
  if (value === null || typeof value !== "object") return 8;
  let n = 2;
  if (Array.isArray(value)) for (const v of value) n += weightOf(v) + 1;
  else for (const k in value) n += k.length + weightOf((value as Record<string, unknown>)[k]) + 4;
  return n;
}

/** An answer made shareable: a record, an array of records, or null. */
function freeze(value: unknown): unknown {
  if (Array.isArray(value)) {
    for (const item of value) Object.freeze(item);
    return Object.freeze(value);
  }
  return value === null || typeof value !== "object" ? value : Object.freeze(value);
}
