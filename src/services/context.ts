import type { HandlerContext } from "@connectrpc/connect";
import type { Authorizer } from "../auth/authorizer.js";
import { principalKey, type Principal } from "../auth/principal.js";
import type { RefreshTokens } from "../auth/refresh-tokens.js";
import type { TokenService } from "../auth/tokens.js";
import type { UpstreamVerifier } from "../auth/upstream.js";
import { UnauthenticatedError } from "../domain/errors.js";
import type { IssuerPolicy } from "../domain/issuer.js";
import type { Store } from "../store/store.js";
import type { EventDeps } from "./events.js";
import type { PageTokenSealer } from "./paging/page-token.js";

/** What every service implementation is built from. */
export interface ServiceDeps {
  store: Store;
  /** Capability checks beyond the method's declared rule (lists, references, escalation). */
  authz: Authorizer;
  pageTokens: PageTokenSealer;
  /** Milliseconds since the epoch; injectable for tests. */
  now: () => number;
  /** Issues and verifies this server's API tokens. */
  tokens: TokenService;
  /** People's refresh tokens: issued at sign-in, rotated by ExchangeRefreshToken and /oauth/token. */
  refreshTokens: RefreshTokens;
  /** Verifies OIDC tokens of other issuers. */
  upstream: UpstreamVerifier;
  /** The API's base URL (audience of our tokens) and the auth URL (their issuer). */
  urls: { base: string; auth: string };
  /** Who may sign in as a person: trusted issuers and the audiences their ID tokens must carry. */
  signIn: { issuers: readonly string[]; audiences: readonly string[] };
  /** How issuers that users supply (identity claim matches, identity providers) are restricted. */
  issuerPolicy: IssuerPolicy;
  /** Root organizations one identity may have created (the administrator: no limit). */
  maxOrgsPerIdentity: number;
  /** Subscriptions one organization's tree may have (PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG). */
  maxSubscriptionsPerOrg: number;
  /** How mutations write their events and the feed renders them. */
  events: EventDeps;
  /** Told of each invite code refused for too many failures, with the limit reached (metrics). */
  onInviteRefused?: (reason: "per_caller" | "per_address") => void;
}

/** The principal the service wrapper set for this call. */
export function principalOf(ctx: HandlerContext): Principal {
  const principal = ctx.values.get(principalKey);
  if (!principal) throw new UnauthenticatedError();
  return principal;
}
