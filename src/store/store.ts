/**
 * The Store is the seam between the service layer and persistence. It speaks
 * domain records and typed errors (src/domain/errors.ts); it never sees a
 * protocol, and nothing outside src/store knows which engine is behind it.
 *
 * Each part is written once, as the synchronous interface a synchronous
 * driver implements (SyncGroupStore: better-sqlite3); the Store services use
 * is its Async form, every method returning a promise, which an asynchronous
 * driver (PostgreSQL) implements directly.
 */

import type { ClaimMatchRecord } from "../domain/claim-match-record.js";
import type { EventDraft } from "../domain/events.js";
import type { HierarchyFilter } from "../domain/hierarchy-filter.js";
import type { Async } from "./async-type.js";
import type { EventStore, SyncEventStore } from "./event-store.js";
import type {
  RefreshTokenRecord,
  RefreshTokenStore,
  RotateResult,
  SignInFlowChanges,
  SignInFlowRecord,
  SignInFlowStatus,
  SignInFlowStore,
  SyncRefreshTokenStore,
  SyncSignInFlowStore,
} from "./sign-in-store.js";
import type { Cursor, ListQuery, ListResult } from "./sql/list-query.js";
import type { DeliveryStore, SubscriptionStore, SyncDeliveryStore, SyncSubscriptionStore } from "./subscription-store.js";

export type { ClaimMatchRecord, HierarchyFilter };

