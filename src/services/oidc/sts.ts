import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { IdentitySchema } from "../../../gen/platformapi/iam/v2beta1/identities_pb.js";
import type { RoleBindingSchema } from "../../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import type { SecurityTokenService } from "../../../gen/platformapi/oidc/v1/sts_pb.js";
import type { UpstreamClaims } from "../../auth/upstream.js";
import { claimsMatch, compilePattern } from "../../domain/claim-match.js";
import { invalidField, PermissionDeniedError, UnauthenticatedError } from "../../domain/errors.js";
import { requireUidp } from "../../domain/hierarchy.js";
import { newChildUid, rootOf } from "../../domain/uidp.js";
import { providerUserUid, userIdentityUid } from "../../domain/user-identity.js";
import type { IdentityProviderRecord, IdentityRecord, RoleBindingRecord, StoreParts } from "../../store/store.js";
import type { ServiceDeps } from "../context.js";
import { committed, emit, type Change } from "../events.js";
import { roleBindingCreated } from "../iam/hydrate.js";
import { identityMessage } from "../iam/identity-messages.js";
import { roleAppliesAt } from "../iam/role-refs.js";
import { timestampFromMs } from "../time.js";

const BEARER = /^Bearer[ ]+(\S+)$/i;

function upstreamToken(ctx: HandlerContext): string {
  const m = BEARER.exec(ctx.requestHeader.get("authorization")?.trim() ?? "");
  if (!m) throw new UnauthenticatedError("Unauthenticated: send the upstream OIDC token as Authorization: Bearer <token>");
  return m[1]!;
}

/** One answer for a missing identity and a token that may not assume it, so uids cannot be probed. */
const cannotAssume = (uid: string) => new PermissionDeniedError(`Permission denied: the token may not assume identity ${uid}`);

/** One answer for a missing provider and a token it does not accept, so provider uids cannot be probed. */
const cannotSignInThrough = (uid: string) =>
  new PermissionDeniedError(`Permission denied: the token may not sign in through identity provider ${uid}`);

/** The token's audiences as a list. */
const audiencesOf = (claims: UpstreamClaims) => (Array.isArray(claims.aud) ? claims.aud : claims.aud === undefined ? [] : [claims.aud]);

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

/**
 * Checks that an upstream OIDC token may assume the identity uid (its
 * claimMatch or staticKeys relationship) and returns the identity; one
 * PermissionDeniedError for a missing identity and a token that may not
 * assume it. The exchange and the registry's token endpoint both use it.
 */
export function identityAssumer(
  deps: Pick<ServiceDeps, "store" | "upstream" | "urls" | "now">,
): (uid: string, token: string) => Promise<IdentityRecord> {
  const { store } = deps;
  async function assume(uid: string, token: string): Promise<IdentityRecord> {
    try {
      return await assumeOrThrow(uid, token);
    } catch (err) {
      // A token that does not verify gets the same answer as a missing identity.
      if (err instanceof UnauthenticatedError) throw cannotAssume(uid);
      throw err;
    }
  }

  async function assumeOrThrow(uid: string, token: string): Promise<IdentityRecord> {
    const identity = await store.identities.get(uid);
    if (!identity) throw cannotAssume(uid);
    const rel = identity.relationship;
    if (rel.kind === "claimMatch") {
      const m = rel.claimMatch;
      const trust = (iss: string) =>
        m.issuer !== "" ? iss === m.issuer : iss.length <= 4096 && compilePattern(m.issuerPattern).matches(iss);
      // The identity's organization chose the issuers: their fetches are its share of fetch capacity.
      const claims = await deps.upstream.verify(token, trust, rootOf(identity.uid));
      if (!claimsMatch(m, claims, deps.urls.auth)) throw cannotAssume(uid);
    } else {
      const k = rel.staticKeys;
      if (k.expirationTime <= deps.now()) throw cannotAssume(uid);
      const claims = await deps.upstream.verifyStatic(token, k.issuerKeys, k.issuer);
      const auds = audiencesOf(claims);
      const wanted = k.audiences.length > 0 ? k.audiences : [deps.urls.auth];
      if (claims.sub !== k.subject || !auds.some((a) => wanted.includes(a))) throw cannotAssume(uid);
    }
    return identity;
  }
  return assume;
}

/**
 * SecurityTokenService: exchanges an upstream OIDC token for a one-hour API
 * token whose audience is the API's base URL. With `identity` it assumes that identity (claimMatch or
 * staticKeys); with `identity_provider` it signs a person in through that
 * organization's provider, registering them in its group; with neither, it
 * signs a person in from a trusted issuer, registering their root-level
 * identity on first sign-in. When the upstream token could not be checked
 * (its issuer did not answer, or the organization's share of fetch capacity
 * is in use) the answer is UNAVAILABLE, not a refusal: see upstream.ts.
 * An upstream token claiming a longer life than its kind allows (static keys
 * 24 h, online issuers 7 days: upstream.ts) is refused as an expired one is.
 */
export function createStsService(deps: ServiceDeps): ServiceImpl<typeof SecurityTokenService> {
  const { store } = deps;

  const assume = identityAssumer(deps);

  async function signIn(ctx: HandlerContext, token: string): Promise<IdentityRecord> {
    const claims = await deps.upstream.verify(token, (iss) => deps.signIn.issuers.includes(iss));
    const auds = audiencesOf(claims);
    if (!auds.some((a) => deps.signIn.audiences.includes(a))) {
      throw new UnauthenticatedError("Unauthenticated: the ID token's audience is not one this server accepts for sign-in");
    }
    return register(ctx, userIdentityUid(claims.iss, claims.sub), null, claims, async () => []);
  }

  /**
   * Signs a person in through an organization's identity provider: the ID
   * token must come from the provider's issuer for its client. On first
   * sign-in the person is registered in the provider's group and gets its
   * default role there, in one transaction.
   */
  async function signInThrough(ctx: HandlerContext, providerUid: string, token: string): Promise<IdentityRecord> {
    const provider = await store.identityProviders.get(providerUid);
    if (!provider) throw cannotSignInThrough(providerUid);
    let claims: UpstreamClaims;
    try {
      claims = await deps.upstream.verify(token, (iss) => iss === provider.oidc.issuer, rootOf(provider.parentUid));
    } catch (err) {
      if (err instanceof UnauthenticatedError) throw cannotSignInThrough(providerUid);
      throw err;
    }
    if (!audiencesOf(claims).includes(provider.oidc.clientId)) throw cannotSignInThrough(providerUid);
    return register(ctx, providerUserUid(provider, claims.sub), provider.parentUid, claims, (tx, person) =>
      bindDefaultRole(tx, provider, person),
    );
  }

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
    async exchange(req, ctx) {
      const token = upstreamToken(ctx);
      if (req.aud.length === 0) throw invalidField("aud", "Audience must be specified");
      if (!req.aud.every((a) => a === deps.urls.base)) throw invalidField("aud", `must be this API's base URL, ${deps.urls.base}`);
      if (req.identityProvider !== "" && req.identity !== "") {
        throw invalidField("identity_provider", "cannot be combined with identity");
      }
      const identity =
        req.identity !== ""
          ? await assume(requireUidp("identity", req.identity), token)
          : req.identityProvider !== ""
            ? await signInThrough(ctx, requireUidp("identity_provider", req.identityProvider), token)
            : await signIn(ctx, token);
      await store.identities.touchLastSeen(identity.uid, deps.now(), ctx.signal);
      const issued = await deps.tokens.mint(identity.uid);
      return { token: issued.token, expiry: timestampFromMs(issued.expiresAt) };
    },
  };
}
