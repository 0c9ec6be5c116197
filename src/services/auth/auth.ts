import { create, getOption } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { GroupCapabilitiesSchema, type AuthService, type GroupCapabilities } from "../../../gen/platformapi/auth/v1/auth_pb.js";
import { name as capabilityNameOption, CapabilitySchema } from "../../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { createAttemptLimiter } from "../../auth/rate-limit.js";
import { NotFoundError } from "../../domain/errors.js";
import { InviteInvalidError, inviteSecretMatches, parseInviteCode } from "../../domain/invite-code.js";
import { isAtOrBelow, newChildUid } from "../../domain/uidp.js";
import type { GroupRecord, IdentityRecord, RoleRecord } from "../../store/store.js";
import { principalOf, type ServiceDeps } from "../context.js";
import { committed, emit, type Change } from "../events.js";
import { groupMessage } from "../iam/groups.js";
import { roleBindingCreated } from "../iam/hydrate.js";
import { identityMessage } from "../iam/identity-messages.js";
import { timestampFromMs } from "../time.js";

/** Failed invite codes a caller may try within the window; its further failures are RESOURCE_EXHAUSTED. */
export const INVITE_FAILURE_LIMIT = 10;
export const INVITE_FAILURE_WINDOW_MS = 10 * 60_000;
/**
 * Failed invite codes one client address (an IPv4 address, an IPv6 /64) may
 * send within the window: identities are free to mint, addresses are not.
 */
export const INVITE_ADDRESS_FAILURE_LIMIT = 30;

/**
 * Groups WhoAmI lists at most (capabilities_truncated says when there are
 * more): an entry with the owner role is ~2.4 KB of JSON, so 100 keep the
 * answer near 240 KB where 2,000 organizations made it 4.7 MB.
 */
export const WHOAMI_GROUP_LIMIT = 100;

/** A capability's human name ("repo.list"), as v1 roles and WhoAmI write it. */
export function capabilityHumanName(c: number): string {
  return HUMAN_NAMES.get(c) ?? String(c);
}

/** Each capability's human name, read from the enum's options once (getOption builds an extension container per call). */
const HUMAN_NAMES = new Map(CapabilitySchema.values.map((v) => [v.number, getOption(v, capabilityNameOption) || v.name]));

/** Every capability's human name, in enum order (UNKNOWN left out). */
const ALL_CAPABILITY_NAMES = CapabilitySchema.values.filter((v) => v.number !== 0).map((v) => capabilityHumanName(v.number));

function v1Group(g: GroupRecord) {
  return { id: g.uid, name: g.name, description: g.description, resourceLimits: g.resourceLimits, verified: g.verified };
}

function v1Role(r: RoleRecord) {
  return { id: r.uid, name: r.name, description: r.description, capabilities: r.capabilities.map(capabilityHumanName) };
}

/**
 * AuthService: who the caller is (GET /auth/v1/ok) and registration
 * (POST /auth/v1/register). People are registered when they first sign in
 * through /sts/exchange; Register confirms that and, with an invite code,
 * joins the invite's group.
 */