export type { Async, Cursor, DeliveryStore, EventStore, ListQuery, ListResult, SubscriptionStore };
export type { RefreshTokenRecord, RefreshTokenStore, RotateResult, SignInFlowChanges, SignInFlowRecord, SignInFlowStatus, SignInFlowStore };

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
export interface SyncGroupStore {
  /**
   * Inserts a group. Throws NotFoundError when parentUid names no group, and
   * AlreadyExistsError when the uid is taken.
   */
  create(group: GroupRecord): void;
  /**
   * Inserts a root organization (parentUid null) as create does, recording
   * creatorUid as its creator for rootsCreatedBy (kept beside the record,
   * not in it).
   */
  createRoot(group: GroupRecord, creatorUid: string): void;
  /** How many root organizations created by identityUid (createRoot) exist now: an index count, for the per-identity quota. */
  rootsCreatedBy(identityUid: string): number;
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

/** Identity orderings the store supports. */
export type IdentityOrder = "uid" | "name" | "created_at" | "updated_at";

/** Pre-registered keys of an issuer that is not online. */
export interface StaticKeysRecord {
  issuer: string;
  subject: string;
  /** A JWKS document, as JSON text. */
  issuerKeys: string;
  /** Milliseconds since the epoch. */
  expirationTime: number;
  audiences: string[];
}

/** How an identity is assumed: exactly one relationship. */
export type IdentityRelationship =
  | { kind: "claimMatch"; claimMatch: ClaimMatchRecord }
  | { kind: "staticKeys"; staticKeys: StaticKeysRecord };

/** An identity as stored. A person's identity is root-level (parentUid null). */
export interface IdentityRecord {
  uid: string;
  /** The group the identity lives in; null for a root-level user identity. */
  parentUid: string | null;
  name: string;
  description: string;
  email: string;
  emailUnverified: string;
  company: string;
  relationship: IdentityRelationship;
  /** Last federation (token exchange or sign-in), ms since the epoch. */
  lastSeenTime: number;
  createTime: number;
  updateTime: number;
}

/** Identity-specific list filters. */
export interface IdentityFilter {
  name?: string;
  relationshipKind?: IdentityRelationship["kind"];
}

/** The changeable fields of an identity. */
export type IdentityChanges = Partial<Pick<IdentityRecord, "name" | "description" | "company" | "relationship">>;

/** Persistence of identities. */
export interface SyncIdentityStore {
  /**
   * Inserts an identity. Throws NotFoundError when parentUid names no group,
   * AlreadyExistsError when the uid is taken.
   */
  create(identity: IdentityRecord): void;
  /** Returns the identity, or null when absent. */
  get(uid: string): IdentityRecord | null;
  /** Returns one page of identities in the requested order. */
  list(query: ListQuery<IdentityFilter, IdentityOrder>): ListResult<IdentityRecord>;
  /** Applies changes and sets updateTime; throws NotFoundError when absent. */
  update(uid: string, changes: IdentityChanges, updateTime: number): IdentityRecord;
  /** Records a federation; does nothing when the identity is absent. */
  touchLastSeen(uid: string, time: number): void;
  /** Deletes the identity and every role binding of it; throws NotFoundError when absent. */
  delete(uid: string): void;
}

/** Role orderings the store supports. */
export type RoleOrder = "uid" | "name" | "created_at" | "updated_at";

/** A role as stored: a named set of capabilities. Built-in roles are root-level (parentUid null). */
export interface RoleRecord {
  uid: string;
  parentUid: string | null;
  name: string;
  description: string;
  /** Capability enum numbers, sorted ascending, without duplicates. */
  capabilities: number[];
  createTime: number;
  updateTime: number;
}

/** Role-specific list filters. */
export interface RoleFilter {
  name?: string;
}

/** The changeable fields of a role. */
export type RoleChanges = Partial<Pick<RoleRecord, "name" | "description" | "capabilities">>;

/** Persistence of roles. */
export interface SyncRoleStore {
  /** Inserts a role; NotFoundError for a missing parent group, AlreadyExistsError for a taken uid. */
  create(role: RoleRecord): void;
  /** Returns the role, or null when absent. */
  get(uid: string): RoleRecord | null;
  /**
   * Returns one page of roles. Root-level (built-in) roles are visible to every
   * query whose visibleWithin is non-null and non-empty, besides the roles at or
   * below those groups.
   */
  list(query: ListQuery<RoleFilter, RoleOrder>): ListResult<RoleRecord>;
  /** Applies changes and sets updateTime; throws NotFoundError when absent. */
  update(uid: string, changes: RoleChanges, updateTime: number): RoleRecord;
  /**
   * Deletes a role. Throws NotFoundError when absent and FailedPreconditionError
   * (type ROLE_IN_USE) while any role binding uses it.
   */
  delete(uid: string): void;
}

/** Role binding orderings the store supports. */
export type RoleBindingOrder = "uid" | "created_at";

/** A role binding as stored: identity holds role at group (and below). */
export interface RoleBindingRecord {
  uid: string;
  /** The group the binding applies at; the binding's uid lies directly below it. */
  groupUid: string;
  identityUid: string;
  roleUid: string;
  createTime: number;
}

/** Role-binding-specific list filters (exact uids). */
export interface RoleBindingFilter {
  identityUid?: string;
  groupUid?: string;
  roleUid?: string;
}

/** Persistence of role bindings. */
export interface SyncRoleBindingStore {
  /**
   * Inserts bindings atomically (all or none). Throws NotFoundError naming the
   * first missing group, identity or role; AlreadyExistsError for a taken uid.
   * A root-level identity uid (a person's, see LookupIdentity) need not exist
   * yet: the binding waits for the person's first sign-in.
   */
  create(bindings: readonly RoleBindingRecord[]): void;
  /** Returns the binding, or null when absent. */
  get(uid: string): RoleBindingRecord | null;
  /** Returns one page of bindings. */
  list(query: ListQuery<RoleBindingFilter, RoleBindingOrder>): ListResult<RoleBindingRecord>;
  /** Changes the identity and/or role; throws NotFoundError for a missing binding, identity (but a person's) or role. */
  update(uid: string, changes: Partial<Pick<RoleBindingRecord, "identityUid" | "roleUid">>): RoleBindingRecord;
  /** Deletes the binding; returns false when it did not exist (delete is idempotent). */
  delete(uid: string): boolean;
  /** Every binding of one identity, for authorization. */
  forIdentity(identityUid: string): RoleBindingRecord[];
}

/** Identity provider orderings the store supports. */
export type IdentityProviderOrder = "uid" | "name" | "created_at" | "updated_at";

/** OIDC settings of an organization's identity provider. */
export interface OidcSettings {
  issuer: string;
  clientId: string;
  /** Write-only: never returned by the API. "" when unset. */
  clientSecret: string;
  additionalScopes: string[];
  groupsClaim: string;
  /** CorrelationRule enum number; immutable after creation. */
  correlationRule: number;
  pkceEnabled: boolean;
}

/** An identity provider as stored: people of an organization sign in through it. */
export interface IdentityProviderRecord {
  uid: string;
  /** The group (usually an organization) the provider belongs to. */
  parentUid: string;
  name: string;
  description: string;
  /** Role uid bound to a person at parentUid on their first sign-in through this provider. */
  defaultRole: string;
  oidc: OidcSettings;
  createTime: number;
  updateTime: number;
}

/** Identity-provider-specific list filters. */
export interface IdentityProviderFilter {
  name?: string;
}

/** The changeable fields of an identity provider. */
export type IdentityProviderChanges = Partial<Pick<IdentityProviderRecord, "name" | "description" | "defaultRole" | "oidc">>;

/** Persistence of identity providers. */
export interface SyncIdentityProviderStore {
  /** Inserts a provider; NotFoundError for a missing group or default role, AlreadyExistsError for a taken uid. */
  create(provider: IdentityProviderRecord): void;
  /** Returns the provider, or null when absent. */
  get(uid: string): IdentityProviderRecord | null;
  /** Returns one page of providers. */
  list(query: ListQuery<IdentityProviderFilter, IdentityProviderOrder>): ListResult<IdentityProviderRecord>;
  /** Applies changes and sets updateTime; NotFoundError when absent (or the new default role is). */
  update(uid: string, changes: IdentityProviderChanges, updateTime: number): IdentityProviderRecord;
  /** Deletes the provider; throws NotFoundError when absent. */
  delete(uid: string): void;
}

/** Account association orderings ("group" is the owning group's uid, the association's own uid). */
export type AccountAssociationOrder = "group" | "uid" | "name" | "created_at" | "updated_at";

/** Cloud and service accounts an organization links to (kept as data; no live cloud calls). */
export interface AccountProviders {
  amazon?: { account: string };
  google?: { projectId: string; projectNumber: string };
  chainguard?: { serviceBindings: Record<string, string> };
  azure?: { tenantId: string; clientIds: Record<string, string> };
  /** GitHub App installations keyed by app id (a decimal string). */
  github?: { appInstallations: Record<string, { installations: { installationId: string; name: string }[] }> };
}

/** An account association as stored: one per group, its uid is the group's uid. */
export interface AccountAssociationRecord {
  uid: string;
  name: string;
  description: string;
  providers: AccountProviders;
  createTime: number;
  updateTime: number;
}

/** Account-association-specific list filters. */
export interface AccountAssociationFilter {
  name?: string;
}

/** The changeable fields of an account association. */
export type AccountAssociationChanges = Partial<Pick<AccountAssociationRecord, "name" | "description" | "providers">>;

/** Persistence of account associations. */
export interface SyncAccountAssociationStore {
  /** Inserts the association of group uid; NotFoundError for a missing group, AlreadyExistsError when the group has one. */
  create(association: AccountAssociationRecord): void;
  /** Returns the association, or null when absent. */
  get(uid: string): AccountAssociationRecord | null;
  /** Returns one page of associations. */
  list(query: ListQuery<AccountAssociationFilter, AccountAssociationOrder>): ListResult<AccountAssociationRecord>;
  /** Applies changes and sets updateTime; NotFoundError when absent. */
  update(uid: string, changes: AccountAssociationChanges, updateTime: number): AccountAssociationRecord;
  /** Deletes the association; returns false when it did not exist (delete is idempotent). */
  delete(uid: string): boolean;
}

/** Group invite orderings the store supports. */
export type GroupInviteOrder = "uid" | "created_at" | "expiration_time";

/** A group invite as stored. The code itself is never stored: only its hash. */
export interface GroupInviteRecord {
  uid: string;
  /** The group the invite joins. */
  groupUid: string;
  roleUid: string;
  /** The only email allowed to accept; "" lets anyone holding the code accept. */
  email: string;
  expirationTime: number;
  singleUse: boolean;
  /** Public id of the code (its first part), indexed for lookup. Unique. */
  keyId: string;
  /** SHA-256 (hex) of the code's secret part. */
  codeHash: string;
  createTime: number;
}

/** Group-invite-specific list filters. */
export interface GroupInviteFilter {
  keyId?: string;
}

/** Persistence of group invites. */
export interface SyncGroupInviteStore {
  /** Inserts an invite; NotFoundError for a missing group or role, AlreadyExistsError for a taken uid or keyId. */
  create(invite: GroupInviteRecord): void;
  /** Returns the invite, or null when absent. */
  get(uid: string): GroupInviteRecord | null;
  /** Returns the invite with this keyId, or null. */
  findByKeyId(keyId: string): GroupInviteRecord | null;
  /** Returns one page of invites. */
  list(query: ListQuery<GroupInviteFilter, GroupInviteOrder>): ListResult<GroupInviteRecord>;
  /** Deletes the invite; throws NotFoundError when absent. */
  delete(uid: string): void;
  /**
   * Deletes the invite if it still exists and returns true; false when it was
   * already gone (a single-use invite accepted concurrently). Use inside the
   * transaction that creates the binding.
   */
  consume(uid: string): boolean;
}

/** Repo orderings the store supports. */
export type RepoOrder = "uid" | "name" | "created_at" | "updated_at";

/** A repository of the registry catalogue, directly below a group. */
export interface RepoRecord {
  uid: string;
  /** The group holding the repo. */
  parentUid: string;
  /** Unique within its group. */
  name: string;
  description: string;
  /** CatalogTier enum number (v2beta1 numbering). */
  catalogTier: number;
  bundles: string[];
  aliases: string[];
  activeTags: string[];
  createTime: number;
  updateTime: number;
}

/** Repo-specific list filters. */
export interface RepoFilter {
  name?: string;
}

/** The changeable fields of a repo. */
export type RepoChanges = Partial<Pick<RepoRecord, "name" | "description" | "catalogTier" | "bundles" | "aliases" | "activeTags">>;

/** Persistence of repos. */
export interface SyncRepoStore {
  /** Inserts a repo; NotFoundError for a missing group, AlreadyExistsError for a taken uid or a name taken in the group. */
  create(repo: RepoRecord): void;
  /** Returns the repo, or null when absent. */
  get(uid: string): RepoRecord | null;
  /** Returns one page of repos. */
  list(query: ListQuery<RepoFilter, RepoOrder>): ListResult<RepoRecord>;
  /** Applies changes and sets updateTime; NotFoundError when absent, AlreadyExistsError for a name taken in the group. */
  update(uid: string, changes: RepoChanges, updateTime: number): RepoRecord;
  /** Deletes a repo; NotFoundError when absent, FailedPreconditionError (RESOURCE_NOT_EMPTY, naming tags) while it has tags. */
  delete(uid: string): void;
}

/** Tag orderings the store supports (tags have no create time). */
export type TagOrder = "uid" | "name" | "updated_at";

/** A tag of a repo: a name pointing at a manifest digest. */
export interface TagRecord {
  uid: string;
  /** The repo holding the tag; the tag's uid lies directly below it. */
  repoUid: string;
  /** Unique within its repo. */
  name: string;
  /** "sha256:" and 64 lowercase hex. */
  digest: string;
  deprecated: boolean;
  bundles: string[];
  updateTime: number;
}

/** Tag-specific list filters; the include flags default to excluding those tag forms. */
export interface TagFilter {
  name?: string;
  digest?: string;
  /** Only tags updated after this time (ms since the epoch). */
  updatedSince?: number;
  /** Include referrer tags (sha256-…). */
  includeReferrers: boolean;
  /** Include dated tags (…-20yymmdd). */
  includeDates: boolean;
  /** Include epoch tags (…-r<digits>). */
  includeEpochs: boolean;
}

/** Persistence of tags. */
export interface SyncTagStore {
  /**
   * Creates the tag, or updates the repo's tag of the same name (keeping its
   * uid). NotFoundError for a missing repo. With mayUpdate false, an existing
   * tag of that name is left alone and PermissionDeniedError thrown (decided
   * in the same transaction as the write, so a racing create cannot slip by).
   * Returns the stored tag and whether it was created.
   */
  put(tag: TagRecord, opts?: { mayUpdate?: boolean }): { tag: TagRecord; created: boolean };
  /** Returns the tag, or null when absent. */
  get(uid: string): TagRecord | null;
  /** Returns one page of tags. */
  list(query: ListQuery<TagFilter, TagOrder>): ListResult<TagRecord>;
  /** Deletes the tag; NotFoundError when absent. */
  delete(uid: string): void;
  /**
   * Points the repo's tag of tag.name at tag.digest for a change the registry
   * made at sourceTimeUs (microseconds since the epoch: a notification's
   * timestamp, or when a reconcile read the registry). Creates the tag (with
   * tag.uid), or moves the existing one (keeping its uid, deprecation and
   * bundles), unless what set it is not older (supersedes() in rows/tags.ts;
   * an API put counts at its update time): a late redelivery never regresses a
   * tag. A tag already at the digest only has its source time advanced, and
   * nothing is done when the digest was deleted from the repo at or after
   * sourceTimeUs (deleteFromRegistry remembers it). Returns the stored tag
   * and whether it was created, or null when nothing visible changed.
   * NotFoundError for a missing repo.
   */
  putFromRegistry(tag: TagRecord, sourceTimeUs: number): { tag: TagRecord; created: boolean } | null;
  /**
   * Deletes the repo's tags the selector names (at a digest, or by name) that
   * were set before sourceTimeUs, and returns them by name; a tag set again
   * since stays. For a digest, remembers that it was deleted at sourceTimeUs
   * (for DELETED_DIGEST_RETENTION_US in rows/tags.ts), so an older push of it
   * delivered later is not applied. Nothing happens for a missing repo.
   */
  deleteFromRegistry(repoUid: string, which: { digest: string } | { name: string }, sourceTimeUs: number): TagRecord[];
  /**
   * The registry times tags were set at (putFromRegistry's sourceTimeUs; a tag an API call set last has none), a
   * page in tag uid order after afterUid ("" for the first): what a copy of the store carries over with the tags.
   */
  registrySourceTimes(afterUid: string, limit: number): TagSourceTime[];
  /** The remembered deleted digests (deleteFromRegistry), a page in (repo uid, digest) order after `after`. */
  deletedDigests(after: { repoUid: string; digest: string } | null, limit: number): DeletedDigest[];
  /**
   * Writes what registrySourceTimes and deletedDigests read from another store, into this one that holds the
   * tags and repos (a copy): NotFoundError for a tag or repo it does not hold. A deleted digest already
   * remembered keeps the later time.
   */
  restoreRegistryMemory(memory: { sourceTimes: readonly TagSourceTime[]; deletedDigests: readonly DeletedDigest[] }): void;
}

/** When the registry event that last set a tag happened (microseconds since the epoch). */
export interface TagSourceTime {
  tagUid: string;
  timeUs: number;
}

/** A manifest deleted from a repo, remembered so that an older push delivered later is not applied. */
export interface DeletedDigest {
  repoUid: string;
  digest: string;
  /** When the delete happened (microseconds since the epoch). */
  timeUs: number;
}

/** Advisory orderings the store supports. */
export type AdvisoryOrder = "uid" | "advisory_id" | "created_at" | "updated_at";

/** One event in an advisory's history. */
export interface AdvisoryEventRecord {
  uid: string;
  createTime: number;
  author: string;
  reviewer: string;
  /** ReviewState enum number. */
  reviewState: number;
  issue: string | null;
  /** The event type: the AdvisoryEvent oneof case, e.g. "detection", "fixed", "patched". */
  type: string;
  /** The oneof member's fields, as proto3 JSON. */
  data: Record<string, unknown>;
}

/** A vulnerability advisory as stored. */
export interface AdvisoryRecord {
  uid: string;
  /** The group the advisory belongs to. */
  parentUid: string;
  advisoryId: string;
  legacyAdvisoryId: string;
  author: string;
  artifactName: string;
  artifactType: string;
  artifactArchitecture: string;
  componentName: string;
  componentLocation: string;
  componentType: string;
  /** The source package (origin) the artifact is built from; "" when unknown. */
  origin: string;
  aliases: string[];
  /** Severity: Type enum number and score (a CVSS vector or number). */
  severities: { type: number; score: string }[];
  events: AdvisoryEventRecord[];
  createTime: number;
  updateTime: number;
  /** Set once the advisory is withdrawn. */
  deleteTime: number | null;
}

/** Advisory list filters (all optional; lists match any of their values). */
export interface AdvisoryFilter {
  advisoryIds?: string[];
  legacyAdvisoryIds?: string[];
  artifactNames?: string[];
  artifactTypes?: string[];
  artifactArchitectures?: string[];
  componentNames?: string[];
  componentTypes?: string[];
  componentLocations?: string[];
  aliases?: string[];
  /** When set, artifactNames is ignored. */
  origin?: string;
  /** At least one event has one of these review states. */
  eventReviewStates?: number[];
  /** At least one event is by one of these authors. */
  eventAuthors?: string[];
  /** No event is by any of these authors. */
  excludeEventAuthors?: string[];
  /** At least one event was reviewed by one of these. */
  eventReviewers?: string[];
  /** At least one event has one of these types (oneof case names). */
  eventTypes?: string[];
  /** The most recent approved event has this type. */
  latestEventType?: string;
  /** Case-insensitive substring of artifact name, component name or an alias. */
  query?: string;
}

/** What an import did with one record. */
export type UpsertOutcome = "created" | "updated" | "unchanged";

/** Persistence of advisories. Read-only over the API; written by the importer. */
export interface SyncAdvisoryStore {
  /** Returns the advisory, or null when absent. */
  get(uid: string): AdvisoryRecord | null;
  /** Returns one page of advisories. */
  list(query: ListQuery<AdvisoryFilter, AdvisoryOrder>): ListResult<AdvisoryRecord>;
  /**
   * Inserts or replaces advisories by uid in one transaction, keeping the
   * create time of existing ones; a record equal to the stored one (ignoring
   * times) is left unchanged. NotFoundError for a missing group.
   */
  upsert(advisories: readonly AdvisoryRecord[]): UpsertOutcome[];
}

/** A key that signs the API tokens this server issues. */
export interface SigningKeyRecord {
  kid: string;
  /** Private JWK, as JSON text. */
  privateJwk: string;
  /** Public JWK, as JSON text. */
  publicJwk: string;
  createTime: number;
  /**
   * When the key was retired (ms), absent while it is not: a retired key
   * verifies nothing, signs nothing, is left out of the JWKS, and its
   * private half is erased.
   */
  retireTime?: number;
}

/** What retireSigningKey did: retired the key now, or found it retired already (its time kept). */
export type RetireOutcome = "retired" | "already-retired";

/** Server secrets that must survive restarts (page-token and signing keys). */
export interface SyncKeyStore {
  /**
   * Returns the secret stored under name, creating it with make() on first use.
   * Concurrent first uses agree on one value.
   */
  secret(name: string, make: () => Buffer): Buffer;
  /** Every signing key, oldest first. */
  signingKeys(): SigningKeyRecord[];
  /** Adds a signing key; the newest signs from then on. */
  addSigningKey(key: SigningKeyRecord): void;
  /**
   * Retires the key now: sets its retireTime and erases its private half,
   * in one statement. Throws NotFoundError when no key has this kid, and
   * FailedPreconditionError when it is the newest key (the one that signs:
   * add its successor first), so the newest key is never retired.
   */
  retireSigningKey(kid: string, now: number): RetireOutcome;
}

export type GroupStore = Async<SyncGroupStore>;
export type IdentityStore = Async<SyncIdentityStore>;
export type RoleStore = Async<SyncRoleStore>;
export type RoleBindingStore = Async<SyncRoleBindingStore>;
export type IdentityProviderStore = Async<SyncIdentityProviderStore>;
export type AccountAssociationStore = Async<SyncAccountAssociationStore>;
export type GroupInviteStore = Async<SyncGroupInviteStore>;
export type RepoStore = Async<SyncRepoStore>;
export type TagStore = Async<SyncTagStore>;
export type AdvisoryStore = Async<SyncAdvisoryStore>;
export type KeyStore = Async<SyncKeyStore>;

/**
 * The parts of a store, by role, in the synchronous form (what a synchronous
 * driver implements). The one list of parts: STORE_PARTS (parts.ts) must
 * declare each of them and each of its methods, and every engine and
 * wrapper builds its parts from these two, so a part or method added here
 * and forgotten anywhere is a type error (docs/ARCHITECTURE.md, "Adding a
 * table").
 */
export interface SyncStoreParts {
  groups: SyncGroupStore;
  identities: SyncIdentityStore;
  roles: SyncRoleStore;
  roleBindings: SyncRoleBindingStore;
  identityProviders: SyncIdentityProviderStore;
  accountAssociations: SyncAccountAssociationStore;
  groupInvites: SyncGroupInviteStore;
  repos: SyncRepoStore;
  tags: SyncTagStore;
  advisories: SyncAdvisoryStore;
  keys: SyncKeyStore;
  events: SyncEventStore;
  subscriptions: SyncSubscriptionStore;
  deliveries: SyncDeliveryStore;
  signInFlows: SyncSignInFlowStore;
  refreshTokens: SyncRefreshTokenStore;
}

/** A part's name. */
export type PartName = keyof SyncStoreParts;

/**
 * The versioned table of each part that has one (its version moves with every
 * write to it, and caches are checked against it): a part named here says
 * this table in its STORE_PARTS row (parts.ts), a part not named says `table:
 * null`, both held by the compiler. VERSIONED_TABLES (versions.ts) is read
 * from those rows. Declared here, by type only, so that this file needs
 * nothing of parts.ts.
 */
export interface PartTables {
  groups: "groups";
  identities: "identities";
  roles: "roles";
  roleBindings: "role_bindings";
  identityProviders: "identity_providers";
  accountAssociations: "account_associations";
  groupInvites: "group_invites";
  repos: "repos";
  tags: "tags";
  advisories: "advisories";
  keys: "signing_keys";
  subscriptions: "subscriptions";
}

/** A table caches are checked against (versions.ts): a part's, as PartTables says. */
export type VersionedTable = PartTables[PartName & keyof PartTables];

/** Each table's version at one moment. */
export type TableVersions = Readonly<Record<VersionedTable, number>>;

/** The parts of a store, by role: each part's asynchronous form. */
export type StoreParts = { readonly [P in PartName]: Async<SyncStoreParts[P]> };

/** What a store says of itself: its engine and where its data lives (no secrets). */
export interface StoreDescription {
  backend: "sqlite" | "postgresql";
  location: string;
}

/** A connection pool's state: connections lent out, connections idle, callers waiting for one, and the cap. */
export interface PoolStats {
  inUse: number;
  idle: number;
  waiting: number;
  max: number;
}

/** The whole persistence layer, composed of role-named parts. */
export interface Store extends StoreParts {
  /**
   * Each table's version, read from the database now: every write committed
   * by any process has moved the versions of the tables it wrote.
   */
  readVersions(): Promise<TableVersions>;
  /**
   * A number that changes whenever any of the tables is written, as this
   * store knows them: current as of the last refresh() and this process's
   * own writes since. Caches key their entries with it. A bare engine keeps
   * no such view and answers a new number on every call, so nothing is cached
   * over it; CachingStore keeps the view.
   */
  version(tables: readonly VersionedTable[]): number;
  /**
   * Brings what this process knows of other processes' writes up to date
   * (the versions caches are checked against); called once per request
   * before anything is read, so a write acknowledged anywhere is seen.
   */
  refresh(): Promise<void>;
  /**
   * Runs fn in one transaction: all of its writes commit together or none do.
   * fn must do its reads and writes through tx, and must have no effects
   * outside it: an engine may run it again after a serialization failure.
   * An aborted signal stops it before it starts and between attempts.
   */
  transaction<T>(fn: (tx: StoreParts) => Promise<T>, signal?: AbortSignal): Promise<T>;
  /**
   * Optional: transaction(), answering also readVersions() as read right
   * after its commit, for engines where that read can ride with the COMMIT
   * instead of costing a round trip of its own. CachingStore uses it.
   */
  transactionThenVersions?<T>(fn: (tx: StoreParts) => Promise<T>, signal?: AbortSignal): Promise<[T, TableVersions]>;
  /**
   * Optional: runs write, which must make exactly one plain INSERT through
   * the parts it is given, with events appended atomically, for engines
   * where the events can ride in that statement (PostgreSQL: a
   * data-modifying WITH, one round trip in autocommit instead of BEGIN,
   * two statements and COMMIT; SQLite: one write of a group commit, the
   * events appended without a transaction's wrapping). Without it,
   * insertWithEvents runs a transaction. Call insertWithEvents, not this.
   */
  insertWithEvents?<T>(write: (parts: StoreParts) => Promise<T>, events: readonly EventDraft[], signal?: AbortSignal): Promise<T>;
  /**
   * Optional: the engine's connection pool now, for metrics (PostgreSQL).
   * An engine without a pool (SQLite: one connection per process) has none.
   * Wrappers pass it through.
   */
  poolStats?(): PoolStats;
  /**
   * Optional: how many times a connection to the database has been lost or
   * refused so far (PostgreSQL). After a loss the database answering may be
   * another one (a standby promoted by a failover, a restored backup), whose
   * versions need not continue this process's: CachingStore starts over
   * when the count moves. An engine that cannot lose its database has none.
   * Wrappers pass it through.
   */
  connectionLosses?(): number;
  /** True when the store can serve requests. */
  ready(): boolean;
  /**
   * Which engine holds the data and where, for the start-up line: the file
   * for SQLite, the URL without its password for PostgreSQL. Wrappers pass
   * it through, so the server never reaches into an engine to say so.
   */
  describe(): StoreDescription;
  /** Flushes what it must and closes; idempotent. */
  close(): Promise<void>;
}

/**
 * One INSERT (write, through the parts it is given) and its events,
 * atomically: in that one statement where the engine can
 * (Store.insertWithEvents), else in a transaction.
 */
export function insertWithEvents<T>(
  store: Store,
  write: (parts: StoreParts) => Promise<T>,
  events: readonly EventDraft[],
  signal?: AbortSignal,
): Promise<T> {
  if (store.insertWithEvents) return store.insertWithEvents(write, events, signal);
  return store.transaction(async (tx) => {
    const result = await write(tx);
    await tx.events.append(events);
    return result;
  }, signal);
}
