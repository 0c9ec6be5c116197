import { randomBytes } from "node:crypto";
import { createRegistry, type DescMessage, type Registry } from "@bufbuild/protobuf";
import type { FastifyBaseLogger } from "fastify";
import { CapabilitySchema, type Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { adminSubject, createBearerAuthenticator } from "../auth/authenticator.js";
import { createAuthorizer } from "../auth/authorizer.js";
import type { Authenticator } from "../auth/principal.js";
import { createCallRateLimiter } from "../auth/rate-limit.js";
import { createRefreshTokens } from "../auth/refresh-tokens.js";
import { startSignInSweep } from "../auth/sign-in-sweep.js";
import { RelyingParty } from "../auth/sign-in/relying-party.js";
import { TokenService } from "../auth/tokens.js";
import { UpstreamVerifier } from "../auth/upstream.js";
import { responseJson } from "../codec/json.js";
import type { Config } from "../config.js";
import { createDeliverer, type Deliverer } from "../delivery/deliverer.js";
import { UnavailableError } from "../domain/errors.js";
import type { SignInDeps } from "../server/http/sign-in/index.js";
import { Upstreams } from "../server/http/sign-in/upstreams.js";
import type { WrapOptions } from "../server/wrap.js";
import type { ServiceDeps } from "../services/context.js";
import { FeedCursors } from "../services/events/feed-cursor.js";
import { startEventRetention, type EventRetention } from "../services/events/retention.js";
import { createFeedNotifier } from "../services/events/watch.js";
import { CONTRACT_FILES } from "../services/index.js";
import { createPeople } from "../services/oidc/people.js";
import { PageTokenSealer } from "../services/paging/page-token.js";
import type { Store } from "../store/store.js";
import type { Observability } from "./observability.js";

/** What the dependencies are built from. */
export interface DependencyOptions {
  config: Config;
  /** The store every part uses (observed, and traced when tracing is on), already prepared (prepareStore). */
  store: Store;
  now: () => number;
  observability: Observability;
  /** The server's logger, for the background work's failures: it exists before any of them can happen. */
  log: () => FastifyBaseLogger;
  /** Wraps the bearer-token authenticator (tests use it to hold calls in flight). */
  decorateAuthenticator?: (inner: Authenticator) => Authenticator;
}

/** What the services, and the routes served beside them, are built from. */
export interface Dependencies {
  /** What every service is built from (createServiceBindings), and the registry's routes too. */
  services: ServiceDeps;
  /** The contract's message types: the JSON of events, and google.protobuf.Any in requests. */
  registry: Registry;
  /** The uid the built-in administrator acts as. */
  admin: string;
  /** Authenticates a bearer token: every call's, and the registry token endpoint's `_token` logins. */
  authenticator: Authenticator;
  /** Each identity's share of calls (none with PLATFORM_CALLS_PER_IDENTITY=0). */
  callLimiter: WrapOptions["callLimiter"];
  /** What the sign-in routes are built from. */
  signIn: SignInDeps;
  /** This process's webhook deliveries: built idle, started once the server listens (PLATFORM_DELIVERIES). */
  deliverer: Deliverer;
  /** This process's pruning of old events, running from the start. */
  retention: EventRetention;
  /** Stops the background work (retention, the sign-in sweep, deliveries, Watch streams); resolves before the store may close. */
  stopBackground(): Promise<void>;
}

/**
 * Builds what the services depend on from the configuration and the store:
 * this server's tokens, the authenticator and the authorizer, refresh tokens,
 * the upstream verifier, the feed's cursors and notifier, the page-token
 * sealer, the sign-in relying party and people's registration, the call rate
 * limiter, and the background work every process does (event retention, the
 * sign-in sweep, webhook deliveries).
 */
export async function buildDependencies(opts: DependencyOptions): Promise<Dependencies> {
  const { config, store, now, log } = opts;
  const { metrics, tracing, requests } = opts.observability;
  const pageTokens = new PageTokenSealer(await store.keys.secret("page-token-key", () => randomBytes(32)), now);
  const tokens = await TokenService.open(store.keys, {
    issuer: config.authUrl,
    audience: config.baseUrl,
    now,
    onCache: (hit) => metrics.tokenCache.inc(hit ? "hit" : "miss"),
    // A rotation or retirement by any process is seen by the next request (which refreshes the versions first).
    keysVersion: () => store.version(["signing_keys"]),
  });
  const admin = await adminSubject(store.keys);
  const bearer = createBearerAuthenticator(tokens, admin, async (uid) => (await store.identities.get(uid)) !== null);
  // Its refusals are logged at debug, with their request ids.
  const authenticator = requests.logRefusals(opts.decorateAuthenticator?.(bearer) ?? bearer, log);
  const allCapabilities = CapabilitySchema.values.map((v) => v.number as Capability).filter((c) => c !== 0);
  const authorizer = createAuthorizer(store, allCapabilities, metrics.countCache("authorization"));

  const registry = createRegistry(...CONTRACT_FILES);
  const feedNotifier = createFeedNotifier();
  const eventCursors = await FeedCursors.open(store.keys);
  const retention = startEventRetention(store.events, {
    retentionMs: config.eventRetentionMs,
    now,
    // A database outage is logged once, by logDatabaseOutages, not once per loop it stops.
    onError: (err) => {
      if (!(err instanceof UnavailableError)) log().warn({ err }, "pruning old events failed; retried in a minute");
    },
  });
  const signInSweep = startSignInSweep(store, {
    refresh: config.refresh,
    now,
    onError: (err) => {
      if (!(err instanceof UnavailableError))
        log().warn({ err }, "sweeping expired sign-ins and refresh tokens failed; retried in a minute");
    },
  });
  const deliverer = createDeliverer({
    store,
    authz: authorizer,
    tokens,
    source: config.baseUrl,
    policy: { allowLoopback: config.allowLoopbackIssuers },
    now,
    concurrency: config.deliveries.concurrency,
    leaseMs: config.deliveries.leaseMs,
    pollMs: config.deliveries.pollMs,
    onAttempt: (_subscription, attempt, event) => {
      metrics.deliveryAttempts.inc(attempt.outcome);
      metrics.deliveryLag.observe(Math.max(0, attempt.time - event.time) / 1000);
    },
    onError: (err) => {
      if (!(err instanceof UnavailableError)) log().error({ err }, "subscription delivery failed; retried shortly");
    },
  });
  metrics.watchSubscriptionLags(() => deliverer.lags());
  // The operator's sign-in providers are user issuers: the operator trusts them as given (any address), and they vouch for emails.
  const userIssuers = [...new Set([...config.userIssuers, ...config.signInProviders.map((p) => p.issuer)])];
  const services: ServiceDeps = {
    store,
    authz: authorizer,
    pageTokens,
    now,
    tokens,
    refreshTokens: createRefreshTokens({ store, now, settings: config.refresh }),
    upstream: new UpstreamVerifier(now, {
      allowLoopback: config.allowLoopbackIssuers,
      operatorIssuers: userIssuers,
      newIssuerTimeoutMs: config.issuerFetches.newIssuerTimeoutMs,
      fetchSlots: config.issuerFetches,
    }),
    urls: { base: config.baseUrl, auth: config.authUrl },
    signIn: { issuers: userIssuers, audiences: config.userAudiences },
    issuerPolicy: { allowLoopback: config.allowLoopbackIssuers },
    maxOrgsPerIdentity: config.maxOrgsPerIdentity,
    maxSubscriptionsPerOrg: config.maxSubscriptionsPerOrg,
    onInviteRefused: (reason) => metrics.inviteRefusals.inc(reason),
    events: {
      json: (schema: DescMessage, message: unknown) => responseJson(schema, message, registry),
      source: config.baseUrl,
      cursors: eventCursors,
      retentionMs: config.eventRetentionMs,
      written: (events) => {
        for (const e of events) metrics.eventsWritten.inc(e.kind);
        // The loop it wakes starts traces of its own rather than joining the call that committed.
        if (tracing) tracing.detached(() => deliverer.wake());
        else deliverer.wake();
      },
      watch: {
        notifier: feedNotifier,
        pollMs: config.eventWatch.pollMs,
        maxStreamMs: config.eventWatch.maxStreamMs,
        heartbeatMs: config.eventWatch.heartbeatMs,
        maxPerIdentity: config.eventWatch.perIdentity,
        maxPerOrganization: config.eventWatch.perOrganization,
        maxTotal: config.eventWatch.total,
      },
    },
  };
  metrics.watchCache("issuer_discovery", () => services.upstream.discoveryLookups);
  metrics.watchCache("issuer_static_keys", () => services.upstream.staticKeyLookups);
  const perSecond = config.callsPerIdentity;
  return {
    services,
    registry,
    admin,
    authenticator,
    callLimiter:
      perSecond > 0
        ? { perSecond, limiter: createCallRateLimiter({ perSecond, burst: 2 * perSecond, now: () => performance.now() }) }
        : undefined,
    signIn: {
      store,
      tokens,
      now,
      people: createPeople(services),
      refreshTokens: services.refreshTokens,
      rp: new RelyingParty({
        redirectUri: `${config.authUrl}/sign-in/callback`,
        policy: services.issuerPolicy,
        upstream: services.upstream,
        now,
      }),
      upstreams: new Upstreams(store, config.signInProviders),
      authUrl: config.authUrl,
      secureCookies: config.authUrl.startsWith("https:") || config.tls !== undefined,
      pendingPerAddress: config.signInPendingPerAddress,
    },
    deliverer,
    retention,
    stopBackground: async () => {
      retention.stop();
      signInSweep.stop();
      // Before the store closes: a post cut short is simply posted again by the next holder of its lease.
      await deliverer.stop();
      feedNotifier.close();
    },
  };
}
