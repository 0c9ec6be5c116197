import type { HandlerContext } from "@connectrpc/connect";
import { IdentitySchema } from "../../../gen/platformapi/iam/v2beta1/identities_pb.js";
import type { RoleBindingSchema } from "../../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import type { UpstreamClaims } from "../../auth/upstream.js";
import { newChildUid } from "../../domain/uidp.js";
import { providerUserUid, userIdentityUid } from "../../domain/user-identity.js";
import type { IdentityProviderRecord, IdentityRecord, RoleBindingRecord, StoreParts } from "../../store/store.js";
import type { ServiceDeps } from "../context.js";
import { committed, emit, type Change } from "../events.js";
import { roleBindingCreated } from "../iam/hydrate.js";
import { identityMessage } from "../iam/identity-messages.js";
import { roleAppliesAt } from "../iam/role-refs.js";

/**
 * How people become identities, shared by the token exchange (sts.ts) and
 * the sign-in pages (src/server/http/sign-in/): each is handed claims that
 * were verified already, for the issuer and audience its caller required.
 */
export interface People {
  /**
   * The root-level person of an ID token from an issuer the operator trusts
   * (PLATFORM_USER_ISSUERS, a sign-in provider), registered on first sign-in.
   */
  signIn(ctx: HandlerContext, claims: UpstreamClaims): Promise<IdentityRecord>;
  /**
   * The person of an ID token from an organization's provider (its issuer,
   * for its client): on first sign-in registered in the provider's group,
   * with the provider's default role bound there, in one transaction.
   */
  signInThrough(ctx: HandlerContext, provider: IdentityProviderRecord, claims: UpstreamClaims): Promise<IdentityRecord>;
}

/** The audiences of a token as a list. */
export const audiencesOf = (claims: UpstreamClaims) =>
  Array.isArray(claims.aud) ? claims.aud : claims.aud === undefined ? [] : [claims.aud];

/** A person's display name from their ID token, fitted to the name rule. */
function personName(claims: UpstreamClaims): string {
  const raw = typeof claims.email === "string" ? claims.email.split("@")[0]! : typeof claims.name === "string" ? claims.name : "";
  const cleaned = raw
    .toLowerCase()
    .replace(/[^a-z0-9 ._-]/g, "")
    .slice(0, 63);
  return cleaned.length >= 3
    ? cleaned
    : `user ${claims.sub
        .slice(0, 8)
        .toLowerCase()
        .replace(/[^a-z0-9]/g, "")}`
        .trim()
        .padEnd(3, "0");
}

/** Registers people on first sign-in: predicted uids, verified emails only as email, an org provider's default role. */
export function createPeople(deps: Pick<ServiceDeps, "store" | "now" | "events">): People {
  const { store } = deps;

  /** Binds the provider's default role to a person signing in through it for the first time; the binding's event. */
  async function bindDefaultRole(
    tx: StoreParts,
    provider: IdentityProviderRecord,
    person: IdentityRecord,
  ): Promise<Change<typeof RoleBindingSchema>[]> {
    const role = await tx.roles.get(provider.defaultRole);
    // The role cannot be deleted while a provider names it; re-checked all the same.
    if (!role || !roleAppliesAt(role, provider.parentUid)) return [];
    const binding: RoleBindingRecord = {
      uid: newChildUid(provider.parentUid),
      groupUid: provider.parentUid,
      identityUid: person.uid,
      roleUid: role.uid,
      createTime: person.createTime,
    };
    await tx.roleBindings.create([binding]);
    return [{ ...roleBindingCreated(binding), actor: person.uid }];
  }

  /** The person with uid, registered (with onFirstSignIn, in the same transaction) if new. */
  async function register(
    ctx: HandlerContext,
    uid: string,
    parentUid: string | null,
    claims: UpstreamClaims,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    onFirstSignIn: (tx: StoreParts, person: IdentityRecord) => Promise<Change<any>[]>,
  ): Promise<IdentityRecord> {
    const existing = await store.identities.get(uid);
    if (existing) return existing;
    const now = deps.now();
    const verified = claims.email_verified === true && typeof claims.email === "string";
    const person: IdentityRecord = {
      uid,
      parentUid,
      name: personName(claims),
      description: "",
      email: verified ? (claims.email as string) : "",
      emailUnverified: !verified && typeof claims.email === "string" ? claims.email : "",
      company: "",
      relationship: {
        kind: "claimMatch",
        claimMatch: {
          issuer: claims.iss,
          issuerPattern: "",
          subject: claims.sub,
          subjectPattern: "",
          audience: "",
          audiencePattern: "",
          claims: {},
          claimPatterns: {},
        },
      },
      lastSeenTime: now,
      createTime: now,
      updateTime: now,
    };
    try {
      await committed(
        deps,
        ctx,
        store.transaction(async (tx) => {
          await tx.identities.create(person);
          const changes = await onFirstSignIn(tx, person);
          const created = { kind: "identity", action: "created", subject: uid, actor: uid } as const;
          await emit(tx, deps, ctx, [{ ...created, resource: { schema: IdentitySchema, message: identityMessage(person) } }, ...changes]);
        }),
      );
    } catch (err) {
      // Two first sign-ins racing: the other one registered the person.
      const raced = await store.identities.get(uid);
      if (!raced) throw err;
      return raced;
    }
    return person;
  }

  return {
    signIn: (ctx, claims) => register(ctx, userIdentityUid(claims.iss, claims.sub), null, claims, async () => []),
    signInThrough: (ctx, provider, claims) =>
      register(ctx, providerUserUid(provider, claims.sub), provider.parentUid, claims, (tx, person) =>
        bindDefaultRole(tx, provider, person),
      ),
  };
}
