import { copyEvents, copyTags, createEach, SKIPPED, type CopiedByHand, type CopyStep } from "./copy-steps.js";
import type { GroupChildKind } from "./sql/groups.js";
import type { Async, PartName, PartTables, StoreParts, SyncStoreParts, VersionedTable } from "./store.js";

export type { PartName };

/**
 * What a part method does to the data: a "read" only reads (CachingStore
 * answers it from memory while its table is unchanged; SQLite runs it
 * beside the group commit), a "write" writes or may (it joins the group
 * commit, and moves the caches' view of the versions).
 */
export type MethodKind = "read" | "write";

/** The kind of each method of a part: every method, and nothing else. */
export type MethodKinds<T> = { readonly [M in keyof T]-?: MethodKind };

/** What the store says of one part, besides its interface: every decision a part needs, in one row. */
export interface PartDeclaration<P extends PartName> {
  /**
   * The versioned table holding the part's records (its version moves on
   * every write to them): the part's PartTables entry (store.ts), or null for
   * a part PartTables does not name, which nothing caches (the event feed,
   * whose every write rides with another table's). VERSIONED_TABLES
   * (versions.ts) is these tables.
   */
  table: P extends keyof PartTables ? PartTables[P] : null;
  /**
   * The other versioned tables a write of the part may change, by its own
   * statements or by a cascade of the schema's (ON DELETE CASCADE): their
   * versions move with its table's. SQLite moves them itself (sqlite/
   * table-versions.ts); PostgreSQL's triggers see every table.
   */
  alsoChanges?: readonly VersionedTable[];
  /** Whether CachingStore answers the part's reads from memory (never for a part without a table). */
  cached: P extends keyof PartTables ? boolean : false;
  methods: MethodKinds<SyncStoreParts[P]>;
  /**
   * What the part keeps in a group, checked (in STORE_PARTS' order, after
   * child groups) before the group may be deleted: the plural label the
   * refusal names and SQL returning a row when the group (the one "?"
   * parameter) holds one; null for a part whose records never sit in a group.
   * Both engines' group stores take these as GROUP_CHILD_KINDS.
   */
  blocksGroupDelete: GroupChildKind | null;
  /**
   * How migrate-to-postgres (copy.ts) copies the part's records into the
   * target's transaction, in STORE_PARTS' order (roles before identities);
   * null for a part whose records are not copied (say why); "by hand" for
   * the parts copy.ts copies itself (CopiedByHand in copy-steps.ts: the keys).
   */
  copy: P extends CopiedByHand ? "by hand" : CopyStep | null;
}

/**
 * Every part of a store, one row each, in one declaration the compiler
 * checks against SyncStoreParts and PartTables (store.ts): a part or a
 * method missing here, one here that the interface lacks, or a decision
 * left out (its table, whether it blocks deleting a group, how it is
 * copied) is a type error. Engines and wrappers take the part names and
 * method kinds from it; nothing else lists them but each engine's one
 * record of its part classes (`bare` in sqlite/index.ts, PART_MAKERS in
 * postgres/index.ts). The order is the order of VERSIONED_TABLES, of the
 * checks before a group's deletion (the first kind found is the one the
 * refusal names) and of the copy (parents first): a new part goes last.
 */
