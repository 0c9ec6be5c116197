import { randomBytes } from "node:crypto";
import { FailedPreconditionError, type PreconditionViolation } from "../domain/errors.js";
import { nulFieldOf } from "../domain/text-rules.js";
import { SKIPPED, type CopyAll } from "./copy-steps.js";
import { PART_NAMES, STORE_PARTS } from "./parts.js";
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

/**
 * The parts in the order their records are copied, each by the `copy` of its
 * STORE_PARTS row (parts.ts): STORE_PARTS' order (a record's group, role or
 * repo before it), but roles before identities, the order migrate-to-postgres
 * has always copied and counted them in.
 */
const COPY_ORDER: readonly PartName[] = ["groups", "roles", ...PART_NAMES.filter((name) => name !== "groups" && name !== "roles")];

/** How many records of each kind were copied. */
export type CopyCounts = Record<string, number>;

/**
 * Copies everything one store holds into another, empty one (another
 * engine, typically: SQLite into PostgreSQL), in one transaction of the
 * target: every part by its STORE_PARTS row's `copy` (tags with their
 * registry times and the deleted digests remembered; the event feed), with
 * their uids and times, and the signing keys and the server's secrets by
 * hand (not the feed cursors' key: the engines' feed positions differ, so a
 * cursor of the source must not decode to a position in the target).
 * Delivery state starts afresh with each subscription; sign-ins in progress
 * and refresh tokens are not copied (people sign in again). Built-in roles
 * the target already has are kept. Refuses a target that holds any group or
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
    for (const name of COPY_ORDER) {
      const { copy } = STORE_PARTS[name];
      // "by hand": the keys, below; null: not copied.
      if (typeof copy === "function") await copy(from, tx, copyAll);
    }
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
