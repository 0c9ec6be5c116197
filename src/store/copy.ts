import { randomBytes } from "node:crypto";
import { FailedPreconditionError, type PreconditionViolation } from "../domain/errors.js";
import type { FeedPosition } from "../domain/events.js";
import { nulFieldOf } from "../domain/text-rules.js";
import { EVERYWHERE } from "./event-store.js";
import type { ListQuery, ListResult, PartName, Store, StoreParts } from "./store.js";

/** Records read from the source per page. */
const PAGE = 500;
/** Unstorable rows named at most in the refusal; the rest are counted. */
const MAX_NAMED_ROWS = 20;

/** Every record of one kind, in uid order (a parent's uid sorts before its children's). */
async function* everything<T extends { uid: string }, TFilter>(
  list: (q: ListQuery<TFilter, "uid">) => Promise<ListResult<T>>,
  filter: TFilter,
): AsyncGenerator<T> {
  let after: { key: string; uid: string } | null = null;
  for (;;) {
    const page = await list({
      hierarchy: {},
      filter,
      order: { field: "uid", desc: false },
      after,
      offset: 0,
      limit: PAGE,
      visibleWithin: null,
    });
    yield* page.items;
    const last = page.items[page.items.length - 1];
    if (!page.hasMore || last === undefined) return;
    after = { key: last.uid, uid: last.uid };
  }
}

/** Copies every record of one kind, counted under `kind`: listed from the source, written by write (SKIPPED when it left one alone). */
type CopyAll = <T extends { uid: string }, TFilter>(
  kind: string,
  list: (q: ListQuery<TFilter, "uid">) => Promise<ListResult<T>>,
  filter: TFilter,
  write: (record: T) => Promise<unknown>,
) => Promise<void>;

/** The parts copied record by record: every part but keys (the signing keys and secrets, copied on their own). */
type ListedPart = Exclude<PartName, "keys">;

/**
 * How each part's records are copied, in the order they are written (a
 * record's group, role or repo before it). Typed over every part but keys,
 * so a new part is a type error here until it says how it is copied.
 */
const COPY_STEPS: { readonly [P in ListedPart]: (from: Store, tx: StoreParts, copyAll: CopyAll) => Promise<void> } = {
  groups: (from, tx, copyAll) =>
    copyAll(
      "groups",
      (q) => from.groups.list(q),
      {},
      (g) => tx.groups.create(g),
    ),
  // Built-in roles have the same uid everywhere: the target's own are kept.
  roles: (from, tx, copyAll) =>
    copyAll(
      "roles",
      (q) => from.roles.list(q),
      {},
      async (r) => ((await tx.roles.get(r.uid)) ? SKIPPED : tx.roles.create(r)),
    ),
  identities: (from, tx, copyAll) =>
    copyAll(
      "identities",
      (q) => from.identities.list(q),
      {},
      (i) => tx.identities.create(i),
    ),
  roleBindings: (from, tx, copyAll) =>
    copyAll(
      "role bindings",
      (q) => from.roleBindings.list(q),
      {},
      (b) => tx.roleBindings.create([b]),
    ),
  identityProviders: (from, tx, copyAll) =>
    copyAll(
      "identity providers",
      (q) => from.identityProviders.list(q),
      {},
      (p) => tx.identityProviders.create(p),
    ),
  accountAssociations: (from, tx, copyAll) =>
    copyAll(
      "account associations",
      (q) => from.accountAssociations.list(q),
      {},
      (a) => tx.accountAssociations.create(a),
    ),
  groupInvites: (from, tx, copyAll) =>
    copyAll(
      "group invites",
      (q) => from.groupInvites.list(q),
      {},
      (i) => tx.groupInvites.create(i),
    ),
  repos: (from, tx, copyAll) =>
    copyAll(
      "repos",
      (q) => from.repos.list(q),
      {},
      (r) => tx.repos.create(r),
    ),
  // Then what the registry's notifications left: the time each tag was set at in the registry, and the digests
  // deleted from each repo, so a late notification is decided in the copy as it would have been in the source.
  tags: async (from, tx, copyAll) => {
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
  },
  advisories: (from, tx, copyAll) =>
    copyAll(
      "advisories",
      (q) => from.advisories.list(q),
      {},
      (a) => tx.advisories.upsert([a]),
    ),
  // Last, in feed order, in the one transaction: the copies keep their order (one txid, rising seqs) and their ids.
  events: (from, tx, copyAll) => {
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
  },
  // With their secrets and creators. Feed positions differ between engines, so each copy's delivery starts with
  // the events written after the copy: run migrate-to-postgres with the servers stopped and delivered up.
  subscriptions: (from, tx, copyAll) => {
    const copiedAt = Date.now();
    return copyAll(
      "subscriptions",
      (q) => from.subscriptions.list(q),
      {},
      (s) => tx.subscriptions.create(s, copiedAt),
    );
  },
  // Delivery state (cursors, retries, leases) and logs are the source's own: created afresh with each subscription.
  deliveries: async () => {},
  // Sign-ins in progress last minutes, and sessions are not carried to another engine: people sign in again.
  signInFlows: async () => {},
  refreshTokens: async () => {},
};