export const STORE_PARTS: { readonly [P in PartName]: PartDeclaration<P> } = {
  groups: {
    table: "groups",
    cached: true,
    methods: { create: "write", createRoot: "write", rootsCreatedBy: "read", get: "read", list: "read", update: "write", delete: "write" },
    // Child groups are checked first, by the group stores themselves.
    blocksGroupDelete: null,
    copy: createEach("groups", (parts) => parts.groups),
  },
  // Deleting an identity deletes its role bindings.
  identities: {
    table: "identities",
    alsoChanges: ["role_bindings"],
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", touchLastSeen: "write", delete: "write" },
    blocksGroupDelete: { label: "identities", existsSql: "SELECT 1 FROM identities WHERE parent_uid = ? LIMIT 1" },
    copy: createEach("identities", (parts) => parts.identities),
  },
  // Deleting a role deletes the invites that would grant it (ON DELETE CASCADE).
  roles: {
    table: "roles",
    alsoChanges: ["group_invites"],
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
    blocksGroupDelete: { label: "roles", existsSql: "SELECT 1 FROM roles WHERE parent_uid = ? LIMIT 1" },
    // Built-in roles have the same uid everywhere: the target's own are kept.
    copy: (from, tx, copyAll) =>
      copyAll(
        "roles",
        (q) => from.roles.list(q),
        {},
        async (r) => ((await tx.roles.get(r.uid)) ? SKIPPED : tx.roles.create(r)),
      ),
  },
  roleBindings: {
    table: "role_bindings",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write", forIdentity: "read" },
    blocksGroupDelete: { label: "role bindings", existsSql: "SELECT 1 FROM role_bindings WHERE parent_uid = ? LIMIT 1" },
    copy: (from, tx, copyAll) =>
      copyAll(
        "role bindings",
        (q) => from.roleBindings.list(q),
        {},
        (b) => tx.roleBindings.create([b]),
      ),
  },
  identityProviders: {
    table: "identity_providers",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
    blocksGroupDelete: { label: "identity providers", existsSql: "SELECT 1 FROM identity_providers WHERE parent_uid = ? LIMIT 1" },
    copy: createEach("identity providers", (parts) => parts.identityProviders),
  },
  accountAssociations: {
    table: "account_associations",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
    // The association is the group's own (same uid), not a record below it.
    blocksGroupDelete: { label: "account associations", existsSql: "SELECT 1 FROM account_associations WHERE uid = ?" },
    copy: createEach("account associations", (parts) => parts.accountAssociations),
  },
  groupInvites: {
    table: "group_invites",
    cached: true,
    methods: { create: "write", get: "read", findByKeyId: "read", list: "read", delete: "write", consume: "write" },
    blocksGroupDelete: { label: "group invites", existsSql: "SELECT 1 FROM group_invites WHERE parent_uid = ? LIMIT 1" },
    copy: createEach("group invites", (parts) => parts.groupInvites),
  },
  repos: {
    table: "repos",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
    blocksGroupDelete: { label: "repos", existsSql: "SELECT 1 FROM repos WHERE parent_uid = ? LIMIT 1" },
    copy: createEach("repos", (parts) => parts.repos),
  },
  tags: {
    table: "tags",
    cached: true,
    methods: {
      put: "write",
      get: "read",
      list: "read",
      delete: "write",
      putFromRegistry: "write",
      deleteFromRegistry: "write",
      registrySourceTimes: "read",
      deletedDigests: "read",
      restoreRegistryMemory: "write",
    },
    // Tags sit in repos.
    blocksGroupDelete: null,
    copy: copyTags,
  },
  advisories: {
    table: "advisories",
    cached: true,
    methods: { get: "read", list: "read", upsert: "write" },
    blocksGroupDelete: { label: "advisories", existsSql: "SELECT 1 FROM advisories WHERE parent_uid = ? LIMIT 1" },
    copy: (from, tx, copyAll) =>
      copyAll(
        "advisories",
        (q) => from.advisories.list(q),
        {},
        (a) => tx.advisories.upsert([a]),
      ),
  },
  // Keys are read rarely, by their holders: not cached. secret() may create the secret: a write.
  keys: {
    table: "signing_keys",
    cached: false,
    methods: { secret: "write", signingKeys: "read", addSigningKey: "write", retireSigningKey: "write" },
    // Keys sit in no group.
    blocksGroupDelete: null,
    // The signing keys and the server's secrets, after every other part (copy.ts).
    copy: "by hand",
  },
  // The feed is read fresh every time: a reader polls it for what was just committed.
  events: {
    table: null,
    cached: false,
    methods: { append: "write", read: "read", scan: "read", prune: "write" },
    // Events record what happened in a group; they outlive it (a group's deletion is itself an event).
    blocksGroupDelete: null,
    copy: copyEvents,
  },
  subscriptions: {
    table: "subscriptions",
    cached: true,
    methods: {
      create: "write",
      get: "read",
      countInTree: "read",
      targets: "read",
      list: "read",
      delete: "write",
      setState: "write",
    },
    // Like every record in a group, a subscription blocks the group's deletion: it holds a sink and a secret its
    // creator should retire knowingly (and a deleted group's own deletion event is worth delivering first).
    blocksGroupDelete: { label: "subscriptions", existsSql: "SELECT 1 FROM subscriptions WHERE parent_uid = ? LIMIT 1" },
    // With their secrets and creators. Feed positions differ between engines, so each copy's delivery starts with
    // the events written after the copy: run migrate-to-postgres with the servers stopped and delivered up.
    copy: (from, tx, copyAll) => {
      const copiedAt = Date.now();
      return copyAll(
        "subscriptions",
        (q) => from.subscriptions.list(q),
        {},
        (s) => tx.subscriptions.create(s, copiedAt),
      );
    },
  },
  // Delivery state moves with every attempt and is read by its lease holder only: never cached.
  deliveries: {
    table: null,
    cached: false,
    methods: {
      claim: "write",
      states: "read",
      due: "read",
      record: "write",
      advance: "write",
      release: "write",
      logAttempt: "write",
      log: "read",
      eventPosition: "read",
    },
    // Delivery state is a subscription's, not a group's.
    blocksGroupDelete: null,
    // Delivery state (cursors, retries, leases) and logs are the source's own: created afresh with each subscription.
    copy: null,
  },
  // Pending sign-ins are read by the flow's next step only, and must be seen fresh by any process: never cached.
  signInFlows: {
    table: null,
    cached: false,
    methods: {
      create: "write",
      get: "read",
      byUpstreamState: "read",
      byDeviceCode: "read",
      byUserCode: "read",
      byCode: "read",
      advance: "write",
      deleteExpired: "write",
    },
    // Sign-in flows are a person's (root-level), and last minutes: no group holds them.
    blocksGroupDelete: null,
    // Sign-ins in progress last minutes: people sign in again.
    copy: null,
  },
  // Every refresh is a rotation (a write); a revoked token must stop working at once in every process: never cached.
  refreshTokens: {
    table: null,
    cached: false,
    methods: {
      start: "write",
      rotate: "write",
      get: "read",
      revokeFamily: "write",
      revokeIdentity: "write",
      revokeKey: "write",
      deleteExpired: "write",
    },
    // Refresh tokens are a person's (root-level), and last days: no group holds them.
    blocksGroupDelete: null,
    // Sessions are not carried to another engine: people sign in again.
    copy: null,
  },
};

