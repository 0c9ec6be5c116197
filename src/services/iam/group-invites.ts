import { create } from "@bufbuild/protobuf";
import { type Duration } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { Capability } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import {
  GroupInviteRoleSchema,
  GroupInviteSchema,
  type GroupInvite,
  type GroupInvitesService,
  type ListGroupInvitesResponse,
} from "../../../gen/platformapi/iam/v2beta1/group_invites_pb.js";
import { InvalidArgumentError, NotFoundError, type FieldViolation } from "../../domain/errors.js";
import { hierarchyFilter, requireUidp } from "../../domain/hierarchy.js";
import { newInviteCode } from "../../domain/invite-code.js";
import { isUidp, newChildUid } from "../../domain/uidp.js";
import type { GroupInviteFilter, GroupInviteOrder, GroupInviteRecord, RoleRecord, Store } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { withEvents } from "../events.js";
import { listPage, type ListSpec } from "../paging/list-page.js";
import { type PagingSpec } from "../paging/paging.js";
import { timestampFromMs } from "../time.js";
import { grantableRole } from "./role-refs.js";

const PAGING: PagingSpec<GroupInviteOrder> = {
  orderFields: ["uid", "created_at", "expiration_time"],
  defaultOrder: "created_at desc",
};
/** The longest an invite may last. */
const MAX_INVITE_TTL_MS = 30 * 24 * 3600 * 1000;
/** A plausible address: one "@", a dot in the domain, no spaces; at most 254 characters. */
const EMAIL = /^[^\s@]{1,64}@[^\s@.]+(?:\.[^\s@.]+)+$/;

/**
 * The API shape of a stored invite: its role hydrated (absent when the role
 * is gone), code "" unless this is the Create response that reveals it once.
 */
function groupInviteMessage(i: GroupInviteRecord, role: RoleRecord | null, code = ""): GroupInvite {
  return create(GroupInviteSchema, {
    uid: i.uid,
    roleUid: i.roleUid,
    role: role
      ? create(GroupInviteRoleSchema, {
          uid: role.uid,
          name: role.name,
          description: role.description,
          capabilities: role.capabilities as Capability[],
        })
      : undefined,
    email: i.email,
    expirationTime: timestampFromMs(i.expirationTime),
    singleUse: i.singleUse,
    code,
    keyId: i.keyId,
    createTime: timestampFromMs(i.createTime),
  });
}

/** The keyset position of an invite in a given order. */
function groupInviteCursor(i: GroupInviteRecord, field: GroupInviteOrder) {
  const key = field === "created_at" ? i.createTime : field === "expiration_time" ? i.expirationTime : i.uid;
  return { key, uid: i.uid };
}

/** The ttl in milliseconds, or the violation. */
function ttlOf(ttl: Duration | undefined): number | FieldViolation {
  if (!ttl) return { field: "ttl", description: "is required" };
  const ms = Number(ttl.seconds) * 1000 + Math.trunc(ttl.nanos / 1e6);
  if (!(ms > 0) || ttl.nanos < 0) return { field: "ttl", description: "must be positive" };
  if (ms > MAX_INVITE_TTL_MS) return { field: "ttl", description: "must be at most 30 days (2592000s)" };
  return ms;
}

/** Looks each invite's role up once per response. */
function roleLookup(store: Store): (uid: string) => Promise<RoleRecord | null> {
  const seen = new Map<string, Promise<RoleRecord | null>>();
  return (uid) => {
    let found = seen.get(uid);
    if (!found) seen.set(uid, (found = store.roles.get(uid)));
    return found;
  };
}

/** GroupInvitesService: codes that let someone join a group with a role. No Update: the contract has none. */
export function createGroupInvitesService(deps: ServiceDeps): ServiceImpl<typeof GroupInvitesService> {
  const { store } = deps;
  const LIST: ListSpec<GroupInviteRecord, GroupInviteFilter, GroupInviteOrder> = {
    name: "groupInvites",
    paging: PAGING,
    capability: Capability.CAP_IAM_GROUP_INVITES_LIST,
    list: (q, signal) => store.groupInvites.list(q, signal),
    cursor: groupInviteCursor,
  };
  return {
    async createGroupInvite(req, ctx) {
      const parent = requireUidp("parent", req.parent);
      const input = req.groupInvite ?? create(GroupInviteSchema);
      const violations: FieldViolation[] = [];
      if (!isUidp(input.roleUid))
        violations.push({ field: "role_uid", description: input.roleUid === "" ? "is required" : "must be a role uid" });
      const ttl = ttlOf(input.ttl);
      if (typeof ttl !== "number") violations.push(ttl);
      if (input.email !== "" && (input.email.length > 254 || !EMAIL.test(input.email)))
        violations.push({ field: "email", description: "must be an email address" });
      if (violations.length > 0 || typeof ttl !== "number") throw new InvalidArgumentError(violations);
      // An invite is a future role binding: the same reference and no-escalation rules.
      const role = await grantableRole(store, deps.authz, principalOf(ctx), input.roleUid, parent);
      const now = deps.now();
      const code = newInviteCode();
      const record: GroupInviteRecord = {
        uid: newChildUid(parent),
        groupUid: parent,
        roleUid: role.uid,
        email: input.email,
        expirationTime: now + ttl,
        singleUse: input.singleUse,
        keyId: code.keyId,
        codeHash: code.codeHash,
        createTime: now,
      };
      // The event's body is the invite without its code: a secret is shown to its creator once, never to a subscriber.
      const message = groupInviteMessage(record, role);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.groupInvites.create(record),
        () => [{ kind: "groupInvite", action: "created", subject: record.uid, resource: { schema: GroupInviteSchema, message } }],
      );
      return groupInviteMessage(record, role, code.code);
    },

    async getGroupInvite(req) {
      const uid = requireUidp("uid", req.uid);
      const invite = await store.groupInvites.get(uid);
      if (!invite) throw new NotFoundError("group invite", uid);
      return groupInviteMessage(invite, await store.roles.get(invite.roleUid));
    },

    async listGroupInvites(req, ctx): Promise<ListGroupInvitesResponse> {
      const hierarchy = hierarchyFilter(req.uidp);
      const filter: GroupInviteFilter = req.keyId === "" ? {} : { keyId: req.keyId };
      const page = await listPage(deps, ctx, req, { hierarchy, filter }, LIST);
      const roleOf = roleLookup(store);
      return {
        $typeName: "platformapi.iam.v2beta1.ListGroupInvitesResponse",
        groupInvites: await Promise.all(page.items.map(async (i) => groupInviteMessage(i, await roleOf(i.roleUid)))),
        ...page.envelope,
      };
    },

    async deleteGroupInvite(req, ctx) {
      const uid = requireUidp("uid", req.uid);
      await withEvents(
        deps,
        ctx,
        (tx) => tx.groupInvites.delete(uid),
        () => [{ kind: "groupInvite", action: "deleted", subject: uid }],
      );
      return {};
    },
  };
}