/** How many records of each kind were copied. */
export type CopyCounts = Record<string, number>;

/**
 * Copies everything one store holds into another, empty one (another
 * engine, typically: SQLite into PostgreSQL), in one transaction of the
 * target: groups, roles, identities, role bindings, identity providers,
 * account associations, invites, repos, tags (with their registry times and the
 * deleted digests remembered), advisories, the event feed,
 * subscriptions, the signing keys and the server's secrets (not the feed
 * cursors' key: the engines' feed positions differ, so a cursor of the source
 * must not decode to a position in the target), with their uids and times.
 * Delivery state starts afresh with each subscription; sign-ins in progress and refresh tokens are not copied
 * (people sign in again). Built-in roles the
 * target already has are kept. Refuses a target that holds any group or
 * identity (FAILED_PRECONDITION), so nothing is ever merged by accident.
 * Refuses a source with text PostgreSQL cannot store (a NUL, which SQLite
 * keeps) the same way, after reading everything: one violation per bad row
 * naming its table, uid and field, so the operator can fix them all at once.
 */
export async function copyStore(from: Store, to: Store): Promise<CopyCounts> {
  const probe = {
    hierarchy: {},
    filter: {},
    order: { field: "uid" as const, desc: false },
    after: null,
    offset: 0,
    limit: 1,
    visibleWithin: null,
  };
  if ((await to.groups.list(probe)).totalCount > 0 || (await to.identities.list(probe)).totalCount > 0) {
    throw new FailedPreconditionError([
      { type: "TARGET_NOT_EMPTY", subject: "target", description: "the target store already holds groups or identities" },
    ]);
  }
  const counts: CopyCounts = {};
  const unstorable: PreconditionViolation[] = [];
  let unstorableRows = 0;
  const copyAll: CopyAll = async (kind, list, filter, write) => {
    counts[kind] = 0;
    const table = kind.replaceAll(" ", "_");
    for await (const record of everything(list, filter)) {
      const field = nulFieldOf(record);
      if (field !== null) {
        if (unstorableRows++ < MAX_NAMED_ROWS) unstorable.push(unstorableRow(table, record.uid, field));
        continue;
      }
      if ((await write(record)) !== SKIPPED) counts[kind]++;
    }
  };
  const keys = await from.keys.signingKeys();
  // A source that never served has no secrets yet: they are made as a first start would make them.
  const secrets = [
    ["page-token-key", await from.keys.secret("page-token-key", () => randomBytes(32))],
    ["admin-subject", await from.keys.secret("admin-subject", () => randomBytes(20))],
  ] as const;
  await to.transaction(async (tx: StoreParts) => {
    for (const step of Object.values(COPY_STEPS)) await step(from, tx, copyAll);
    if (unstorableRows > MAX_NAMED_ROWS) {
      unstorable.push({
        type: "UNSTORABLE_TEXT",
        subject: "source",
        description: `and ${unstorableRows - MAX_NAMED_ROWS} more rows holding a NUL character`,
      });
    }
    // Thrown inside the transaction: it rolls back, and nothing was copied.
    if (unstorable.length > 0) throw new FailedPreconditionError(unstorable);
    const existing = new Set((await tx.keys.signingKeys()).map((k) => k.kid));
    counts["signing keys"] = 0;
    for (const key of keys) {
      if (existing.has(key.kid)) continue;
      await tx.keys.addSigningKey(key);
      counts["signing keys"]++;
    }
    for (const [name, value] of secrets) {
      const kept = await tx.keys.secret(name, () => value);
      if (!kept.equals(value)) {
        throw new FailedPreconditionError([
          {
            type: "TARGET_NOT_EMPTY",
            subject: name,
            description: `the target already has its own ${name} (a server ran on it): migrate into a fresh database`,
          },
        ]);
      }
    }
  });
  return counts;
}

/** A source row PostgreSQL cannot take, named for the operator to fix in SQLite. */
function unstorableRow(table: string, uid: string, field: string): PreconditionViolation {
  return {
    type: "UNSTORABLE_TEXT",
    subject: `${table}/${uid}`,
    description: `${table} row ${uid}: field ${field} holds a NUL character (U+0000), which PostgreSQL cannot store; fix or delete it in SQLite`,
  };
}

/** A list's answer for records read a page at a time by a key (limit of them: maybe more). */
function page<T>(items: T[], limit: number): ListResult<T> {
  return { items, hasMore: items.length === limit, totalCount: 0 };
}

/** What a copy function returns for a record it left alone. */
const SKIPPED = Symbol("skipped");