/** The part names, in STORE_PARTS' order (the keys of a record the compiler holds complete). */
export const PART_NAMES = Object.keys(STORE_PARTS) as readonly PartName[];

/** What blocks deleting a group, besides child groups: each part's blocksGroupDelete, in STORE_PARTS' order. */
export const GROUP_CHILD_KINDS: readonly GroupChildKind[] = PART_NAMES.flatMap((name) => STORE_PARTS[name].blocksGroupDelete ?? []);

/** Makes one part, for a set of parts that makes each when first used. */
type PartMaker = <P extends PartName>(name: P) => Async<SyncStoreParts[P]>;

/**
 * A whole set of parts, each made when first used: a transaction's parts
 * (decorated once per transaction by every wrapper) cost only the parts it
 * touches. Its getters, one per name of PART_NAMES (so every part, and no
 * other, since STORE_PARTS is complete), are defined once on its prototype,
 * so a set costs one small object, not an accessor per part defined per call (a
 * create made five such sets: 9 µs of its CPU). Each getter answers what
 * part() makes for its name, typed StoreParts[P] by the compiler. Being
 * getters of a prototype, the parts are not own properties: spread a set
 * with ownParts(), never `...`.
 */
class LazyParts {
  private readonly made: Partial<Record<PartName, unknown>> = {};

  constructor(private readonly make: PartMaker) {}

  private part<P extends PartName>(name: P): StoreParts[P] {
    return (this.made[name] ??= this.make(name)) as StoreParts[P];
  }

  static {
    // As a class's own getters are: on the prototype, configurable, not enumerable.
    for (const name of PART_NAMES) {
      Object.defineProperty(this.prototype, name, {
        configurable: true,
        get(this: LazyParts) {
          return this.part(name);
        },
      });
    }
  }
}

/** A whole set of parts, each made by make when first used. */
export function makeParts(make: PartMaker): StoreParts {
  // The one step the compiler cannot follow: that the prototype has a getter per part (the loop above).
  return new LazyParts(make) as LazyParts & StoreParts;
}

/** Every part of a set as an own property (each made now), for an object that spreads them, as a Store does. */
export function ownParts(parts: StoreParts): StoreParts {
  return Object.fromEntries(PART_NAMES.map((name) => [name, parts[name]])) as unknown as StoreParts;
}

/** A method of a part, as a wrapper sees it. */
export type PartMethod = (...args: unknown[]) => unknown;

/**
 * A part's declared methods, each replaced by what wrap makes of it (the
 * original bound to the part), as an object of type R: the part's own
 * interface for a decorator, its Async form for the SQLite engine. The one
 * step here the compiler cannot follow is that the object built has R's
 * methods: it has exactly the methods `kinds` names, and callers pass a
 * part's STORE_PARTS methods, which the compiler holds to be the part's.
 */
export function mapMethods<R>(
  part: object,
  kinds: Readonly<Record<string, MethodKind>>,
  wrap: (method: string, kind: MethodKind, original: PartMethod) => PartMethod,
): R {
  const out: Record<string, PartMethod> = {};
  const methods = part as Record<string, PartMethod>;
  for (const [method, kind] of Object.entries(kinds)) {
    out[method] = wrap(method, kind, methods[method]!.bind(part));
  }
  return out as R;
}