export function createAuthService(deps: ServiceDeps): ServiceImpl<typeof AuthService> {
  const { store } = deps;
  // Invite codes are guessable only by brute force: failures are limited per caller, and per client
  // address (identities are free to mint); a valid code is accepted whatever the counts.
  const inviteAttempts = createAttemptLimiter({
    perCaller: INVITE_FAILURE_LIMIT,
    perAddress: INVITE_ADDRESS_FAILURE_LIMIT,
    windowMs: INVITE_FAILURE_WINDOW_MS,
    now: deps.now,
    isFailure: (err) => err instanceof InviteInvalidError,
    refusal: "Resource exhausted: too many invalid invite codes; try again later",
    onRefused: deps.onInviteRefused,
  });

  /**
   * Whether the person's email may stand for them before an email-bound
   * invite to groupUid: only when an issuer vouched for it that the invite's
   * side trusts. That is an issuer the operator lists (a person signed in at
   * the root), or an identity provider of the invite's group or one of its
   * ancestors (a person registered in that provider's group). An org's own
   * provider can claim any email, so it vouches only inside its own tree.
   */
  function emailVouchedFor(person: IdentityRecord, groupUid: string): boolean {
    if (person.email === "" || person.relationship.kind !== "claimMatch") return false;
    if (person.parentUid === null) return deps.signIn.issuers.includes(person.relationship.claimMatch.issuer);
    return isAtOrBelow(person.parentUid, groupUid);
  }

  /**
   * Accepts an invite code for identity: binds the invite's role at its group
   * (once: an identical binding is not duplicated) and, for a single-use
   * invite, consumes it in the same transaction. Every refusal is the same
   * InviteInvalidError.
   */
  async function acceptInvite(ctx: HandlerContext, identity: IdentityRecord, code: string): Promise<GroupRecord> {
    const parsed = parseInviteCode(code);
    const invite = parsed ? await store.groupInvites.findByKeyId(parsed.keyId) : null;
    // Compared even without an invite, so an unknown key id costs the same.
    const matches = parsed !== null && inviteSecretMatches(parsed.secret, invite?.codeHash ?? null);
    const now = deps.now();
    if (!invite || !matches || invite.expirationTime <= now) throw new InviteInvalidError();
    if (
      invite.email !== "" &&
      (invite.email.toLowerCase() !== identity.email.toLowerCase() || !emailVouchedFor(identity, invite.groupUid))
    ) {
      throw new InviteInvalidError();
    }
    return committed(
      deps,
      ctx,
      store.transaction(async (tx) => {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        const changes: Change<any>[] = [];
        if (invite.singleUse) {
          if (!(await tx.groupInvites.consume(invite.uid))) throw new InviteInvalidError();
          changes.push({ kind: "groupInvite", action: "deleted", subject: invite.uid });
        }
        const group = await tx.groups.get(invite.groupUid);
        if (!group || !(await tx.roles.get(invite.roleUid))) throw new InviteInvalidError();
        const bound = (await tx.roleBindings.forIdentity(identity.uid)).some(
          (b) => b.groupUid === invite.groupUid && b.roleUid === invite.roleUid,
        );
        if (!bound) {
          const binding = {
            uid: newChildUid(group.uid),
            groupUid: group.uid,
            identityUid: identity.uid,
            roleUid: invite.roleUid,
            createTime: now,
          };
          await tx.roleBindings.create([binding]);
          changes.push(roleBindingCreated(binding));
        }
        await emit(tx, deps, ctx, changes);
        return group;
      }),
    );
  }

  return {
    async validate(_req, ctx) {
      const principal = principalOf(ctx);
      const capabilities: GroupCapabilities[] = [];
      // The administrator holds every capability everywhere, without a binding: one entry for the whole hierarchy.
      if (principal.admin) capabilities.push(create(GroupCapabilitiesSchema, { capabilities: ALL_CAPABILITY_NAMES }));
      // The bindings come in uid order, which is their groups' order: the first
      // WHOAMI_GROUP_LIMIT entries are read and sent, whatever the caller holds.
      const bindings = await store.roleBindings.forIdentity(principal.subject);
      let truncated = false;
      for (const binding of bindings) {
        if (capabilities.length >= WHOAMI_GROUP_LIMIT) {
          truncated = true;
          break;
        }
        const group = await store.groups.get(binding.groupUid);
        const role = await store.roles.get(binding.roleUid);
        if (group && role) capabilities.push(create(GroupCapabilitiesSchema, { group: v1Group(group), role: v1Role(role) }));
      }
      const identity = await store.identities.get(principal.subject);
      return {
        issuer: principal.token.issuer,
        subject: principal.subject,
        audience: principal.token.audience,
        expiry: timestampFromMs(principal.token.expiresAt),
        issuedAt: timestampFromMs(principal.token.issuedAt),
        capabilities,
        capabilitiesTruncated: truncated,
        email: identity?.email ?? "",
      };
    },

    async register(req, ctx) {
      const principal = principalOf(ctx);
      const identity = await store.identities.get(principal.subject);
      if (!identity) throw new NotFoundError("identity", principal.subject);
      if (req.code === "") return { identity: identityMessage(identity), group: undefined };
      const group = await inviteAttempts.attempt(ctx.values, identity.uid, () => acceptInvite(ctx, identity, req.code));
      return { identity: identityMessage(identity), group: groupMessage(group) };
    },
  };
}
