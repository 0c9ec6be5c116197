import { createHash } from "node:crypto";
import { Capability as C } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";

/** A role every installation has, defined at the root (no group). */
export interface BuiltinRole {
  name: string;
  description: string;
  capabilities: C[];
}

const LISTS = [
  C.CAP_IAM_GROUPS_LIST,
  C.CAP_IAM_GROUP_INVITES_LIST,
  C.CAP_IAM_ROLES_LIST,
  C.CAP_IAM_ROLE_BINDINGS_LIST,
  C.CAP_IAM_IDENTITY_LIST,
  C.CAP_IAM_IDENTITY_PROVIDERS_LIST,
  C.CAP_IAM_ACCOUNT_ASSOCIATIONS_LIST,
  C.CAP_REPO_LIST,
  C.CAP_MANIFEST_LIST,
  C.CAP_REFERRERS_LIST,
  C.CAP_TAG_LIST,
  C.CAP_MANIFEST_METADATA_LIST,
  C.CAP_ADVISORIES_LIST,
  // The SDK's ConsoleViewerCaps holds every list, event subscriptions' included (their secrets are never listed).
  C.CAP_SUBSCRIPTIONS_LIST,
];
const PULL = [
  C.CAP_REPO_BLOBS_GET,
  C.CAP_IAM_GROUPS_LIST,
  C.CAP_REPO_LIST,
  C.CAP_MANIFEST_LIST,
  C.CAP_REFERRERS_LIST,
  C.CAP_TAG_LIST,
  C.CAP_MANIFEST_METADATA_LIST,
];
const REPO_WRITE = [C.CAP_REPO_CREATE, C.CAP_REPO_UPDATE, C.CAP_REPO_DELETE];
const PUSH_WRITE = [
  ...REPO_WRITE,
  C.CAP_MANIFEST_CREATE,
  C.CAP_MANIFEST_UPDATE,
  C.CAP_MANIFEST_DELETE,
  C.CAP_TAG_CREATE,
  C.CAP_TAG_UPDATE,
  C.CAP_TAG_DELETE,
];
const IAM_WRITE = [
  C.CAP_IAM_GROUPS_CREATE,
  C.CAP_IAM_GROUPS_UPDATE,
  C.CAP_IAM_GROUPS_DELETE,
  C.CAP_IAM_GROUP_INVITES_CREATE,
  C.CAP_IAM_GROUP_INVITES_DELETE,
  C.CAP_IAM_ROLES_CREATE,
  C.CAP_IAM_ROLES_UPDATE,
  C.CAP_IAM_ROLES_DELETE,
  C.CAP_IAM_ROLE_BINDINGS_CREATE,
  C.CAP_IAM_ROLE_BINDINGS_UPDATE,
  C.CAP_IAM_ROLE_BINDINGS_DELETE,
  C.CAP_IAM_IDENTITY_CREATE,
  C.CAP_IAM_IDENTITY_UPDATE,
  C.CAP_IAM_IDENTITY_DELETE,
  C.CAP_IAM_IDENTITY_PROVIDERS_CREATE,
  C.CAP_IAM_IDENTITY_PROVIDERS_UPDATE,
  C.CAP_IAM_IDENTITY_PROVIDERS_DELETE,
  C.CAP_IAM_SCIM_MANAGE,
  C.CAP_IAM_ACCOUNT_ASSOCIATIONS_CREATE,
  C.CAP_IAM_ACCOUNT_ASSOCIATIONS_UPDATE,
  C.CAP_IAM_ACCOUNT_ASSOCIATIONS_DELETE,
];
const VIEWER = [...LISTS, C.CAP_REPO_BLOBS_GET];
/** The SDK's EditorCaps: event subscriptions' create, update (redeliver) and delete. */
const SUBSCRIPTIONS_WRITE = [C.CAP_SUBSCRIPTIONS_CREATE, C.CAP_SUBSCRIPTIONS_UPDATE, C.CAP_SUBSCRIPTIONS_DELETE];
const EDITOR = [...VIEWER, ...REPO_WRITE, ...SUBSCRIPTIONS_WRITE];
const PULL_TOKEN_CREATOR = [C.CAP_IAM_ROLE_BINDINGS_CREATE, C.CAP_IAM_IDENTITY_CREATE, C.CAP_IAM_ROLES_LIST, C.CAP_IAM_GROUPS_LIST];

/** The real API's built-in roles (viewer, editor, owner, …), restricted to this server's capabilities. */
export const BUILTIN_ROLES: readonly BuiltinRole[] = [
  { name: "viewer", description: "Read everything in the group and pull images", capabilities: VIEWER },
  { name: "editor", description: "Viewer, plus create, update and delete repos and event subscriptions", capabilities: EDITOR },
  {
    name: "owner",
    description: "Full control of the group: IAM, registry writes and everything an editor can do",
    capabilities: [...EDITOR, ...IAM_WRITE, ...PUSH_WRITE],
  },
  { name: "console_viewer", description: "List everything in the group, without pulling images", capabilities: LISTS },
  { name: "registry.pull", description: "Pull images", capabilities: PULL },
  {
    name: "registry.push",
    description: "Pull and push images, creating repos and nested groups as needed",
    capabilities: [...PULL, ...PUSH_WRITE, C.CAP_IAM_GROUPS_CREATE],
  },
  {
    name: "registry.pull_token_creator",
    description: "Create pull tokens: identities bound to pull roles",
    capabilities: [...PULL_TOKEN_CREATOR, ...PULL],
  },
  { name: "advisories.viewer", description: "Read vulnerability advisories", capabilities: [C.CAP_ADVISORIES_LIST] },
  {
    name: "advisories.admin",
    description: "Read, create, update, approve and delete vulnerability advisories",
    capabilities: [
      C.CAP_ADVISORIES_LIST,
      C.CAP_ADVISORIES_CREATE,
      C.CAP_ADVISORIES_UPDATE,
      C.CAP_ADVISORIES_APPROVE,
      C.CAP_ADVISORIES_DELETE,
    ],
  },
];

/** A built-in role's uid: a root-level uid derived from its name, the same on every installation. */
export function builtinRoleUid(name: string): string {
  return createHash("sha256").update(`builtin-role\u0000${name}`).digest("hex").slice(0, 40);
}

/** Sorted, de-duplicated capability numbers. */
export function normalizeCapabilities(caps: readonly number[]): number[] {
  return [...new Set(caps)].sort((a, b) => a - b);
}
