import { create } from "@bufbuild/protobuf";
import {
  RoleBindingGroupSchema,
  RoleBindingIdentitySchema,
  RoleBindingRoleSchema,
  RoleBindingSchema,
  type RoleBinding,
} from "../../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import type { GroupRecord, IdentityRecord, RoleBindingRecord, RoleRecord, Store } from "../../store/store.js";
import type { Change } from "../events.js";
import { timestampFromMs } from "../time.js";
import { issuerAndSubjectOf } from "./identity-messages.js";

/** The records a binding refers to; null where one has gone (the view then shows only its uid). */
export interface BindingRefs {
  identity: IdentityRecord | null;
  group: GroupRecord | null;
  role: RoleRecord | null;
}

/** The API shape of a binding: its identity, group and role hydrated, createTime and no updateTime (the message has none). */
export function roleBindingMessage(b: RoleBindingRecord, refs: BindingRefs): RoleBinding {
  const { identity, group, role } = refs;
  return create(RoleBindingSchema, {
    uid: b.uid,
    identity: create(RoleBindingIdentitySchema, {
      uid: b.identityUid,
      ...(identity && {
        name: identity.name,
        description: identity.description,
        email: identity.email,
        ...issuerAndSubjectOf(identity),
      }),
    }),
    group: create(RoleBindingGroupSchema, { uid: b.groupUid, ...(group && { name: group.name, description: group.description }) }),
    role: create(RoleBindingRoleSchema, { uid: b.roleUid, ...(role && { name: role.name, description: role.description }) }),
    createTime: timestampFromMs(b.createTime),
    identityUid: b.identityUid,
    roleUid: b.roleUid,
  });
}

/**
 * The event of a binding's creation. Its body names the identity, group and
 * role by uid only: an event is seen by whoever may list bindings at the
 * group, who may not be allowed to read the identity.
 */
export function roleBindingCreated(b: RoleBindingRecord): Change<typeof RoleBindingSchema> {
  const message = roleBindingMessage(b, { identity: null, group: null, role: null });
  return { kind: "roleBinding", action: "created", subject: b.uid, groupUid: b.groupUid, resource: { schema: RoleBindingSchema, message } };
}

/**
 * A hydrator for one response: looks each referenced record up once, so a
 * page of bindings sharing a group or role costs one read per distinct record.
 * An identity's own fields (name, email, issuer, subject) are shown only where
 * mayReadIdentity allows; elsewhere the view has its uid alone, the same
 * whether or not that identity exists.
 */
export function createHydrator(
  store: Store,
  mayReadIdentity: (uid: string) => Promise<boolean>,
): (b: RoleBindingRecord) => Promise<RoleBinding> {
  const memo = <T>(get: (uid: string) => Promise<T | null>) => {
    const seen = new Map<string, Promise<T | null>>();
    return (uid: string): Promise<T | null> => {
      let found = seen.get(uid);
      if (!found) seen.set(uid, (found = get(uid)));
      return found;
    };
  };
  const identity = memo(async (uid) => ((await mayReadIdentity(uid)) ? store.identities.get(uid) : null));
  const group = memo((uid) => store.groups.get(uid));
  const role = memo((uid) => store.roles.get(uid));
  return async (b) =>
    roleBindingMessage(b, { identity: await identity(b.identityUid), group: await group(b.groupUid), role: await role(b.roleUid) });
}
