import type { Async, PartName, StoreParts, SyncStoreParts } from "./store.js";
import type { VersionedTable } from "./versions.js";

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

/** What the store says of one part, besides its interface. */
export interface PartDeclaration<T> {
  /**
   * The versioned table holding the part's records (its version moves on
   * every write to them); null for a part nothing caches (the event feed,
   * whose every write rides with another table's).
   */
  table: VersionedTable | null;
  /**
   * The other versioned tables a write of the part may change, by its own
   * statements or by a cascade of the schema's (ON DELETE CASCADE): their
   * versions move with its table's. SQLite moves them itself (sqlite/
   * table-versions.ts); PostgreSQL's triggers see every table.
   */
  alsoChanges?: readonly VersionedTable[];
  /** Whether CachingStore answers the part's reads from memory. */
  cached: boolean;
  methods: MethodKinds<T>;
}

/**
 * Every part of a store, in one declaration the compiler checks against
 * SyncStoreParts (store.ts): a part or a method missing here, or one here
 * that the interface lacks, is a type error. Engines and wrappers take the
 * part names and method kinds from it; nothing else lists them.
 */
export const STORE_PARTS: { readonly [P in PartName]: PartDeclaration<SyncStoreParts[P]> } = {
  groups: {
    table: "groups",
    cached: true,
    methods: { create: "write", createRoot: "write", rootsCreatedBy: "read", get: "read", list: "read", update: "write", delete: "write" },
  },
  // Deleting an identity deletes its role bindings.
  identities: {
    table: "identities",
    alsoChanges: ["role_bindings"],
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", touchLastSeen: "write", delete: "write" },
  },
  // Deleting a role deletes the invites that would grant it (ON DELETE CASCADE).
  roles: {
    table: "roles",
    alsoChanges: ["group_invites"],
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
  },
  roleBindings: {
    table: "role_bindings",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write", forIdentity: "read" },
  },
  identityProviders: {
    table: "identity_providers",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
  },
  accountAssociations: {
    table: "account_associations",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
  },
  groupInvites: {
    table: "group_invites",
    cached: true,
    methods: { create: "write", get: "read", findByKeyId: "read", list: "read", delete: "write", consume: "write" },
  },
  repos: {
    table: "repos",
    cached: true,
    methods: { create: "write", get: "read", list: "read", update: "write", delete: "write" },
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
  },
  advisories: {
    table: "advisories",
    cached: true,
    methods: { get: "read", list: "read", upsert: "write" },
  },
  // Keys are read rarely, by their holders: not cached. secret() may create the secret: a write.
  keys: {
    table: "signing_keys",
    cached: false,
    methods: { secret: "write", signingKeys: "read", addSigningKey: "write", retireSigningKey: "write" },
  },
  // The feed is read fresh every time: a reader polls it for what was just committed.
  events: {
    table: null,
    cached: false,
    methods: { append: "write", read: "read", scan: "read", prune: "write" },
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
  },
};

/** The part names, in STORE_PARTS' order (the keys of a record the compiler holds complete). */
export const PART_NAMES = Object.keys(STORE_PARTS) as readonly PartName[];

/** Makes one part, for a set of parts that makes each when first used. */
type PartMaker = <P extends PartName>(name: P) => Async<SyncStoreParts[P]>;

/**
 * A whole set of parts, each made when first used: a transaction's parts
 * (decorated once per transaction by every wrapper) cost only the parts it
 * touches. The class names every part once, checked by the compiler against
 * StoreParts (a missing or extra part is a type error), and its getters live
 * on its prototype, so a set costs one small object, not sixteen accessors
 * defined per call (a create made five such sets: 9 µs of its CPU). Being
 * getters of a prototype, the parts are not own properties: spread a set
 * with ownParts(), never `...`.
 */
class LazyParts implements StoreParts {
  private readonly made: Partial<Record<PartName, unknown>> = {};

  constructor(private readonly make: PartMaker) {}

  private part<P extends PartName>(name: P): Async<SyncStoreParts[P]> {
    return (this.made[name] ??= this.make(name)) as Async<SyncStoreParts[P]>;
  }

  get groups() {
    return this.part("groups");
  }
  get identities() {
    return this.part("identities");
  }
  get roles() {
    return this.part("roles");
  }
  get roleBindings() {
    return this.part("roleBindings");
  }
  get identityProviders() {
    return this.part("identityProviders");
  }
  get accountAssociations() {
    return this.part("accountAssociations");
  }
  get groupInvites() {
    return this.part("groupInvites");
  }
  get repos() {
    return this.part("repos");
  }
  get tags() {
    return this.part("tags");
  }
  get advisories() {
    return this.part("advisories");
  }
  get keys() {
    return this.part("keys");
  }
  get events() {
    return this.part("events");
  }
  get subscriptions() {
    return this.part("subscriptions");
  }
  get deliveries() {
    return this.part("deliveries");
  }
  get signInFlows() {
    return this.part("signInFlows");
  }
  get refreshTokens() {
    return this.part("refreshTokens");
  }
}

/** A whole set of parts, each made by make when first used. */
export function makeParts(make: PartMaker): StoreParts {
  return new LazyParts(make);
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
