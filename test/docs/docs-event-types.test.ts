/**
 * The pages that list event types list exactly the types the code emits, both ways: every type `eventType` makes
 * from `EVENT_KINDS` (src/domain/events.ts) with the actions each kind emits, and no other. The watch heartbeat's
 * type is documented but never stored: it may appear anywhere, and never counts as an event type. Any other
 * mention of a type, or of a type prefix (`api.platform.iam.`, `api.platform.registry.repo.*`), on any page must
 * name what the code emits.
 */
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { EVENT_KINDS, eventType, type EventAction, type EventKind } from "../../src/domain/events.js";
import { WATCH_HEARTBEAT_TYPE } from "../../src/services/events/feed-view.js";
import { readPage } from "../support/markdown.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/**
 * The actions each kind emits (where: the `withEvents`/`insertWithEvents` calls of its service, and
 * src/registry/notifications-catalogue.ts for repos and tags). The compiler makes a new kind of EVENT_KINDS a
 * type error here until its actions are decided.
 */
const EMITTED: { readonly [K in EventKind]: readonly EventAction[] } = {
  group: ["created", "updated", "deleted"],
  identity: ["created", "updated", "deleted"],
  role: ["created", "updated", "deleted"],
  roleBinding: ["created", "created.batch", "updated", "deleted"],
  identityProvider: ["created", "updated", "deleted"],
  accountAssociation: ["created", "updated", "deleted"],
  // An invite is never updated: created, then deleted (by DeleteGroupInvite, or when a single-use invite is used).
  groupInvite: ["created", "deleted"],
  repo: ["created", "updated", "deleted"],
  tag: ["created", "updated", "deleted"],
};

const CODE_TYPES = new Set(
  (Object.keys(EVENT_KINDS) as EventKind[]).flatMap((kind) => EMITTED[kind].map((action) => eventType(kind, action))),
);

/** README.md, CHANGELOG.md aside (it keeps history), and every page under docs/. */
function pages(): string[] {
  const below = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? below(`${dir}/${e.name}`) : e.name.endsWith(".md") ? [`${dir}/${e.name}`] : [],
    );
  return ["README.md", ...below("docs").sort()];
}

/** Every mention of a type or a type prefix on a page: `api.platform.` and what follows of a type's characters. */
function mentions(page: string): { line: number; text: string }[] {
  return readPage(page)
    .split("\n")
    .flatMap((line, i) => [...line.matchAll(/api\.platform\.[a-z0-9_.]*/g)].map((m) => ({ line: i + 1, text: m[0] })));
}

/** A full type (ending in its version), a sentence's full stop dropped; null for a prefix. */
function fullType(mention: string): string | null {
  const type = mention.replace(/\.+$/, "");
  return /\.v[0-9]+$/.test(type) ? type : null;
}

/** What is in a but not in b, and in b but not in a. */
function difference(a: Iterable<string>, b: Iterable<string>): { missing: string[]; extra: string[] } {
  const as = new Set(a);
  const bs = new Set(b);
  return { missing: [...as].filter((x) => !bs.has(x)).sort(), extra: [...bs].filter((x) => !as.has(x)).sort() };
}

test("the code's types: every kind emits, no two kinds share a type, and the heartbeat is none of them", () => {
  assert.deepEqual(Object.keys(EMITTED).sort(), Object.keys(EVENT_KINDS).sort());
  const all = Object.values(EMITTED).reduce((n, actions) => n + actions.length, 0);
  assert.equal(CODE_TYPES.size, all, "each (kind, action) has a type of its own");
  for (const kind of Object.keys(EVENT_KINDS) as EventKind[]) assert.ok(EMITTED[kind].length > 0, `${kind} emits something`);
  assert.equal(CODE_TYPES.has(WATCH_HEARTBEAT_TYPE), false, "the heartbeat is never an event's type");
  assert.equal(fullType(WATCH_HEARTBEAT_TYPE), WATCH_HEARTBEAT_TYPE, "the heartbeat's type has the shape of a type");
});

test("every type a page names is one the code emits, or the heartbeat; every prefix names some type", () => {
  const wrong: string[] = [];
  for (const page of pages()) {
    for (const { line, text } of mentions(page)) {
      const type = fullType(text);
      const known = type === null ? [...CODE_TYPES].some((t) => t.startsWith(text)) : type === WATCH_HEARTBEAT_TYPE || CODE_TYPES.has(type);
      if (!known) wrong.push(`${page}:${line}: ${text}`);
    }
  }
  assert.deepEqual(wrong, [], "types and prefixes the code does not emit");
});

test("a page that lists event types lists every one the code emits, and docs/events.md is such a page", () => {
  const listing = pages().flatMap((page) => {
    const named = new Set(
      mentions(page)
        .map((m) => fullType(m.text))
        .filter((t): t is string => t !== null && t !== WATCH_HEARTBEAT_TYPE),
    );
    // One type named is an example; two or more are a list.
    return named.size >= 2 ? [{ page, named }] : [];
  });
  assert.ok(
    listing.some((l) => l.page === "docs/events.md"),
    "docs/events.md lists the event types",
  );
  for (const { page, named } of listing)
    assert.deepEqual(
      difference(CODE_TYPES, named),
      { missing: [], extra: [] },
      `${page}: missing: types the code emits and the page does not list; extra: listed types the code does not emit`,
    );
});
