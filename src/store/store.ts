/**
 * The Store is the seam between the service layer and persistence. It speaks
 * domain records and typed errors (src/domain/errors.ts); it never sees a
 * protocol, and nothing outside src/store may assume SQLite.
 */

/** A keyset position: the order column's value and the uid of the last item returned. */
export interface Cursor {
  key: string | number;
  uid: string;
}

/** Hierarchy narrowing shared by every List (the UIDPFilter). Set fields combine with AND. */
export interface HierarchyFilter {
  /** Records whose uid is a proper ancestor of this uid. */
  ancestorsOf?: string;
  /** Records whose uid lies strictly below this uid. */
  descendantsOf?: string;
  /** Records exactly one level below this uid. */
  childrenOf?: string;
  /** Only root-level records. */
  inRoot?: boolean;
  /** Exactly these uids. */
  ids?: readonly string[];
}

/** One page request against a store list. */
export interface ListQuery<TFilter, TOrder extends string> {
  hierarchy: HierarchyFilter;
  filter: TFilter;
  order: { field: TOrder; desc: boolean };
  /** Exclusive keyset position; null starts at the beginning. */
  after: Cursor | null;
  /** Items to skip after the position, before the page. */
  offset: number;
  /** Maximum items on the page. */
  limit: number;
  /**
   * Authorization narrowing: only records at or below one of these uids.
   * null means no narrowing (an administrator).
   */
  visibleWithin: readonly string[] | null;
}

/** One page of a store list. */
export interface ListResult<T> {
  items: T[];
  /** True when at least one more item follows the page. */
  hasMore: boolean;
  /** Every record matching the filters and visibility, ignoring position, offset and limit. */
  totalCount: number;
}

/** Group orderings the store supports. */
export type GroupOrder = "uid" | "name" | "created_at" | "updated_at";

/** A group as stored. Times are milliseconds since the epoch. */
export interface GroupRecord {
  uid: string;
  /** null for a root organization. */
  parentUid: string | null;
  name: string;
  description: string;
  verified: boolean;
  resourceLimits: Record<string, number>;
  createTime: number;
  updateTime: number;
}

/** Group-specific list filters. */
export interface GroupFilter {
  /** Exact name match. */
  name?: string;
}

/** The changeable fields of a group. */
export type GroupChanges = Partial<Pick<GroupRecord, "name" | "description">>;

/** Persistence of the group hierarchy. */
export interface GroupStore {
  /**
   * Inserts a group. Throws NotFoundError when parentUid names no group, and
   * AlreadyExistsError when the uid is taken.
   */
  create(group: GroupRecord): void;
  /** Returns the group, or null when absent. */
  get(uid: string): GroupRecord | null;
  /** Returns one page of groups in the requested order. */
  list(query: ListQuery<GroupFilter, GroupOrder>): ListResult<GroupRecord>;
  /**
   * Applies changes and sets updateTime; returns the group after the change.
   * Throws NotFoundError when absent.
   */
  update(uid: string, changes: GroupChanges, updateTime: number): GroupRecord;
  /**
   * Deletes a group. Throws NotFoundError when absent, and FailedPreconditionError
   * (type RESOURCE_NOT_EMPTY, naming the child kind) while anything lives below it.
   */
  delete(uid: string): void;
}

/** Server secrets that must survive restarts (page-token and signing keys). */
export interface KeyStore {
  /**
   * Returns the secret stored under name, creating it with make() on first use.
   * Concurrent first uses agree on one value.
   */
  secret(name: string, make: () => Buffer): Buffer;
}

/** The whole persistence layer, composed of role-named parts. */
export interface Store {
  readonly groups: GroupStore;
  readonly keys: KeyStore;
  /** Runs fn in one transaction: all of its writes commit together or none do. */
  transaction<T>(fn: () => T): T;
  /** True when the store can serve requests. */
  ready(): boolean;
  /** Flushes the write-ahead log into the main file and closes; idempotent. */
  close(): void;
}
