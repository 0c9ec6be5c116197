import { decorateParts, READ_METHODS, type PartMethod } from "./decorate.js";
import { QueryCache } from "./query-cache.js";
import { signalIn } from "./signal.js";
import type { ListQuery, ListResult, Store, StoreParts } from "./store.js";
import { VERSIONED_TABLES, zeroVersions, type TableVersions, type VersionedTable } from "./versions.js";

/** The table each part's reads (READ_METHODS) answer from; their answers are cached. */
const PART_TABLE: { readonly [P in keyof StoreParts]?: VersionedTable } = {
  groups: "groups",
  identities: "identities",
  roles: "roles",
  roleBindings: "role_bindings",
  identityProviders: "identity_providers",
  accountAssociations: "account_associations",
  groupInvites: "group_invites",
  repos: "repos",
  tags: "tags",
  advisories: "advisories",
};

/** Budgets of the caches: answers by bytes of their JSON text, counts by number. */
export interface CacheLimits {
  answerBytes: number;
  counts: number;
}

const DEFAULT_LIMITS: CacheLimits = { answerBytes: 16 * 1024 * 1024, counts: 4096 };

/** A CachingStore's view of its caches, for tests and metrics. */
export interface CacheStats {
  answers: QueryCache<unknown>;
  counts: QueryCache<number>;
}

/**
 * Reads answered from memory while their table is unchanged, on any engine
 * and in any number of processes. Every entry is keyed by the version of the
 * table it was read from, as known before the read (so newer data may sit
 * under an older version, never older data under a newer one). The versions
 * are read from the database by refresh(), once per request, and again after
 * each of this process's own writes: a write acknowledged by any process is
 * seen by the next request to every process, with no time-based staleness.
 * A list's total count is kept on its own, so walking the pages of a large
 * list counts once. Answers are frozen: every caller shares them.
 */
export function createCachingStore(inner: Store, limits: CacheLimits = DEFAULT_LIMITS): Store & { cacheStats: CacheStats } {
  const known: Record<VersionedTable, number> = zeroVersions();
  // Moves when this process could not learn what its own write changed (the
  // database went away right after it): every entry becomes unreachable.
  let epoch = 0;
  const answers = new QueryCache<unknown>(limits.answerBytes);
  const counts = new QueryCache<number>(limits.counts);

  const absorb = (versions: TableVersions) => {
    for (const t of VERSIONED_TABLES) if (versions[t] > known[t]) known[t] = versions[t];
  };
  const version = (tables: readonly VersionedTable[]) => {
    let sum = epoch;
    for (const t of tables) sum += known[t];
    return sum;
  };
  /** After a write of this process: learn the versions it moved (cascades included). */
  const afterWrite = async () => {
    try {
      absorb(await inner.readVersions());
    } catch {
      epoch++;
    }
  };

  const cachedRead = (part: string, method: string, table: VersionedTable, original: PartMethod): PartMethod => {
    const prefix = `${part}.${method}\u0000`;
    const tables = [table];
    return async (...args) => {
      // The call's signal is not part of the question.
      const question = signalIn(args) ? args.slice(0, -1) : args;
      const key = `${prefix}${version(tables)}\u0000${JSON.stringify(question)}`;
      const hit = answers.get(key);
      if (hit !== undefined) return hit;
      let answer: unknown;
      if (method === "list") {
        const query = args[0] as ListQuery<unknown, string>;
        const countKey = `${prefix}${version(tables)}\u0000${JSON.stringify([query.hierarchy, query.filter, query.visibleWithin])}`;
        const knownTotal = counts.get(countKey);
        const result = (await original(knownTotal === undefined ? query : { ...query, knownTotal }, ...args.slice(1))) as ListResult<object>;
        if (knownTotal === undefined) counts.set(countKey, result.totalCount);
        answer = Object.freeze({ ...result, items: Object.freeze(result.items.map((item) => Object.freeze(item))) });
      } else {
        answer = freeze(await original(...args));
      }
      answers.set(key, answer, key.length + (JSON.stringify(answer)?.length ?? 4));
      return answer;
    };
  };

  const written = (original: PartMethod): PartMethod => async (...args) => {
    try {
      return await original(...args);
    } finally {
      await afterWrite();
    }
  };

  const parts = decorateParts(inner, (part, method, original) => {
    const table = PART_TABLE[part as keyof StoreParts];
    // keys: signing keys and secrets are read rarely, by their own holders.
    if (table === undefined) return part === "keys" && method === "addSigningKey" ? written(original) : original;
    return READ_METHODS.has(method) ? cachedRead(part, method, table, original) : written(original);
  });

  return {
    ...parts,
    readVersions: () => inner.readVersions(),
    version,
    async refresh() {
      await inner.refresh();
      absorb(await inner.readVersions());
    },
    // Reads inside a transaction go to the engine: what they see may roll back.
    async transaction(fn, signal) {
      try {
        return await inner.transaction(fn, signal);
      } finally {
        await afterWrite();
      }
    },
    ready: () => inner.ready(),
    close: () => inner.close(),
    cacheStats: { answers, counts },
  } satisfies Store & { cacheStats: CacheStats };
}

/** An answer made shareable: a record, an array of records, or null. */
function freeze(value: unknown): unknown {
  if (Array.isArray(value)) {
    for (const item of value) Object.freeze(item);
    return Object.freeze(value);
  }
  return value === null || typeof value !== "object" ? value : Object.freeze(value);
}
