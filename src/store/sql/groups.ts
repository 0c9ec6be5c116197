import type { GroupOrder, GroupRecord, PartName } from "../store.js";
import { isTrue, type TableSpec } from "./table.js";

/** The groups table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<GroupOrder> = {
  table: "groups",
  select: "uid, parent_uid, name, description, verified, resource_limits, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface GroupRow {
  uid: string;
  parent_uid: string | null;
  name: string;
  description: string;
  verified: number | boolean;
  resource_limits: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: GroupRow): GroupRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    verified: isTrue(row.verified),
    resourceLimits: row.resource_limits === "{}" ? {} : (JSON.parse(row.resource_limits) as Record<string, number>),
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}

/** A kind of record that lives in a group and blocks the group's deletion. */
export interface GroupChildKind {
  /** Plural name used in the precondition message, e.g. "repos". */
  label: string;
  /** SQL returning a row when the group (the single "?" parameter) holds one. */
  existsSql: string;
}

/**
 * What each part keeps in a group, checked in this order before the group
 * may be deleted; null for a part whose records never sit in a group (child
 * groups are checked first, by the group stores themselves; tags sit in
 * repos; keys in nothing). Typed over every part, so a new part must say.
 */
const GROUP_CHILDREN: { readonly [P in PartName]: GroupChildKind | null } = {
  identities: { label: "identities", existsSql: "SELECT 1 FROM identities WHERE parent_uid = ? LIMIT 1" },
  roles: { label: "roles", existsSql: "SELECT 1 FROM roles WHERE parent_uid = ? LIMIT 1" },
  roleBindings: { label: "role bindings", existsSql: "SELECT 1 FROM role_bindings WHERE parent_uid = ? LIMIT 1" },
  identityProviders: { label: "identity providers", existsSql: "SELECT 1 FROM identity_providers WHERE parent_uid = ? LIMIT 1" },
  // The association is the group's own (same uid), not a record below it.
  accountAssociations: { label: "account associations", existsSql: "SELECT 1 FROM account_associations WHERE uid = ?" },
  groupInvites: { label: "group invites", existsSql: "SELECT 1 FROM group_invites WHERE parent_uid = ? LIMIT 1" },
  repos: { label: "repos", existsSql: "SELECT 1 FROM repos WHERE parent_uid = ? LIMIT 1" },
  advisories: { label: "advisories", existsSql: "SELECT 1 FROM advisories WHERE parent_uid = ? LIMIT 1" },
  groups: null,
  tags: null,
  // Events record what happened in a group; they outlive it (a group's deletion is itself an event).
  events: null,
  keys: null,
  // Like every record in a group, a subscription blocks the group's deletion: it holds a sink and a secret its
  // creator should retire knowingly (and a deleted group's own deletion event is worth delivering first).
  subscriptions: { label: "subscriptions", existsSql: "SELECT 1 FROM subscriptions WHERE parent_uid = ? LIMIT 1" },
  // Delivery state is a subscription's, not a group's.
  deliveries: null,
  // Sign-in flows and refresh tokens are a person's (root-level), and last minutes or days: no group holds them.
  signInFlows: null,
  refreshTokens: null,
};

/** Kinds of record that live below a group, checked before the group may be deleted. */
export const GROUP_CHILD_KINDS: readonly GroupChildKind[] = Object.values(GROUP_CHILDREN).filter((k) => k !== null);
