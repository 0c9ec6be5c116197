import { randomBytes } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { SecurityTokenService } from "../../../gen/platformapi/oidc/v1/sts_pb.js";
import type { UpstreamClaims } from "../../auth/upstream.js";
import { claimsMatch, compilePattern } from "../../domain/claim-match.js";
import { invalidField, PermissionDeniedError, UnauthenticatedError } from "../../domain/errors.js";
import { requireUidp } from "../../domain/hierarchy.js";
import { rootOf } from "../../domain/uidp.js";
import type { IdentityRecord } from "../../store/store.js";
import type { ServiceDeps } from "../context.js";
import { timestampFromMs } from "../time.js";
import { audiencesOf, createPeople } from "./people.js";

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
  const people = createPeople(deps);

  async function signIn(ctx: HandlerContext, token: string): Promise<IdentityRecord> {
    const claims = await deps.upstream.verify(token, (iss) => deps.signIn.issuers.includes(iss));
    const auds = audiencesOf(claims);
    if (!auds.some((a) => deps.signIn.audiences.includes(a))) {
      throw new UnauthenticatedError("Unauthenticated: the ID token's audience is not one this server accepts for sign-in");
    }
    return people.signIn(ctx, claims);
  }

  /**
   * Signs a person in through an organization's identity provider: the ID
   * token must come from the provider's issuer for its client (people.ts
   * registers them in its group on first sign-in).
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
    return people.signInThrough(ctx, provider, claims);
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
      // A person signing in starts a refresh family; a workload assuming an identity exchanges again instead.
      const refreshToken = req.identity === "" ? await deps.refreshTokens.start(identity.uid, STS_CLIENT_ID, newFamilyId()) : "";
      return { token: issued.token, refreshToken, expiry: timestampFromMs(issued.expiresAt) };
    },

    async exchangeRefreshToken(req, ctx) {
      const token = refreshBearer(ctx);
      if (!req.aud.every((a) => a === deps.urls.base)) throw invalidField("aud", `must be this API's base URL, ${deps.urls.base}`);
      const rotated = await deps.refreshTokens.rotate(token);
      await store.identities.touchLastSeen(rotated.identityUid, deps.now(), ctx.signal);
      const issued = await deps.tokens.mint(rotated.identityUid);
      return { token: { token: issued.token, expiry: timestampFromMs(issued.expiresAt) }, refreshToken: { token: rotated.refreshToken } };
    },
  };
}

/** The client a refresh family begun by /sts/exchange is issued to (the OAuth clients are sign-in's). */
const STS_CLIENT_ID = "sts";

/** A new refresh family's id: 128 random bits. */
const newFamilyId = () => randomBytes(16).toString("base64url");

/** The refresh token ExchangeRefreshToken's caller sends as its bearer token. */
function refreshBearer(ctx: HandlerContext): string {
  const m = BEARER.exec(ctx.requestHeader.get("authorization")?.trim() ?? "");
  if (!m) throw new UnauthenticatedError("Unauthenticated: send the refresh token as Authorization: Bearer <token>");
  return m[1]!;
}
